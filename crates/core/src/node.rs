//! The AVL tree over chunks: copy-on-write nodes and the index-addressed edits the tree's
//! fill policy is built from.
//!
//! Invariants (checked by [`Node::check`]): every inner node's height is one more than its
//! taller child and its children differ in height by at most one; its key and chunk counts
//! are the sums of its children's; its separator equals the first key of the leftmost chunk
//! of its right subtree; a node whose hash is cached has only cached descendants.
//!
//! Every edit goes through [`Arc::make_mut`] from the root down, so nodes shared with a
//! snapshot are copied (at chunk granularity) rather than changed, and every node on an
//! edited path has its hash cleared.

use std::sync::{Arc, LazyLock};

use crate::chunk::{key_prefix, Chunk};
use crate::hash::{inner_hash, Digest, Hasher};

#[derive(Clone)]
pub(crate) enum Node {
    Inner(Arc<Inner>),
    Chunk(Arc<Chunk>),
    /// A chunk whose body is not in memory (`docs/design.md` §8.5.1).
    Paged(Arc<Page>),
}

/// What the skeleton keeps of an absent chunk: enough to hash, count, separate and search
/// above it, and to find and verify its body.
pub(crate) struct Page {
    pub hash: Digest,
    pub len: u32,
    pub first: Box<[u8]>,
    /// The store's location of the body (never 0).
    pub loc: u64,
}

