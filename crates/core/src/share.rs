//! Sharing equal subtrees between versions (`docs/design.md` §8.5.1, "Retained versions
//! share the head's skeleton").
//!
//! A retained version and the head differ only where the blocks between them wrote, yet
//! once paging strips bodies out of old versions (each by path copying, `without_bodies`)
//! and the working tree evicts the same chunks by path copying of its own, every version
//! ends up with its own copy of most inner nodes and pages: with four retained versions the
//! skeleton was held about four times over. [`Snapshot::sharing`] gives a version back the
//! head's nodes wherever a subtree of it has the same hash as the subtree of the head at
//! the same place.
//!
//! Why a hash is enough: an inner node's hash commits to its height, its key and chunk
//! counts and both children's hashes, and a chunk's hash to its entries, so two subtrees of
//! equal hash hold the same keys and values in the same chunks under the same shape (their
//! separators, derived from the keys, are equal too). Only where bodies live may differ (a
//! subtree taken from the head may have chunks absent that the version had resident, or
//! the other way round), which no read, proof or hash can tell apart.

use crate::hash::Hasher;
use crate::node::Node;
use crate::snapshot::Snapshot;

impl Node {
    fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Inner(a), Node::Inner(b)) => std::sync::Arc::ptr_eq(a, b),
            (Node::Chunk(a), Node::Chunk(b)) => std::sync::Arc::ptr_eq(a, b),
            (Node::Paged(a), Node::Paged(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// `self` with the subtrees that equal (by hash) the subtree of `other` at the same
    /// place replaced by `other`'s nodes; `None` if nothing changes. Where the two shapes
    /// differ in height, the taller side is descended toward the other's first key, so a
    /// tree that grew or shrank at the top still shares below. Counts the subtrees taken.
    fn share_from(&self, other: &Node, taken: &mut u64) -> Option<Node> {
        if self.same(other) {
            return None;
        }
        if let (Some(a), Some(b)) = (self.cached_hash(), other.cached_hash()) {
            if a == b {
                *taken += 1;
                return Some(other.clone());
            }
        }
        let Node::Inner(x) = self else {
            // A leaf against a taller subtree: look for it where its keys would be.
            return match other {
                Node::Inner(y) => self.share_from(y.child_for(self.first_key()), taken),
                _ => None,
            };
        };
        let (left, right) = match other {
            Node::Inner(y) if y.height > x.height => {
                return self.share_from(y.child_for(self.first_key()), taken);
            }
            Node::Inner(y) if y.height == x.height => {
                (x.left.share_from(&y.left, taken), x.right.share_from(&y.right, taken))
            }
            // `other` is lower: it can only match inside the child holding its keys.
            _ if other.first_key() >= &*x.sep => (None, x.right.share_from(other, taken)),
            _ => (x.left.share_from(other, taken), None),
        };
        if left.is_none() && right.is_none() {
            return None;
        }
        let mut n = (**x).clone();
        if let Some(l) = left {
            n.left = l;
        }
        if let Some(r) = right {
            n.right = r;
        }
        // Same children by hash: the node's hash, counts and separator stand.
        Some(Node::Inner(std::sync::Arc::new(n)))
    }
}

impl crate::node::Inner {
    /// The child a key belongs under.
    fn child_for(&self, key: &[u8]) -> &Node {
        if key >= &*self.sep {
            &self.right
        } else {
            &self.left
        }
    }
}

impl<H: Hasher> Snapshot<H> {
    /// This version with every subtree that equals the subtree of `other` at the same place
    /// (same hash: same keys, values, chunks and shape) taken from `other`, so that the two
    /// share those nodes in memory. Nothing a read, proof or hash can see changes: the
    /// result equals this version (root, counts, every key), and this version itself is
    /// unchanged. Bodies may become absent (where `other` has the chunk absent) or
    /// resident (where `other` has it resident). Returns it and the number of subtrees
    /// taken; `(self.clone(), 0)` when the capacities differ.
    pub fn sharing(&self, other: &Snapshot<H>) -> (Snapshot<H>, u64) {
        let (Some(a), Some(b)) = (&self.root, &other.root) else { return (self.clone(), 0) };
        if self.capacity != other.capacity {
            return (self.clone(), 0);
        }
        let mut taken = 0;
        match a.share_from(b, &mut taken) {
            None => (self.clone(), 0),
            Some(root) => {
                let paged = self.paged || other.paged;
                (Snapshot::new(Some(root), self.capacity, self.root_hash(), paged), taken)
            }
        }
    }
}
