//! The store's typed errors.

use std::io;

use bavl_core::InputError;

/// What went wrong in a store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The operating system refused an operation.
    #[error("I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A file of the store is damaged: the store refuses to guess.
    #[error("corrupted store: {file} at byte {offset}: {what}")]
    Corrupted { file: String, offset: u64, what: String },
    /// An earlier write or sync failed, so what is on disk is uncertain; reopen the store.
    #[error("the store refuses writes after an earlier I/O failure ({0}); reopen it")]
    Poisoned(String),
    /// The store was opened read-only (`Options::read_only`).
    #[error("the store at {0} is open read-only: no write is possible")]
    ReadOnly(String),
    /// A key or value the tree refuses (nothing was changed).
    #[error(transparent)]
    Input(#[from] InputError),
    /// A version that was never committed, or was pruned.
    #[error("version {version} is not retained (retained: {oldest}..={newest})")]
    UnknownVersion { version: u64, oldest: u64, newest: u64 },
    /// Options that do not fit the store or each other.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The directory holds an unfinished ingest or import (`docs/design.md` §8.8): it is
    /// not a store until [`crate::Ingest::finish`] makes it one.
    #[error("{0}")]
    UnfinishedIngest(String),
    /// [`crate::Ingest::finish`] before every chunk was added (nothing was written).
    #[error("the ingest misses {missing} of {count} chunks (the first missing: {first})")]
    IngestIncomplete { missing: u64, count: u64, first: u64 },
    /// A limit of the store's formats was reached (a paged store's chunk file numbers:
    /// `docs/design.md` §8.5.1); nothing was written past it.
    #[error("store limit reached: {0}")]
    Exhausted(String),
}

impl StoreError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io { context: context.into(), source }
    }
    pub(crate) fn corrupted(file: &str, offset: u64, what: impl Into<String>) -> Self {
        StoreError::Corrupted { file: file.to_string(), offset, what: what.into() }
    }
}

/// Adds the operation's context to an I/O result.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::io(context(), e))
    }
}