/// The leaf a descent ends at.
#[derive(Clone, Copy)]
pub(crate) enum Leaf<'a> {
    Body(&'a Chunk),
    Absent(&'a Page),
}

#[derive(Clone)]
pub(crate) struct Inner {
    pub height: u8,
    pub key_count: u64,
    pub chunk_count: u64,
    /// First key of the leftmost chunk of `right`.
    pub sep: Box<[u8]>,
    /// `key_prefix(sep)`, compared first when searching.
    pub sep_prefix: u64,
    pub left: Node,
    pub right: Node,
    pub hash: Option<Digest>,
}

static PLACEHOLDER: LazyLock<Arc<Chunk>> = LazyLock::new(|| Arc::new(Chunk::new()));

impl Node {
    pub(crate) fn chunk(c: Chunk) -> Node {
        Node::Chunk(Arc::new(c))
    }

    /// Moves the node out, leaving a cheap placeholder behind.
    fn take(&mut self) -> Node {
        std::mem::replace(self, Node::Chunk(PLACEHOLDER.clone()))
    }

    pub(crate) fn join(sep: Box<[u8]>, left: Node, right: Node) -> Node {
        let sep_prefix = key_prefix(&sep);
        let mut i = Inner {
            height: 0,
            key_count: 0,
            chunk_count: 0,
            sep,
            sep_prefix,
            left,
            right,
            hash: None,
        };
        i.fix();
        Node::Inner(Arc::new(i))
    }

    #[inline]
    pub(crate) fn height(&self) -> u8 {
        match self {
            Node::Inner(i) => i.height,
            Node::Chunk(_) | Node::Paged(_) => 0,
        }
    }

    #[inline]
    pub(crate) fn key_count(&self) -> u64 {
        match self {
            Node::Inner(i) => i.key_count,
            Node::Chunk(c) => c.len() as u64,
            Node::Paged(p) => p.len as u64,
        }
    }

    #[inline]
    pub(crate) fn chunk_count(&self) -> u64 {
        match self {
            Node::Inner(i) => i.chunk_count,
            Node::Chunk(_) | Node::Paged(_) => 1,
        }
    }

    pub(crate) fn cached_hash(&self) -> Option<Digest> {
        match self {
            Node::Inner(i) => i.hash,
            Node::Chunk(c) => c.hash,
            Node::Paged(p) => Some(p.hash),
        }
    }

    pub(crate) fn first_key(&self) -> &[u8] {
        let mut n = self;
        loop {
            match n {
                Node::Inner(i) => n = &i.left,
                Node::Chunk(c) => return c.first_key(),
                Node::Paged(p) => return &p.first,
            }
        }
    }

    /// Walks down to a chunk, going left wherever `left` says so; returns the chunk, its
    /// index and the number of keys before it. Every search is this walk.
    #[inline]
    pub(crate) fn descend(&self, mut left: impl FnMut(&Inner) -> bool) -> (Leaf<'_>, u64, u64) {
        let mut n = self;
        let (mut index, mut before) = (0, 0);
        loop {
            match n {
                Node::Inner(x) if left(x) => n = &x.left,
                Node::Inner(x) => {
                    index += x.left.chunk_count();
                    before += x.left.key_count();
                    n = &x.right;
                }
                Node::Chunk(c) => return (Leaf::Body(c), index, before),
                Node::Paged(p) => return (Leaf::Absent(p), index, before),
            }
        }
    }

    /// The chunk with index `i` and the number of keys before it.
    pub(crate) fn chunk_at(&self, mut i: u64) -> (Leaf<'_>, u64) {
        let (c, _, before) = self.descend(|x| {
            let lc = x.left.chunk_count();
            i < lc || {
                i -= lc;
                false
            }
        });
        (c, before)
    }

    /// The chunk holding key number `k` (by order), its index and the keys before it.
    pub(crate) fn locate(&self, mut k: u64) -> (Leaf<'_>, u64, u64) {
        self.descend(|x| {
            let lk = x.left.key_count();
            k < lk || {
                k -= lk;
                false
            }
        })
    }

    /// The chunk that holds or would hold `key`, its index and the keys before it.
    #[inline]
    pub(crate) fn find(&self, key: &[u8]) -> (Leaf<'_>, u64, u64) {
        let p = key_prefix(key);
        self.descend(|x| x.goes_left(key, p))
    }

    /// Applies `f` to chunk `i`, keeping counts and separators right on the way back up.
    /// `front` says whether `f` may change the chunk's first key; `f` must leave the chunk
    /// non-empty. Returns `f`'s result, or `None`, changing nothing, if chunk `i` is absent
    /// (callers check residency before an edit, so that is a bug of theirs).
    pub(crate) fn update_chunk<R>(
        &mut self,
        i: u64,
        front: bool,
        f: impl FnOnce(&mut Chunk) -> R,
    ) -> Option<R> {
        if !self.is_resident(i) {
            debug_assert!(false, "edit of absent chunk {i}");
            return None;
        }
        Some(self.update_chunk_inner(i, front, f).1)
    }

    /// Whether chunk `i` has its body in memory.
    pub(crate) fn is_resident(&self, i: u64) -> bool {
        matches!(self.chunk_at(i).0, Leaf::Body(_))
    }

    fn update_chunk_inner<R>(
        &mut self,
        i: u64,
        front: bool,
        f: impl FnOnce(&mut Chunk) -> R,
    ) -> (bool, R) {
        match self {
            Node::Chunk(c) => (front, f(Arc::make_mut(c))),
            // Unreachable: `update_chunk` checked residency first. Leave it unchanged.
            Node::Paged(_) => (false, f(&mut Chunk::new())),
            Node::Inner(x) => {
                let x = Arc::make_mut(x);
                let lc = x.left.chunk_count();
                let out = if i < lc {
                    x.left.update_chunk_inner(i, front, f)
                } else {
                    let (changed, r) = x.right.update_chunk_inner(i - lc, front, f);
                    if changed {
                        x.set_sep_from_right();
                    }
                    (false, r)
                };
                x.fix();
                out
            }
        }
    }

    /// Inserts `new` so that it becomes chunk `i + 1`.
    pub(crate) fn insert_chunk_after(&mut self, i: u64, new: Chunk) {
        match self {
            Node::Chunk(_) | Node::Paged(_) => {
                let sep: Box<[u8]> = new.first_key().into();
                let old = self.take();
                *self = Node::join(sep, old, Node::chunk(new));
            }
            Node::Inner(x) => {
                let x = Arc::make_mut(x);
                let lc = x.left.chunk_count();
                if i < lc {
                    x.left.insert_chunk_after(i, new);
                } else {
                    x.right.insert_chunk_after(i - lc, new);
                }
                x.fix();
                self.rebalance();
            }
        }
    }

    /// Removes chunk `i` from a tree of at least two chunks and returns it.
    pub(crate) fn remove_chunk(&mut self, i: u64) -> Option<Arc<Chunk>> {
        self.remove_chunk_inner(i).map(|(_, c)| c)
    }

    /// Also returns whether the first key of this subtree changed.
    fn remove_chunk_inner(&mut self, i: u64) -> Option<(bool, Arc<Chunk>)> {
        let Node::Inner(x) = self else { return None };
        let x = Arc::make_mut(x);
        let lc = x.left.chunk_count();
        let out = if i < lc {
            if let Node::Chunk(_) = x.left {
                let (right, Node::Chunk(gone)) = (x.right.take(), x.left.take()) else {
                    return None;
                };
                *self = right;
                return Some((true, gone));
            }
            x.left.remove_chunk_inner(i)?
        } else {
            if let Node::Chunk(_) = x.right {
                let (left, Node::Chunk(gone)) = (x.left.take(), x.right.take()) else {
                    return None;
                };
                *self = left;
                return Some((false, gone));
            }
            let (changed, gone) = x.right.remove_chunk_inner(i - lc)?;
            if changed {
                x.set_sep_from_right();
            }
            (false, gone)
        };
        x.fix();
        self.rebalance();
        Some(out)
    }

    /// Restores the AVL balance at this node after one of its children changed height by
    /// at most one. Rotations keep every separator valid: they preserve in-order.
    fn rebalance(&mut self) {
        let Node::Inner(x) = self else { return };
        let (hl, hr) = (x.left.height(), x.right.height());
        if hl > hr + 1 {
            let lx = match &x.left {
                Node::Inner(l) => l.left.height() < l.right.height(),
                Node::Chunk(_) | Node::Paged(_) => false,
            };
            if lx {
                Arc::make_mut(x).left.rotate_left();
            }
            self.rotate_right();
        } else if hr > hl + 1 {
            let rx = match &x.right {
                Node::Inner(r) => r.right.height() < r.left.height(),
                Node::Chunk(_) | Node::Paged(_) => false,
            };
            if rx {
                Arc::make_mut(x).right.rotate_right();
            }
            self.rotate_left();
        }
    }

    fn rotate_right(&mut self) {
        let Node::Inner(mut x) = self.take() else {
            return;
        };
        let xm = Arc::make_mut(&mut x);
        let Node::Inner(mut l) = xm.left.take() else {
            return;
        };
        let lm = Arc::make_mut(&mut l);
        xm.left = lm.right.take();
        xm.fix();
        lm.right = Node::Inner(x);
        lm.fix();
        *self = Node::Inner(l);
    }

    fn rotate_left(&mut self) {
        let Node::Inner(mut x) = self.take() else {
            return;
        };
        let xm = Arc::make_mut(&mut x);
        let Node::Inner(mut r) = xm.right.take() else {
            return;
        };
        let rm = Arc::make_mut(&mut r);
        xm.right = rm.left.take();
        xm.fix();
        rm.left = Node::Inner(x);
        rm.fix();
        *self = Node::Inner(r);
    }

    /// Computes every missing hash below and returns this node's hash.
    pub(crate) fn rehash<H: Hasher>(&mut self) -> Digest {
        match self {
            Node::Chunk(c) => match c.hash {
                Some(h) => h,
                None => Arc::make_mut(c).rehash::<H>(),
            },
            Node::Paged(p) => p.hash,
            Node::Inner(x) => {
                if let Some(h) = x.hash {
                    return h;
                }
                let x = Arc::make_mut(x);
                let l = x.left.rehash::<H>();
                let r = x.right.rehash::<H>();
                let h = inner_hash::<H>(x.height, x.key_count, x.chunk_count, &l, &r);
                x.hash = Some(h);
                h
            }
        }
    }

    /// Like [`Node::rehash`], hashing the two subtrees of the top node on two threads when
    /// both are stale and large enough to repay a thread.
    pub(crate) fn rehash_parallel<H: Hasher>(&mut self) -> Digest {
        const MIN_CHUNKS: u64 = 256;
        static CORES: LazyLock<usize> =
            LazyLock::new(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let Node::Inner(x) = self else { return self.rehash::<H>() };
        let stale = |n: &Node| n.cached_hash().is_none();
        if x.hash.is_some()
            || *CORES < 2
            || x.chunk_count < MIN_CHUNKS
            || !stale(&x.left)
            || !stale(&x.right)
        {
            return self.rehash::<H>();
        }
        let x = Arc::make_mut(x);
        let (left, right) = (&mut x.left, &mut x.right);
        let (l, r) = std::thread::scope(|s| {
            let l = s.spawn(|| left.rehash::<H>());
            let r = right.rehash::<H>();
            (l.join(), r)
        });
        // A panic on the helper thread is a bug in this crate; hash on this one instead.
        let l = l.unwrap_or_else(|_| x.left.rehash::<H>());
        let h = inner_hash::<H>(x.height, x.key_count, x.chunk_count, &l, &r);
        x.hash = Some(h);
        h
    }
}

impl Inner {
    /// Whether a search for `key` (with prefix `p`) continues left: `key < sep`.
    #[inline]
    pub(crate) fn goes_left(&self, key: &[u8], p: u64) -> bool {
        match p.cmp(&self.sep_prefix) {
            std::cmp::Ordering::Equal => key < &*self.sep,
            o => o.is_lt(),
        }
    }

    fn set_sep_from_right(&mut self) {
        self.sep = self.right.first_key().into();
        self.sep_prefix = key_prefix(&self.sep);
    }

    /// Recomputes height and counts from the children, and clears the hash.
    #[inline]
    fn fix(&mut self) {
        self.height = self.left.height().max(self.right.height()) + 1;
        self.key_count = self.left.key_count() + self.right.key_count();
        self.chunk_count = self.left.chunk_count() + self.right.chunk_count();
        self.hash = None;
    }
}
