//! Where verified chunks go: a [`Sink`] takes each chunk once it verified, in the order
//! chunks verify, and may say what it already holds from an earlier run.
//!
//! Two sinks exist: `bavl_store::Ingest`, which writes each chunk into the files of the
//! new store as it arrives (the state never held in memory; its directory is the resume
//! state of a killed sync), and [`bavl_core::Restore`], which keeps every chunk in memory
//! to rebuild a [`bavl_core::Tree`] (the state must fit in memory).
//!
//! The caller of a sink guarantees: every chunk given verified against the sink's root,
//! and no index is given twice (nor one [`Sink::held`] named).

use bavl_core::{Hasher, Restore, VerifiedChunk};
use bavl_store::Ingest;

use crate::syncer::Shape;

/// A sink's failure (a full disk, say): the sync stops.
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Chunks a sink holds from an earlier run: never fetched again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// What the first of them proved about the tree.
    pub shape: Shape,
    /// Their indices.
    pub indices: Vec<u64>,
}

/// Where verified chunks go. See the module documentation.
pub trait Sink: Send {
    /// What the sink holds already (`None` if nothing).
    fn held(&self) -> Option<Held>;
    /// Keeps a verified chunk.
    fn add(&mut self, chunk: VerifiedChunk) -> Result<(), SinkError>;
    /// Makes every chunk added so far durable, for a sink on disk: a later run resuming
    /// from it does not fetch them again. Called now and then, and at the end.
    fn flush(&mut self) -> Result<(), SinkError>;
}

/// The tree in memory: chunks are kept until `Restore::finish` links them. It holds
/// nothing at the start (give it empty).
impl<H: Hasher + Send> Sink for Restore<H> {
    fn held(&self) -> Option<Held> {
        None
    }

    fn add(&mut self, chunk: VerifiedChunk) -> Result<(), SinkError> {
        self.add_verified(chunk)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// The new store's files, written as chunks arrive: its directory is what a killed sync
/// resumes from (every chunk [`Ingest::flush`] made durable is held, never fetched again).
/// [`Ingest::finish`] then installs the store, its root checked.
impl Sink for Ingest {
    fn held(&self) -> Option<Held> {
        let (chunk_count, capacity) = (self.chunk_count()?, self.capacity()?);
        let indices: Vec<u64> = (0..chunk_count).filter(|&i| self.have(i)).collect();
        // The journal keeps no key count: the first chunk fetched tells it.
        let shape = Shape { chunk_count, capacity, key_count: None };
        (!indices.is_empty()).then_some(Held { shape, indices })
    }

    fn add(&mut self, chunk: VerifiedChunk) -> Result<(), SinkError> {
        self.add_verified(chunk)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        Ingest::flush(self)?;
        Ok(())
    }
}
