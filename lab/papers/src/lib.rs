//! # bavl-papers
//!
//! The structures the B+AVL paper compares itself with, implemented for real and put
//! behind one trait ([`AuthStructure`]) together with bavl itself, so that one harness
//! measures all four on the same workload (`src/eval`, the `bavl-papers eval` binary):
//!
//! - [`Bavl`]: `bavl_core::Tree` (the B+AVL tree of this repository), wrapped;
//! - [`AvlStar`]: the AVL* tree of *Robust and Fast Blockchain State Synchronization*
//!   (OPODIS 2022), appendix Algorithms 1-4: leaves grouped in chunks whose roots never
//!   nest (Property 1), chunk splits on insert and before rotations, empty-chunk
//!   renumbering on delete, chunk validation and the height-ordered rebuild;
//! - [`MerkleBTree`]: a Merkle B+tree whose leaf cells are the chunks and whose proofs
//!   carry every sibling of every cell on the path (O(b log_b n) hashes);
//! - [`AvlPlus`]: the baseline, an IAVL-like Merkle AVL+ tree with one leaf per key,
//!   chunked for transfer by a depth-first (post-order) traversal: its chunks cannot be
//!   checked until all of them have arrived and the whole tree is rebuilt.
//!
//! Every structure hashes with SHA-256 over domain-separated, length-prefixed inputs (its
//! own tags, listed in each module), computes hashes lazily (edits mark, `root_hash`
//! recomputes what they marked) and is tested against a `BTreeMap` model
//! (`tests/model.rs`). None of these comparison structures is versioned.
#![forbid(unsafe_code)]

pub mod avlplus;
pub mod avlstar;
pub mod bavl;
pub mod btree;
pub mod eval;
mod hash;

pub use avlplus::AvlPlus;
pub use avlstar::AvlStar;
pub use bavl::Bavl;
pub use btree::MerkleBTree;
pub use hash::Digest;

/// Why a proof, a chunk or a set of chunks was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The bytes do not decode (truncated, bad tag, trailing bytes, out-of-range field).
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The recomputed root differs from the trusted root.
    #[error("root mismatch")]
    RootMismatch,
    /// Decoded and hashed correctly, but says something else than was asked (another key,
    /// another chunk index, keys out of order, an inconsistent shape).
    #[error("inconsistent: {0}")]
    Inconsistent(&'static str),
    /// The structure's chunks carry no proof: they can only be checked all together.
    #[error("chunks of this structure cannot be verified one by one")]
    Unverifiable,
}

/// A membership proof and its size in the paper's unit (hashes the verifier must be
/// given, Table I) as well as in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub bytes: Vec<u8>,
    /// Sibling hashes in the proof (the paper's "proof size").
    pub hashes: usize,
}

/// Chunk accounting for the space-efficiency figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub keys: u64,
    /// Chunks the structure holds (for the baseline: transfer chunks it would cut).
    pub chunks: u64,
    /// Chunk capacity in entries.
    pub capacity: u64,
}

impl Space {
    /// The papers' space efficiency: chunks over the fewest chunks that could hold the
    /// keys (`ceil(keys / capacity)`); 1.0 is ideal, 2.0 all chunks half full.
    pub fn efficiency(&self) -> f64 {
        if self.keys == 0 {
            return 1.0;
        }
        self.chunks as f64 / self.keys.div_ceil(self.capacity) as f64
    }
}

/// An authenticated ordered key-value structure organised in chunks: what the evaluation
/// needs of bavl and of each of the papers' structures.
///
/// Keys are non-empty byte strings of at most 1024 bytes. Methods taking `&mut self`
/// may (re)compute cached hashes.
pub trait AuthStructure: Sized {
    /// The name used in tables, CSV files and plots.
    const NAME: &'static str;
    /// Whether a single chunk can be checked against the root alone.
    const SELF_VERIFIABLE_CHUNKS: bool;

    /// An empty structure whose chunks hold up to `capacity` entries.
    fn with_capacity(capacity: usize) -> Self;
    /// Inserts or updates; returns whether the key is new.
    fn insert(&mut self, key: &[u8], value: &[u8]) -> bool;
    /// Removes a key, returning its value.
    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>>;
    fn get(&self, key: &[u8]) -> Option<&[u8]>;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The commitment to the whole state (recomputes stale hashes).
    fn root_hash(&mut self) -> Digest;
    /// A membership proof for `key` against [`root_hash`](Self::root_hash).
    fn prove(&mut self, key: &[u8]) -> Option<Proof>;
    /// Checks a membership proof of `(key, value)` against a trusted root.
    fn verify(root: &Digest, key: &[u8], value: &[u8], proof: &[u8]) -> Result<(), VerifyError>;
    /// Chunks as they would be sent in state transfer, in index order.
    fn export_chunks(&mut self) -> Vec<Vec<u8>>;
    /// Checks chunk `index` alone against the root ([`VerifyError::Unverifiable`] for a
    /// structure whose chunks carry no proof).
    fn verify_chunk(root: &Digest, index: u64, bytes: &[u8]) -> Result<(), VerifyError>;
    /// Rebuilds the structure from all its chunks (indexed as exported) and checks the
    /// result against the root: the state-transfer receiver.
    fn restore(root: &Digest, capacity: usize, chunks: &[Vec<u8>]) -> Result<Self, VerifyError>;
    fn space(&self) -> Space;
    /// Checks every structural invariant and cached hash (for tests).
    fn check(&self) -> Result<(), String>;
}
