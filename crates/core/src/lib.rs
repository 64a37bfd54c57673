//! # bavl-core
//!
//! The B+AVL tree: an authenticated, ordered key-value map whose Merkle tree is organised
//! in self-verifiable chunks. Leaves of an AVL tree are chunks of up to `capacity` sorted
//! entries, each with an in-chunk hash tree, so proofs stay O(log2 n) while every chunk can
//! be verified alone against the root hash — the unit of storage, proof and state transfer.
//!
//! This crate has no I/O. It provides:
//! - [`Tree`]: `insert`, `get`, `remove`, ordered `range` iteration, lazy rehashing;
//! - [`Snapshot`]: an O(1) immutable version that serves proofs and chunks;
//! - standalone verifiers that need only the root: [`verify_membership`],
//!   [`verify_absence`], [`verify_range`], [`verify_chunk`];
//! - [`Restore`]: rebuilds the identical tree from chunks verified in any order;
//! - paging: chunks whose bodies are absent (a skeleton of [`PageRef`]s), the queries that
//!   say which an operation needs, and [`Tree::page_in`] verifying a [`Body`] against its
//!   page — the caller does the I/O (`docs/design.md` §8.5.1).
//!
//! The byte formats, hash inputs and invariants are specified in `docs/design.md`.
//!
//! ```
//! use bavl_core::{Restore, Sha256, Tree};
//! let mut tree: Tree = Tree::with_capacity(4)?;
//! for i in 0u32..100 {
//!     tree.insert(&i.to_be_bytes(), b"value")?;
//! }
//! let snap = tree.snapshot();
//! // Any order: here, last chunk first.
//! let mut restore = Restore::<Sha256>::new(snap.root_hash());
//! for i in (0..snap.chunk_count()).rev() {
//!     restore.add_chunk(i, &snap.export_chunk(i)?)?;
//! }
//! let mut rebuilt = restore.finish(4)?;
//! assert_eq!(rebuilt.root_hash(), snap.root_hash());
//! # Ok::<(), bavl_core::Error>(())
//! ```
#![forbid(unsafe_code)]

mod body;
mod check;
mod chunk;
pub mod codec;
mod error;
pub mod hash;
mod node;
mod page;
pub mod proof;
mod restore;
mod share;
mod skeleton;
mod snapshot;
mod tree;

pub use body::{Body, ChunkRef};
pub use error::{ChunkError, DecodeError, Error, InputError, ProofError, ProveError, RestoreError};
#[cfg(feature = "blake3")]
pub use hash::Blake3;
pub use hash::{Digest, Hasher, Key, Sha256, FORMAT_VERSION};
pub use page::{Entry, PageError, PageRef};
pub use proof::{
    verify_absence, verify_chunk, verify_chunk_unindexed, verify_membership, verify_range,
    VerifiedAbsence, VerifiedChunk, VerifiedMembership, VerifiedRange,
};
pub use restore::{Progress, Restore};
pub use skeleton::{SkeletonEntry, SkeletonStats};
pub use snapshot::{Iter, Snapshot};
pub use tree::{Tree, TreeStats};

/// Longest key accepted, in bytes (keys are at least one byte).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value accepted, in bytes.
pub const MAX_VALUE_LEN: usize = 16 << 20;
/// Smallest chunk capacity.
pub const MIN_CAPACITY: u32 = 4;
/// Largest chunk capacity.
pub const MAX_CAPACITY: u32 = 65_536;
/// Default chunk capacity (chosen by measurement: see `docs/design.md`).
pub const DEFAULT_CAPACITY: u32 = 64;
/// Greatest AVL height a proof may claim: an AVL tree of height h has at least
/// Fib(h + 2) - 1 nodes, so 96 exceeds any tree of up to 2^64 chunks.
pub const MAX_HEIGHT: u8 = 96;
