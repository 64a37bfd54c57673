//! Error types: one small enum per operation.

use bavl_core::{ProofError, RestoreError};
use thiserror::Error;

/// Why a manifest or listing was refused. Its source is a liar (or on another chain).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ManifestError {
    #[error("not a valid JSON document: {0}")]
    Json(String),
    #[error("protocol format {0} is not supported (expected 1)")]
    Format(u32),
    #[error("asked for version {asked}, answered version {answered}")]
    WrongVersion { asked: u64, answered: u64 },
    #[error("the manifest is of another root than the trusted one")]
    WrongRoot,
    #[error("field {0} is malformed or out of range")]
    Field(&'static str),
    /// Well formed, but contradicted by a verified chunk.
    #[error("contradicted by verified chunks: {0}")]
    Contradicted(&'static str),
}

/// Why a source was banned: its first invalid response.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BanReason {
    #[error("chunk {index} rejected: {source}")]
    InvalidChunk { index: u64, source: ProofError },
    #[error("manifest rejected: {0}")]
    InvalidManifest(ManifestError),
    #[error("chunk {index} is {len} bytes, its manifest says {claimed}")]
    SizeMismatch { index: u64, len: u64, claimed: u64 },
    #[error("response {0}")]
    Failure(crate::FailureKind),
}

/// Why a source was dropped without being called a liar.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DropReason {
    #[error("it does not hold the version (HTTP {0})")]
    NotFound(u16),
    #[error("unreliable: {failures} transient failures, the last: {last}")]
    Unreliable { failures: u32, last: crate::FailureKind },
    /// It had been asked for chunk `index` and had not answered when a copy asked later
    /// of a source that delivers had verified: it held work it did not do.
    #[error("outrun: chunk {index} came from another source asked later, before it answered")]
    Outrun { index: u64 },
    /// When the sync completed, it had been asked `requests` times and had delivered no
    /// chunk that verified.
    #[error("unproductive: asked {requests} times, delivered no verified chunk")]
    Unproductive { requests: u64 },
}

/// Why a sync cannot complete.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SyncError {
    #[error(
        "no usable source left ({banned} banned, {dropped} dropped); {missing} chunks missing"
    )]
    NoSources { banned: usize, dropped: usize, missing: u64 },
    #[error("chunk {index} is larger than the limit of {limit} bytes at every source")]
    ChunkTooLarge { index: u64, limit: u64 },
    #[error("the sync has not completed")]
    NotDone,
    #[error(transparent)]
    Restore(#[from] RestoreError),
}

/// Options that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OptionsError {
    #[error("{0}")]
    Invalid(&'static str),
}
