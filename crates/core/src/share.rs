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
}

impl crate::node::Inner {
    /// A copy of this node with the children given replaced; `None` if none is. The new
    /// children must equal the old by hash: the node's hash, counts and separator stand.
    fn with_children(&self, left: Option<Node>, right: Option<Node>) -> Option<Node> {
        if left.is_none() && right.is_none() {
            return None;
        }
        let mut n = self.clone();
        if let Some(l) = left {
            n.left = l;
        }
        if let Some(r) = right {
            n.right = r;
        }
        Some(Node::Inner(std::sync::Arc::new(n)))
    }

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
        // The unpinning descent with every body live: it only takes equal subtrees.
        self.descend_beside(Some(other), &|_, _| true, &mut |_, _| {})
    }
}

/// What [`Snapshot::unpinned_beside`] asks and tells about the bodies it meets.
struct Unpin<'a> {
    /// Whether a body (by [`crate::ChunkRef::body_id`], with its first key) is one the
    /// head holds.
    live: &'a dyn Fn(usize, &[u8]) -> bool,
    /// Called for each body this version holds alone and cannot drop (no location).
    pinned: &'a mut dyn FnMut(usize, usize),
    stripped: bool,
    /// Subtrees taken from the other tree.
    taken: u64,
}

impl Node {
    /// `self` with each subtree equal (by hash) to the subtree of `other` at the same place
    /// replaced by `other`'s node, and elsewhere each resident body that is not live and
    /// has a location made absent (the others not live reported); `None` if nothing
    /// changes. Where the two shapes differ in height, the taller side is descended toward
    /// the other's first key, so a tree that grew or shrank at the top still shares below.
    /// `other` is `None` where this subtree has no counterpart.
    fn unpin_from(&self, other: Option<&Node>, u: &mut Unpin<'_>) -> Option<Node> {
        if let Some(o) = other {
            if self.same(o) {
                return None;
            }
            if let (Some(a), Some(b)) = (self.cached_hash(), o.cached_hash()) {
                if a == b {
                    u.taken += 1;
                    return Some(o.clone());
                }
            }
            if let Node::Inner(y) = o {
                if y.height > self.height() {
                    return self.unpin_from(Some(y.child_for(self.first_key())), u);
                }
            }
        }
        match self {
            Node::Paged(_) => None,
            Node::Chunk(c) => {
                let id = &**c as *const crate::chunk::Chunk as usize;
                if (u.live)(id, c.first_key()) {
                    return None;
                }
                match (c.hash, c.location()) {
                    (Some(hash), Some(loc)) => {
                        u.stripped = true;
                        let first = c.first_key().into();
                        let page = crate::node::Page { hash, len: c.len() as u32, first, loc };
                        Some(Node::Paged(std::sync::Arc::new(page)))
                    }
                    _ => {
                        (u.pinned)(id, c.heap_bytes());
                        None
                    }
                }
            }
            Node::Inner(x) => {
                let (lo, ro) = match other {
                    Some(Node::Inner(y)) if y.height == x.height => (Some(&y.left), Some(&y.right)),
                    Some(o) if o.first_key() >= &*x.sep => (None, Some(o)),
                    Some(o) => (Some(o), None),
                    None => (None, None),
                };
                x.with_children(x.left.unpin_from(lo, u), x.right.unpin_from(ro, u))
            }
        }
    }
}

impl<H: Hasher> Snapshot<H> {
    /// A retained version made to hold no more than it must beside the head `head` (with
    /// `None`, or a head of another capacity, every body not `live` is treated so), in one
    /// descent of both that skips every subtree they already share: each subtree equal to
    /// the head's at the same place becomes the head's ([`Snapshot::sharing`]), and
    /// elsewhere each resident body that is not `live` (not the head's:
    /// `live(body_id, first_key)`, which [`Snapshot::holds_body`] of the head answers) and
    /// has a location becomes absent (as [`Snapshot::without_bodies`]);
    /// `pinned(body_id, heap_bytes)` is
    /// called for each body left that is not `live` (it has no location: it cannot be
    /// dropped). Equal to this version in everything a read, proof or hash sees; this one
    /// is unchanged. A store calls it on every retained version after each commit, where
    /// a walk of every chunk of every version cost more and more as states grew.
    pub fn unpinned_beside(
        &self,
        head: Option<&Snapshot<H>>,
        live: impl Fn(usize, &[u8]) -> bool,
        mut pinned: impl FnMut(usize, usize),
    ) -> Snapshot<H> {
        self.descend_beside(head, &live, &mut pinned).0
    }

    /// Whether this version holds the resident body `id` (a
    /// [`crate::ChunkRef::body_id`]) whose first key is `first_key`: one descent to the
    /// chunk that holds that key. A store asks it of its head for each body the unpinning
    /// meets, where a set of every body id the head holds took a walk of every chunk of
    /// the head per commit (60 ms at 30M keys).
    pub fn holds_body(&self, id: usize, first_key: &[u8]) -> bool {
        self.root.as_ref().is_some_and(|r| match r.find(first_key).0 {
            crate::node::Leaf::Body(c) => std::ptr::eq(c, id as *const crate::chunk::Chunk),
            crate::node::Leaf::Absent(_) => false,
        })
    }

    /// The descent of [`Snapshot::unpinned_beside`]; also returns the subtrees taken.
    fn descend_beside(
        &self,
        head: Option<&Snapshot<H>>,
        live: &dyn Fn(usize, &[u8]) -> bool,
        pinned: &mut dyn FnMut(usize, usize),
    ) -> (Snapshot<H>, u64) {
        let Some(a) = &self.root else { return (self.clone(), 0) };
        let head = head.filter(|h| h.capacity == self.capacity);
        let other = head.and_then(|h| h.root.as_ref());
        let mut u = Unpin { live, pinned, stripped: false, taken: 0 };
        match a.unpin_from(other, &mut u) {
            None => (self.clone(), 0),
            Some(root) => {
                let paged = self.paged || head.is_some_and(|h| h.paged) || u.stripped;
                (Snapshot::new(Some(root), self.capacity, self.root_hash(), paged), u.taken)
            }
        }
    }
}
