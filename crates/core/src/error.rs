//! Error types: one small enum per operation, all convertible into [`Error`].

use thiserror::Error;

use crate::page::PageRef;

/// Why untrusted bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended before a field was complete.
    #[error("input truncated at byte {at}")]
    Truncated { at: usize },
    /// A varint was longer than 64 bits or not minimally encoded.
    #[error("malformed varint at byte {at}")]
    BadVarint { at: usize },
    /// A field's value lies outside its allowed range.
    #[error("{what} = {value} out of range at byte {at}")]
    OutOfRange { what: &'static str, value: u64, at: usize },
    /// A tag byte that is not defined here.
    #[error("unknown {what} tag {tag:#04x} at byte {at}")]
    BadTag { what: &'static str, tag: u8, at: usize },
    /// Bytes left over after a complete value.
    #[error("trailing bytes at byte {at}")]
    TrailingBytes { at: usize },
    /// Nesting deeper than any valid tree can be.
    #[error("structure nested too deeply at byte {at}")]
    TooDeep { at: usize },
    /// The encoding is of another format version.
    #[error("format version {found} is not supported (expected {expected})")]
    Version { found: u8, expected: u8 },
}

/// Why a proof or a chunk was rejected. Each variant is one of the stable error kinds of
/// `docs/design.md` §3 ("Order of checks and error kinds"), which every verifier, in any
/// language, reports for the same input: [`ProofError::kind`] names it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProofError {
    /// The caller's own inputs are outside the limits (a key or bound key not 1..=1024
    /// bytes, a value over 16 MiB, an inverted range); checked before the proof is read.
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    /// The bytes are not a well-formed encoding.
    #[error("malformed: {0}")]
    Decode(#[from] DecodeError),
    /// The bytes are well formed but hash to another root.
    #[error("root mismatch: the proof is for another tree or version, or was altered")]
    RootMismatch,
    /// The proof is of another kind than the verifier expects.
    #[error("expected a {expected} proof, found kind {found}")]
    WrongKind { expected: &'static str, found: u8 },
    /// The proof is well formed but does not have the shape its kind requires.
    #[error("invalid proof structure: {0}")]
    Structure(&'static str),
    /// A chunk that verifies, but at another index than the one asked for.
    #[error("chunk is index {found}, expected index {expected}")]
    WrongIndex { expected: u64, found: u64 },
}

impl ProofError {
    /// Every error kind's name, in the order of `docs/design.md` §3.
    pub const KINDS: [&'static str; 6] =
        ["Input", "Decode", "WrongKind", "Structure", "RootMismatch", "WrongIndex"];

    /// The stable name of the error kind (`docs/design.md` §3): what verifiers in other
    /// languages report for the same input, and what the vectors record.
    pub fn kind(&self) -> &'static str {
        self.name()
    }

    /// A stable name for the kind of rejection, for reports and logs (same as
    /// [`ProofError::kind`]).
    pub fn name(&self) -> &'static str {
        match self {
            ProofError::Input(_) => "Input",
            ProofError::Decode(_) => "Decode",
            ProofError::RootMismatch => "RootMismatch",
            ProofError::WrongKind { .. } => "WrongKind",
            ProofError::Structure(_) => "Structure",
            ProofError::WrongIndex { .. } => "WrongIndex",
        }
    }
}

/// Why a key or value was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InputError {
    /// Keys must be at least one byte.
    #[error("empty key")]
    EmptyKey,
    /// Key longer than [`crate::MAX_KEY_LEN`].
    #[error("key of {len} bytes exceeds the limit of {max}")]
    KeyTooLong { len: usize, max: usize },
    /// Value longer than [`crate::MAX_VALUE_LEN`].
    #[error("value of {len} bytes exceeds the limit of {max}")]
    ValueTooLong { len: usize, max: usize },
    /// A range whose lower bound lies above its upper bound.
    #[error("inverted range: the lower bound lies above the upper bound")]
    InvertedRange,
    /// Chunk capacity outside [`crate::MIN_CAPACITY`]..=[`crate::MAX_CAPACITY`].
    #[error("chunk capacity {0} outside {min}..={max}", min = crate::MIN_CAPACITY, max = crate::MAX_CAPACITY)]
    Capacity(u32),
    /// The operation needs chunk `index`, whose body is not in memory: load it first
    /// (`Tree::page_in`). Nothing was changed.
    #[error("chunk {index} is not resident: load it before this operation")]
    NotResident { index: u64 },
}

/// Why a proof of one key was not made ([`crate::Snapshot::prove_membership`],
/// [`crate::Snapshot::prove_absence`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProveError {
    /// A membership proof was asked for a key that is absent.
    #[error("the key is absent: no membership proof")]
    KeyAbsent,
    /// An absence proof was asked for a key that is present.
    #[error("the key is present: no absence proof")]
    KeyPresent,
    /// The proof needs a chunk whose body is not in memory (a paged version): load it
    /// first. Never reported as "absent" or "present".
    #[error(transparent)]
    NotResident(#[from] PageRef),
}

impl ProveError {
    /// The absent chunk to load before asking again, if that is why.
    pub fn page(&self) -> Option<&PageRef> {
        match self {
            ProveError::NotResident(p) => Some(p),
            _ => None,
        }
    }
}

/// Why a chunk was not exported ([`crate::Snapshot::export_chunk`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChunkError {
    /// There is no chunk of that index in this version.
    #[error("no chunk {index}: the version has {count} chunks")]
    OutOfRange { index: u64, count: u64 },
    /// The chunk's body is not in memory (a paged version): load it first.
    #[error(transparent)]
    NotResident(#[from] PageRef),
}

impl ChunkError {
    /// The absent chunk to load before asking again, if that is why.
    pub fn page(&self) -> Option<&PageRef> {
        match self {
            ChunkError::NotResident(p) => Some(p),
            _ => None,
        }
    }
}

/// Why a restore could not accept a chunk or finish.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RestoreError {
    /// The chunk failed verification against the trusted root.
    #[error("chunk {index} rejected: {source}")]
    Invalid { index: u64, source: ProofError },
    /// The index is beyond the tree's chunk count.
    #[error("chunk index {index} out of range (the tree has {count} chunks)")]
    OutOfRange { index: u64, count: u64 },
    /// This chunk was already added.
    #[error("chunk {0} was already added")]
    Duplicate(u64),
    /// `finish` was called before every chunk arrived.
    #[error("{missing} of {count} chunks missing (first: {first})")]
    Missing { missing: u64, count: u64, first: u64 },
    /// The chunks verified but do not fit together (cannot happen for honest roots).
    #[error("the verified chunks do not form a consistent tree: {0}")]
    Inconsistent(&'static str),
}

/// The umbrella error of the crate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Proof(#[from] ProofError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Restore(#[from] RestoreError),
    #[error(transparent)]
    Prove(#[from] ProveError),
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    /// A read needed a chunk that is not resident.
    #[error(transparent)]
    NotResident(#[from] PageRef),
}
