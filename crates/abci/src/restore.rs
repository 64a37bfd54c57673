//! Restoring a snapshot offered by CometBFT: each bundle verified in full before any of
//! it is kept, into a target: a [`bavl_store::Ingest`] (the application's: each verified
//! chunk's body appended to the new store's chunk files, its skeleton entry kept, so the
//! restore holds about 70 bytes a chunk and one bundle in memory, whatever the state's
//! size), or a tree in memory (sans-I/O, for tests and tools: the caller writes it).
//!
//! [`Restoring::offer`] accepts a snapshot only if its format is 1, its metadata is well
//! formed and matches its hash, and its root equals the app hash CometBFT's light client
//! verified. [`Restoring::apply`] splits a bundle and verifies every bavl chunk in it
//! against that root at its expected index; only when all verify are they kept. A bundle
//! that fails costs one chunk: the answer is `Retry` with the bundle refetched and its
//! sender rejected. A bundle that verifies but says the snapshot has another number of
//! chunks than its metadata means the metadata lied under the right root: the snapshot
//! is rejected.

use bavl_core::{Digest, Restore, Tree};
use bavl_store::Ingest;

use crate::snapshot::{split_bundle, Metadata, FORMAT};

/// Why an offered snapshot is refused, and how to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OfferError {
    #[error("format {0} (this application restores format {FORMAT})")]
    Format(u32),
    #[error("bad metadata: {0}")]
    Metadata(String),
    #[error("the snapshot's chunk count {found} disagrees with its metadata's {expected}")]
    ChunkCount { expected: u64, found: u32 },
    #[error("the snapshot hash does not match its metadata")]
    Hash,
    #[error("its root {found} is not the trusted app hash {trusted}")]
    Root { trusted: String, found: String },
}

/// What to answer to one bundle.
pub enum Applied {
    /// Kept; more bundles are missing.
    Accepted { bundles_left: u64 },
    /// Already kept (a repeat after a retry elsewhere).
    Duplicate,
    /// Refused: refetch it, from another sender.
    Retry { reason: String },
    /// The snapshot cannot be restored (its metadata lied under the right root).
    RejectSnapshot { reason: String },
    /// The last bundle: the restored tree, whose root is the trusted app hash.
    Complete(Box<Tree>),
    /// The last bundle of a restore into a store: every chunk is in the ingest; the
    /// caller finishes it ([`Ingest::finish`] checks the root).
    Ingested(Box<Ingest>),
    /// The target failed to write (I/O): nothing more can be kept.
    Failed { reason: String },
    /// The last bundle of a null restore (nothing verified, nothing kept).
    #[cfg(feature = "test-rigs")]
    CompleteNull,
}

/// Where verified chunks go.
enum Target {
    Memory(Restore),
    Store(Box<Ingest>),
    /// Handed to the caller (the last bundle was kept).
    Done,
}

/// A restore in progress.
pub struct Restoring {
    pub height: u64,
    pub meta: Metadata,
    target: Target,
    kept: Vec<bool>,
    left: u64,
    /// Bytes of the bundles kept so far.
    pub bytes: u64,
}

impl Restoring {
    /// Checks an offered snapshot (`format`, `chunks`, `hash`, `metadata` as CometBFT
    /// passes them) against the trusted `app_hash`.
    pub fn offer(
        height: u64,
        format: u32,
        chunks: u32,
        hash: &[u8],
        metadata: &[u8],
        app_hash: &[u8],
    ) -> Result<Restoring, OfferError> {
        if format != FORMAT {
            return Err(OfferError::Format(format));
        }
        let meta = Metadata::decode(metadata).map_err(|e| OfferError::Metadata(e.to_string()))?;
        if meta.bundles() != u64::from(chunks) {
            return Err(OfferError::ChunkCount { expected: meta.bundles(), found: chunks });
        }
        if meta.hash(height)[..] != *hash {
            return Err(OfferError::Hash);
        }
        if meta.root[..] != *app_hash {
            let (trusted, found) = (hex::encode(app_hash), hex::encode(meta.root));
            return Err(OfferError::Root { trusted, found });
        }
        let bundles = meta.bundles() as usize;
        Ok(Restoring {
            height,
            meta,
            target: Target::Memory(Restore::new(meta.root)),
            kept: vec![false; bundles],
            left: bundles as u64,
            bytes: 0,
        })
    }

    /// The trusted root.
    pub fn root(&self) -> Digest {
        self.meta.root
    }

    /// Restores into `ingest` (opened for this snapshot's root and height) instead of
    /// memory. An ingest resumed after a crash already holds chunks: every bundle whose
    /// chunks it all holds counts as kept (a repeat of it is accepted unread).
    pub fn into_store(mut self, ingest: Ingest) -> Restoring {
        for (i, kept) in self.kept.iter_mut().enumerate() {
            *kept = self.meta.bundle_range(i as u64).all(|j| ingest.have(j));
        }
        self.left = self.kept.iter().filter(|k| !**k).count() as u64;
        self.target = Target::Store(Box::new(ingest));
        self
    }

    /// Bundles kept so far (resumed ones included).
    pub fn bundles_kept(&self) -> u64 {
        self.kept.len() as u64 - self.left
    }

    /// The last bundle is kept: hands the target over.
    fn complete(&mut self) -> Applied {
        match std::mem::replace(&mut self.target, Target::Done) {
            Target::Memory(restore) => match restore.finish(self.meta.capacity) {
                Ok(tree) => Applied::Complete(Box::new(tree)),
                Err(e) => Applied::RejectSnapshot { reason: format!("finishing the restore: {e}") },
            },
            Target::Store(ingest) => Applied::Ingested(ingest),
            Target::Done => Applied::Duplicate,
        }
    }

