//! The skeleton of a paged tree (`docs/design.md` §8.5.1): rebuilding a tree whose chunks
//! are all absent from one record per chunk, and measuring what the skeleton costs.
//!
//! [`Tree::from_skeleton`] links the records exactly as [`crate::Restore`] links verified
//! chunks (by their key-heights) and recomputes the root from the records' hashes, so a
//! skeleton that does not give the trusted root is refused. What the root does not cover
//! are the records' first keys (separators); they are checked to increase strictly here
//! and each against its body when the chunk is loaded, and the store's file format covers
//! them with a checksum.

use std::sync::Arc;

use crate::error::RestoreError;
use crate::hash::{check_key, Digest, Hasher};
use crate::node::{Node, Page};
use crate::restore::link;
use crate::tree::Tree;

/// One chunk of a skeleton, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkeletonEntry {
    /// See [`crate::ChunkRef::key_height`].
    pub key_height: u8,
    pub hash: Digest,
    pub len: u32,
    /// The store's location of the body (nonzero).
    pub loc: u64,
    pub first_key: Box<[u8]>,
}

/// What the in-memory tree costs, split into skeleton and resident bodies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkeletonStats {
    pub inner_nodes: u64,
    pub resident_chunks: u64,
    pub absent_chunks: u64,
    /// Inner nodes, pages and separators and first keys (heap bytes, allocator slack
    /// not counted).
    pub skeleton_bytes: u64,
    /// Heap bytes of the resident chunk bodies.
    pub resident_bytes: u64,
    /// Of those, the bodies with no disk location (changed since last written: copies
    /// whose originals older versions may still hold).
    pub unlocated_bytes: u64,
}

impl SkeletonStats {
    /// What an absent chunk whose first key is `first_key_len` bytes long adds to
    /// `skeleton_bytes`: a sweep that evicts chunks counts its skeleton's growth so,
    /// without measuring the whole tree again.
    pub fn page_bytes(first_key_len: usize) -> u64 {
        (std::mem::size_of::<Page>() + 16 + first_key_len) as u64
    }
}

impl<H: Hasher> Tree<H> {
    /// A tree whose every chunk is absent, from its skeleton records in order; its root
    /// must be `root`.
    pub fn from_skeleton(
        capacity: u32,
        root: Digest,
        entries: impl IntoIterator<Item = SkeletonEntry>,
    ) -> Result<Tree<H>, RestoreError> {
        let mut tree = Tree::link_skeleton(capacity, entries)?;
        if tree.root_hash() != root {
            return Err(RestoreError::Inconsistent(
                "the skeleton's root differs from the trusted root",
            ));
        }
        Ok(tree)
    }

    /// A tree whose every chunk is absent, from its skeleton records in order, with no
    /// root to compare against: the records' bounds, order and key-heights are checked as
    /// by [`Tree::from_skeleton`], and the root is whatever they give. For a writer that
    /// built the chunks itself (a bulk import), which learns the root this way.
    pub fn link_skeleton(
        capacity: u32,
        entries: impl IntoIterator<Item = SkeletonEntry>,
    ) -> Result<Tree<H>, RestoreError> {
        if !(crate::MIN_CAPACITY..=crate::MAX_CAPACITY).contains(&capacity) {
            return Err(RestoreError::Inconsistent("a capacity out of bounds"));
        }
        let mut prev: Option<Box<[u8]>> = None;
        let mut bad = None;
        let nodes = entries.into_iter().map_while(|e| {
            let valid = e.len >= 1
                && e.len <= capacity
                && e.loc != 0
                && check_key(&e.first_key).is_ok()
                && prev.as_ref().is_none_or(|p| *p < e.first_key);
            if !valid {
                bad = Some(RestoreError::Inconsistent("a skeleton record is out of bounds"));
                return None;
            }
            prev = Some(e.first_key.clone());
            let page = Page { hash: e.hash, len: e.len, first: e.first_key, loc: e.loc };
            Some((e.key_height, Node::Paged(Arc::new(page))))
        });
        let mut nodes = nodes.peekable();
        let top = if nodes.peek().is_some() { Some(link(&mut nodes)?) } else { None };
        drop(nodes);
        if let Some(e) = bad {
            return Err(e);
        }
        Ok(Tree::from_root(top, capacity, true))
    }

    /// The memory of the skeleton and of the resident bodies (walks the whole tree).
    pub fn skeleton_stats(&self) -> SkeletonStats {
        let mut s = SkeletonStats::default();
        if let Some(r) = &self.root {
            r.measure(&mut s);
        }
        s
    }
}

impl Node {
    fn measure(&self, s: &mut SkeletonStats) {
        match self {
            Node::Inner(x) => {
                s.inner_nodes += 1;
                s.skeleton_bytes += (std::mem::size_of::<crate::node::Inner>() + 16) as u64;
                s.skeleton_bytes += x.sep.len() as u64;
                x.left.measure(s);
                x.right.measure(s);
            }
            Node::Chunk(c) => {
                s.resident_chunks += 1;
                s.resident_bytes += (c.heap_bytes() + 16) as u64;
                if c.location().is_none() {
                    s.unlocated_bytes += (c.heap_bytes() + 16) as u64;
                }
            }
            Node::Paged(p) => {
                s.absent_chunks += 1;
                s.skeleton_bytes += SkeletonStats::page_bytes(p.first.len());
            }
        }
    }
}

impl crate::VerifiedChunk {
    /// This chunk as a skeleton record (location 0: set it once the body is stored), and its body encoded for the
    /// store's page file (see [`crate::ChunkRef::encode_body`]): how a paged store opens a
    /// checkpoint without keeping its chunks in memory.
    pub fn into_skeleton<H: Hasher>(mut self) -> (SkeletonEntry, Vec<u8>) {
        let hash = self.chunk.rehash::<H>();
        let mut body = Vec::new();
        crate::codec::put_varint(&mut body, self.chunk.len() as u64);
        for i in 0..self.chunk.len() {
            crate::codec::put_bytes(&mut body, self.chunk.key(i));
            crate::codec::put_bytes(&mut body, self.chunk.value(i));
        }
        let entry = SkeletonEntry {
            key_height: self.key_height,
            hash,
            len: self.chunk.len() as u32,
            loc: 0,
            first_key: self.chunk.first_key().into(),
        };
        (entry, body)
    }
}
