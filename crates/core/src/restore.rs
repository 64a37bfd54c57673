//! Rebuilding a tree from chunks verified one by one, in any order.
//!
//! [`Restore`] is a sans-I/O state machine: feed it `(index, bytes)` pairs as they arrive
//! from any source; each is verified against the trusted root alone before it is kept, so
//! a bad chunk is rejected on arrival and nothing else is affected. [`Restore::finish`]
//! links the chunks into the AVL tree from their key-heights (a Cartesian tree over the
//! in-order sequence chunk₀, node₁, chunk₁, …, whose node heights are the chunks'
//! key-heights) and checks the rebuilt root. The result is the identical tree — same
//! chunks, same shape, same capacity — so it has the same future as the original.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::{ProofError, RestoreError};
use crate::hash::{root_hash, Digest, Hasher, Sha256, EMPTY_TOP};
use crate::node::Node;
use crate::proof::{verify_chunk, VerifiedChunk};
use crate::tree::Tree;

/// Accepts verified chunks in any order and rebuilds the tree.
pub struct Restore<H: Hasher = Sha256> {
    root: Digest,
    /// Set by the first verified chunk (the root commits to it).
    shape: Option<(u64, u32)>,
    chunks: Vec<Option<VerifiedChunk>>,
    received: u64,
    _h: PhantomData<H>,
}

/// Progress after a chunk was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub received: u64,
    pub total: u64,
}

impl<H: Hasher> Restore<H> {
    /// Starts a restore of the tree whose root commitment is `root`.
    pub fn new(root: Digest) -> Self {
        Restore { root, shape: None, chunks: Vec::new(), received: 0, _h: PhantomData }
    }

    /// The trusted root.
    pub fn root(&self) -> Digest {
        self.root
    }

    /// Number of chunks of the tree, once any chunk has been verified.
    pub fn chunk_count(&self) -> Option<u64> {
        self.shape.map(|(c, _)| c)
    }

    /// Verifies chunk `index` and keeps it. A rejected chunk changes nothing.
    pub fn add_chunk(&mut self, index: u64, bytes: &[u8]) -> Result<Progress, RestoreError> {
        if let Some((count, _)) = self.shape {
            if index >= count {
                return Err(RestoreError::OutOfRange { index, count });
            }
            if self.chunks[index as usize].is_some() {
                return Err(RestoreError::Duplicate(index));
            }
        }
        let chunk = verify_chunk::<H>(&self.root, index, bytes)
            .map_err(|source| RestoreError::Invalid { index, source })?;
        self.add_verified(chunk)
    }

    /// Keeps a chunk already verified (for callers that verify on other threads); one
    /// verified against another root is refused.
    pub fn add_verified(&mut self, chunk: VerifiedChunk) -> Result<Progress, RestoreError> {
        if chunk.root != self.root {
            let index = chunk.index;
            return Err(RestoreError::Invalid { index, source: ProofError::RootMismatch });
        }
        let count = chunk.chunk_count;
        match self.shape {
            None => {
                // The count is committed by the trusted root, so it is safe to size by it.
                self.shape = Some((count, chunk.capacity));
                self.chunks = vec![None; count as usize];
            }
            Some((c, cap)) if c != count || cap != chunk.capacity => {
                return Err(RestoreError::Inconsistent(
                    "chunk count or capacity differs between chunks",
                ));
            }
            Some(_) => {}
        }
        let slot = &mut self.chunks[chunk.index as usize];
        if slot.is_some() {
            return Err(RestoreError::Duplicate(chunk.index));
        }
        *slot = Some(chunk);
        self.received += 1;
        Ok(Progress { received: self.received, total: count })
    }

    /// Indices not yet received (all of them are unknown until the first chunk arrives).
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().enumerate().filter(|(_, c)| c.is_none()).map(|(i, _)| i as u64)
    }

    /// Whether every chunk has arrived.
    pub fn is_complete(&self) -> bool {
        self.shape.is_some_and(|(c, _)| self.received == c)
    }

    /// Links the chunks into the tree and checks its root.
    ///
    /// `capacity` is only used when the trusted root is that of an empty tree (which has
    /// no chunks to carry it).
    pub fn finish(self, empty_capacity: u32) -> Result<Tree<H>, RestoreError> {
        let Some((count, capacity)) = self.shape else {
            if root_hash::<H>(empty_capacity, &EMPTY_TOP) == self.root {
                return Ok(Tree::from_root(None, empty_capacity, false));
            }
            return Err(RestoreError::Inconsistent(
                "no chunk received, and the root is not that of an empty tree",
            ));
        };
        if self.received != count {
            let first = self.missing().next().unwrap_or(0);
            return Err(RestoreError::Missing { missing: count - self.received, count, first });
        }
        let items = self.chunks.into_iter().flatten();
        let c = link(items.map(|vc| (vc.key_height, Node::Chunk(Arc::new(vc.chunk)))))?;
        let mut tree = Tree::from_root(Some(c), capacity, false);
        if tree.root_hash() != self.root {
            return Err(RestoreError::Inconsistent("rebuilt root differs from the trusted root"));
        }
        Ok(tree)
    }
}

/// Links chunks given in order with their key-heights into the AVL tree (a Cartesian
/// tree over chunk₀, node₁, chunk₁, …), checking that the heights give a balanced tree.
pub(crate) fn link(items: impl Iterator<Item = (u8, Node)>) -> Result<Node, RestoreError> {
    let mut spine: Vec<(u8, Box<[u8]>, Node)> = Vec::new();
    let mut cur: Option<Node> = None;
    for (h, node) in items {
        let Some(mut c) = cur.take() else {
            if h != 0 {
                return Err(RestoreError::Inconsistent("first chunk has a key-height"));
            }
            cur = Some(node);
            continue;
        };
        if h == 0 {
            return Err(RestoreError::Inconsistent("a chunk after the first has no key-height"));
        }
        while spine.last().is_some_and(|(sh, _, _)| *sh < h) {
            let Some((sh, sep, left)) = spine.pop() else {
                break;
            };
            c = join_checked(sh, sep, left, c)?;
        }
        if spine.last().is_some_and(|(sh, _, _)| *sh == h) {
            return Err(RestoreError::Inconsistent("two adjacent separators at one height"));
        }
        let sep: Box<[u8]> = node.first_key().into();
        spine.push((h, sep, c));
        cur = Some(node);
    }
    let mut c = cur.ok_or(RestoreError::Inconsistent("no chunks"))?;
    while let Some((sh, sep, left)) = spine.pop() {
        c = join_checked(sh, sep, left, c)?;
    }
    Ok(c)
}

fn join_checked(height: u8, sep: Box<[u8]>, left: Node, right: Node) -> Result<Node, RestoreError> {
    if left.height().abs_diff(right.height()) > 1 {
        return Err(RestoreError::Inconsistent("key-heights do not give a balanced tree"));
    }
    let node = Node::join(sep, left, right);
    if node.height() != height {
        return Err(RestoreError::Inconsistent("key-heights do not match the rebuilt heights"));
    }
    Ok(node)
}