    /// Verifies bundle `index` whole, then keeps it.
    pub fn apply(&mut self, index: u32, bytes: &[u8]) -> Applied {
        let i = u64::from(index);
        let Some(kept) = self.kept.get(index as usize).copied() else {
            return Applied::Retry { reason: format!("bundle {i} of {}", self.kept.len()) };
        };
        if kept {
            // A resumed restore may have held every bundle already: the first repeat
            // completes it.
            return if self.left == 0 { self.complete() } else { Applied::Duplicate };
        }
        let range = self.meta.bundle_range(i);
        let parts = match split_bundle(bytes, range.end - range.start) {
            Ok(parts) => parts,
            Err(e) => return Applied::Retry { reason: format!("bundle {i}: {e}") },
        };
        let mut verified = Vec::with_capacity(parts.len());
        for (j, part) in range.zip(parts) {
            match bavl_core::verify_chunk::<bavl_core::Sha256>(&self.meta.root, j, part) {
                Ok(c) if c.chunk_count != self.meta.chunk_count => {
                    let reason = format!(
                        "chunk {j} verifies and says the snapshot has {} chunks, its metadata {}",
                        c.chunk_count, self.meta.chunk_count
                    );
                    return Applied::RejectSnapshot { reason };
                }
                Ok(c) => verified.push(c),
                Err(e) => return Applied::Retry { reason: format!("bundle {i}, chunk {j}: {e}") },
            }
        }
        for c in verified {
            match &mut self.target {
                Target::Memory(restore) => {
                    if let Err(e) = restore.add_verified(c) {
                        // Unreachable for chunks verified against this root at distinct
                        // indexes.
                        return Applied::RejectSnapshot { reason: format!("bundle {i}: {e}") };
                    }
                }
                Target::Store(ingest) => {
                    if let Err(e) = ingest.add_verified(c) {
                        return Applied::Failed { reason: format!("bundle {i}: {e}") };
                    }
                }
                Target::Done => return Applied::Duplicate,
            }
        }
        self.kept[index as usize] = true;
        self.left -= 1;
        self.bytes += bytes.len() as u64;
        if self.left > 0 {
            return Applied::Accepted { bundles_left: self.left };
        }
        self.complete()
    }
}

/// The null restore, a measuring instrument only (`bavl-abci serve --restore-null`,
/// feature `test-rigs`): it
/// accepts every bundle of an offered snapshot without reading it, so a join with it
/// takes what CometBFT itself needs to move the bytes. It restores no state: the node
/// cannot follow the chain afterwards.
#[cfg(feature = "test-rigs")]
pub struct NullRestoring {
    pub height: u64,
    pub app_hash: Vec<u8>,
    kept: Vec<bool>,
    left: u64,
    pub bytes: u64,
}

#[cfg(feature = "test-rigs")]
impl NullRestoring {
    /// Accepts any snapshot of `chunks` bundles (at most CometBFT's 100,000).
    pub fn offer(height: u64, chunks: u32, app_hash: &[u8]) -> Result<Self, OfferError> {
        if chunks == 0 || u64::from(chunks) > crate::snapshot::MAX_BUNDLES {
            return Err(OfferError::Metadata(format!("{chunks} chunks")));
        }
        let kept = vec![false; chunks as usize];
        let app_hash = app_hash.to_vec();
        Ok(NullRestoring { height, app_hash, kept, left: u64::from(chunks), bytes: 0 })
    }

    fn apply(&mut self, index: u32, bytes: &[u8]) -> Applied {
        match self.kept.get_mut(index as usize) {
            None => Applied::Retry { reason: format!("bundle {index} of {}", self.kept.len()) },
            Some(true) => Applied::Duplicate,
            Some(k) => {
                *k = true;
                self.left -= 1;
                self.bytes += bytes.len() as u64;
                match self.left {
                    0 => Applied::CompleteNull,
                    left => Applied::Accepted { bundles_left: left },
                }
            }
        }
    }
}

/// A restore of format 1 (with `test-rigs`, also of the baseline format, or the null one).
pub enum Restorer {
    Bavl(Restoring),
    #[cfg(feature = "test-rigs")]
    Baseline(crate::baseline::BaselineRestoring),
    #[cfg(feature = "test-rigs")]
    Null(NullRestoring),
}

impl Restorer {
    pub fn height(&self) -> u64 {
        match self {
            Restorer::Bavl(r) => r.height,
            #[cfg(feature = "test-rigs")]
            Restorer::Baseline(r) => r.height,
            #[cfg(feature = "test-rigs")]
            Restorer::Null(r) => r.height,
        }
    }

    /// Bytes of the chunks kept so far.
    pub fn bytes(&self) -> u64 {
        match self {
            Restorer::Bavl(r) => r.bytes,
            #[cfg(feature = "test-rigs")]
            Restorer::Baseline(r) => r.bytes,
            #[cfg(feature = "test-rigs")]
            Restorer::Null(r) => r.bytes,
        }
    }

    pub fn apply(&mut self, index: u32, bytes: &[u8]) -> Applied {
        match self {
            Restorer::Bavl(r) => r.apply(index, bytes),
            #[cfg(feature = "test-rigs")]
            Restorer::Baseline(r) => r.apply(index, bytes),
            #[cfg(feature = "test-rigs")]
            Restorer::Null(r) => r.apply(index, bytes),
        }
    }

    /// The restore report's `mode`: bavl, baseline or null.
    pub fn mode(&self) -> &'static str {
        match self {
            Restorer::Bavl(_) => "bavl",
            #[cfg(feature = "test-rigs")]
            Restorer::Baseline(_) => "baseline",
            #[cfg(feature = "test-rigs")]
            Restorer::Null(_) => "null",
        }
    }
}
