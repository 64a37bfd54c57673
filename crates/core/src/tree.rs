//! The mutable working tree and its immutable snapshots.
//!
//! Fill policy (deterministic, so a rebuilt tree has the same future as the original):
//! - A chunk that is full when a new key arrives first evens out with its emptier
//!   neighbour (left on a tie) if that neighbour has room; otherwise it and its
//!   neighbours (up to three full chunks) are redistributed into one chunk more, so
//!   three full chunks become four chunks three-quarters full. This keeps random
//!   insertions near 86% fill instead of the 69% of split-in-half.
//! - A chunk that falls below `capacity / 2` keys after a delete evens out with its fuller
//!   neighbour if that one has more than `capacity / 2`, else merges with it. A tree of
//!   one chunk may hold any number of keys from 1 up; a tree with no keys has no chunks.

use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::Arc;

use crate::chunk::{key_prefix, Chunk};
use crate::error::InputError;
use crate::hash::{check_key, root_hash, Digest, Hasher, Sha256, EMPTY_TOP};
use crate::node::{Leaf, Node};
use crate::page::PageRef;
use crate::snapshot::{Iter, Snapshot, View};
use crate::{DEFAULT_CAPACITY, MAX_CAPACITY, MAX_VALUE_LEN, MIN_CAPACITY};

/// An authenticated, ordered key-value map organised in self-verifiable chunks.
///
/// Edits are cheap and leave hashes stale; [`Tree::root_hash`] and [`Tree::snapshot`]
/// rehash only what changed. A [`Snapshot`] is an O(1), immutable, thread-safe view that
/// serves reads, proofs and chunks while the tree goes on changing.
///
/// ```
/// use bavl_core::{Tree, verify_membership};
/// let mut tree = Tree::new();
/// tree.insert(b"alice", b"10")?;
/// tree.insert(b"bob", b"20")?;
/// let snap = tree.snapshot();
/// let proof = snap.prove_membership(b"bob").expect("bob is present");
/// let ok = verify_membership::<bavl_core::Sha256>(&snap.root_hash(), b"bob", b"20", &proof)?;
/// assert_eq!(ok.index, 1);
/// # Ok::<(), bavl_core::Error>(())
/// ```
pub struct Tree<H: Hasher = Sha256> {
    pub(crate) root: Option<Node>,
    pub(crate) capacity: u32,
    /// Whether some chunk may be absent (§8.5.1): only then do edits check residency.
    pub(crate) paged: bool,
    _h: PhantomData<H>,
}

impl<H: Hasher> Clone for Tree<H> {
    fn clone(&self) -> Self {
        Tree::from_root(self.root.clone(), self.capacity, self.paged)
    }
}

impl Default for Tree<Sha256> {
    fn default() -> Self {
        Self::new()
    }
}

enum Put {
    /// Whether the key was new.
    Done(bool),
    Full(u64),
    Absent(u64),
}

fn check_entry(key: &[u8], value: &[u8]) -> Result<(), InputError> {
    check_key(key)?;
    if value.len() > MAX_VALUE_LEN {
        return Err(InputError::ValueTooLong { len: value.len(), max: MAX_VALUE_LEN });
    }
    Ok(())
}

impl Tree<Sha256> {
    /// An empty SHA-256 tree with the default chunk capacity.
    pub fn new() -> Self {
        Tree::from_root(None, DEFAULT_CAPACITY, false)
    }

    /// An empty SHA-256 tree whose chunks hold up to `capacity` keys
    /// ([`MIN_CAPACITY`]..=[`MAX_CAPACITY`]).
    pub fn with_capacity(capacity: u32) -> Result<Self, InputError> {
        Self::with_capacity_and_hasher(capacity)
    }
}

impl<H: Hasher> Tree<H> {
    /// An empty tree with hash function `H` and chunk capacity `capacity`.
    pub fn with_capacity_and_hasher(capacity: u32) -> Result<Self, InputError> {
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(InputError::Capacity(capacity));
        }
        Ok(Tree::from_root(None, capacity, false))
    }

    pub(crate) fn from_root(root: Option<Node>, capacity: u32, paged: bool) -> Self {
        Tree { root, capacity, paged, _h: PhantomData }
    }

    /// The chunk capacity chosen at creation.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn min_fill(&self) -> usize {
        self.capacity as usize / 2
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.view().len()
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> u64 {
        self.view().chunk_count()
    }

    /// The value of `key`, if present. On a tree with absent chunks (§8.5.1) a key
    /// whose chunk is absent is an error naming that chunk, never `None`: load it
    /// ([`Tree::page_in`]) and ask again. A tree with no absent chunk never errs.
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>, PageRef> {
        self.view().get(key)
    }

    /// The same as [`Tree::get`] (the name the loaders use).
    pub fn try_get(&self, key: &[u8]) -> Result<Option<&[u8]>, PageRef> {
        self.get(key)
    }

    /// Entries with keys in the given bounds, in key order. On a tree with absent
    /// chunks, the first absent chunk holding a key of the range is an error (before
    /// anything is yielded): an iteration never stops early at a chunk it cannot read.
    pub fn range<'a>(&'a self, lo: Bound<&[u8]>, hi: Bound<&'a [u8]>) -> Result<Iter<'a>, PageRef> {
        self.view().range(lo, hi)
    }

    /// All entries in key order (an error on a tree with an absent chunk, as
    /// [`Tree::range`]).
    pub fn iter(&self) -> Result<Iter<'_>, PageRef> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    pub(crate) fn view(&self) -> View<'_> {
        View { root: self.root.as_ref(), capacity: self.capacity, paged: self.paged }
    }

    /// Inserts or replaces; returns `true` if the key was new. A refused key or value
    /// leaves the tree unchanged.
    ///
    /// On a tree with absent chunks, an insert that needs one is refused with
    /// [`InputError::NotResident`] before anything changes ([`Tree::absent_for_insert`]).
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, InputError> {
        check_entry(key, value)?;
        if self.paged {
            if let Some(p) = self.absent_for_insert(key).into_iter().next() {
                return Err(p.not_resident());
            }
        }
        let cap = self.capacity as usize;
        for attempt in 0.. {
            debug_assert!(attempt < 2, "make_room left no room");
            let Some(root) = self.root.as_mut() else {
                let mut c = Chunk::new();
                c.insert_at(0, key, value);
                self.root = Some(Node::chunk(c));
                return Ok(true);
            };
            match put(root, key, key_prefix(key), value, cap, 0) {
                Put::Done(new) => return Ok(new),
                Put::Full(i) => self.make_room(i),
                Put::Absent(index) => return Err(InputError::NotResident { index }),
            }
        }
        unreachable!("the loop above only ends by returning")
    }

    /// Removes `key`; returns its value if it was present. On a tree with absent chunks
    /// `None` also means "not resident", with nothing changed: use [`Tree::try_remove`].
    pub fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.try_remove(key).ok().flatten()
    }

    /// Removes `key`; returns its value if it was present, or refuses, changing nothing,
    /// when a chunk the removal needs is absent ([`Tree::absent_for_remove`]).
    pub fn try_remove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, InputError> {
        if self.paged {
            if let Some(p) = self.absent_for_remove(key).into_iter().next() {
                return Err(p.not_resident());
            }
        }
        Ok(self.remove_resident(key))
    }

    fn remove_resident(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let root = self.root.as_mut()?;
        let (Leaf::Body(chunk), index, _) = root.find(key) else { return None };
        let pos = chunk.search(key).ok()?;
        let (old, len) = root.update_chunk(index, pos == 0, |c| {
            let old = c.remove_at(pos);
            (old, c.len())
        })?;
        if len < self.min_fill() {
            self.fix_underflow(index, len);
        }
        Some(old)
    }

    pub(crate) fn chunk_len(&self, i: u64) -> usize {
        self.root.as_ref().map_or(0, |r| match r.chunk_at(i).0 {
            Leaf::Body(c) => c.len(),
            Leaf::Absent(p) => p.len as usize,
        })
    }

    /// Makes room in full chunk `i`.
    fn make_room(&mut self, i: u64) {
        let count = self.chunk_count();
        let cap = self.capacity as usize;
        let left = (i > 0).then(|| self.chunk_len(i - 1));
        let right = (i + 1 < count).then(|| self.chunk_len(i + 1));
        let pick = match (left, right) {
            (Some(l), Some(r)) if r < l => Some((i, r)),
            (Some(l), _) => Some((i - 1, l)),
            (None, Some(r)) => Some((i, r)),
            (None, None) => None,
        };
        match pick {
            // Evening out must leave both chunks below capacity: the neighbour needs two
            // free slots (with one, the odd entry could land back in the full chunk).
            Some((start, len)) if len + 2 <= cap => self.even_out(start),
            _ => {
                let Some(root) = self.root.as_mut() else { return };
                let Some(back) = root.update_chunk(i, false, |c| c.split_off_back(cap - cap / 2))
                else {
                    return;
                };
                root.insert_chunk_after(i, back);
                let mut sizes: Vec<usize> = left.into_iter().collect();
                sizes.extend([cap / 2, cap - cap / 2]);
                sizes.extend(right);
                self.spread(if left.is_some() { i - 1 } else { i }, sizes);
            }
        }
    }

    /// Restores the fill floor of chunk `i`, which now holds `len` keys.
    fn fix_underflow(&mut self, i: u64, len: usize) {
        let count = self.chunk_count();
        if count == 1 {
            if len == 0 {
                self.root = None;
            }
            return;
        }
        let left = (i > 0).then(|| self.chunk_len(i - 1));
        let right = (i + 1 < count).then(|| self.chunk_len(i + 1));
        let (start, nb) = match (left, right) {
            (Some(l), Some(r)) if r > l => (i, r),
            (Some(l), _) => (i - 1, l),
            (None, Some(r)) => (i, r),
            (None, None) => return,
        };
        if nb > self.min_fill() {
            self.even_out(start);
        } else if let Some(root) = self.root.as_mut() {
            // Merge: the right chunk's entries move to the end of the left one.
            if let Some(gone) = root.remove_chunk(start + 1) {
                root.update_chunk(start, false, |c| c.append(&gone));
            }
        }
    }

    /// Moves `k` entries across the boundary between chunks `i` and `i + 1`: from the end
    /// of `i` to the front of `i + 1` when `rightward`, else the other way. No entry is
    /// copied one by one: buffers are split and joined.
    fn shift(&mut self, i: u64, k: usize, rightward: bool) {
        let Some(root) = self.root.as_mut() else { return };
        if k == 0 {
            return;
        }
        if rightward {
            if let Some(moved) = root.update_chunk(i, false, |c| c.split_off_back(k)) {
                root.update_chunk(i + 1, true, |c| c.prepend(moved));
            }
        } else if let Some(moved) = root.update_chunk(i + 1, true, |c| c.split_off_front(k)) {
            root.update_chunk(i, false, |c| c.append(&moved));
        }
    }

    /// Evens out chunks `i` and `i + 1` (the extra entry to the left).
    fn even_out(&mut self, i: u64) {
        self.spread(i, vec![self.chunk_len(i), self.chunk_len(i + 1)]);
    }

    /// Spreads the entries of the chunks from `start` on, whose sizes are `sizes`, evenly
    /// over those chunks (the first `total % n` get one more), sweeping left to right.
    fn spread(&mut self, start: u64, mut sizes: Vec<usize>) {
        let g = sizes.len();
        let total: usize = sizes.iter().sum();
        for j in 0..g.saturating_sub(1) {
            let target = total / g + usize::from(j < total % g);
            if sizes[j] > target {
                let k = sizes[j] - target;
                self.shift(start + j as u64, k, true);
                sizes[j + 1] += k;
            } else if sizes[j] < target {
                // Never empty the next chunk (the fill policy's groups never ask it to).
                let k = (target - sizes[j]).min(sizes[j + 1] - 1);
                self.shift(start + j as u64, k, false);
                sizes[j + 1] -= k;
            }
        }
    }

    /// Rehashes what changed and returns the root commitment.
    ///
    /// When both halves of the tree changed and the machine has more than one core, the
    /// two halves are hashed on two threads (the result is the same either way).
    pub fn root_hash(&mut self) -> Digest {
        let top = self.root.as_mut().map_or(EMPTY_TOP, |r| r.rehash_parallel::<H>());
        root_hash::<H>(self.capacity, &top)
    }

    /// Rehashes what changed and returns an immutable view of this state: O(1) besides
    /// the rehash, shares every node with the tree.
    pub fn snapshot(&mut self) -> Snapshot<H> {
        let root_hash = self.root_hash();
        Snapshot::new(self.root.clone(), self.capacity, root_hash, self.paged)
    }

    /// Checks every invariant of the structure and of the cached hashes.
    pub fn check(&self) -> Result<(), String> {
        let Some(root) = &self.root else { return Ok(()) };
        // A tree of one chunk may hold any number of keys from 1 up.
        let floor = if root.chunk_count() == 1 { 1 } else { self.min_fill() };
        root.check::<H>(self.capacity as usize, floor)
    }

    /// Chunk count and key count, and the payload bytes (keys plus values) of the resident
    /// chunks.
    pub fn stats(&self) -> TreeStats {
        let mut s = TreeStats {
            keys: self.len(),
            chunks: self.chunk_count(),
            capacity: self.capacity,
            height: self.root.as_ref().map_or(0, Node::height),
            payload_bytes: 0,
        };
        if let Some(r) = &self.root {
            for i in 0..s.chunks {
                if let Leaf::Body(c) = r.chunk_at(i).0 {
                    s.payload_bytes += c.payload_bytes() as u64;
                }
            }
        }
        s
    }
}

/// Sizes of a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeStats {
    pub keys: u64,
    pub chunks: u64,
    pub capacity: u32,
    /// Height of the AVL tree over chunks (0 for one chunk).
    pub height: u8,
    pub payload_bytes: u64,
}

impl TreeStats {
    /// Chunks over the fewest chunks that could hold the keys: 1.0 is perfect.
    pub fn space_efficiency(&self) -> f64 {
        if self.keys == 0 {
            return 1.0;
        }
        self.chunks as f64 / self.keys.div_ceil(self.capacity as u64) as f64
    }
}

/// The hot path of `insert`: one descent; reports a full chunk instead of splitting.
fn put(node: &mut Node, key: &[u8], prefix: u64, value: &[u8], cap: usize, index: u64) -> Put {
    match node {
        Node::Chunk(c) => match c.search(key) {
            Ok(pos) => {
                Arc::make_mut(c).set_value(pos, value);
                Put::Done(false)
            }
            Err(_) if c.len() >= cap => Put::Full(index),
            Err(pos) => {
                Arc::make_mut(c).insert_at(pos, key, value);
                Put::Done(true)
            }
        },
        Node::Paged(_) => Put::Absent(index),
        Node::Inner(x) => {
            let go_left = x.goes_left(key, prefix);
            let lc = x.left.chunk_count();
            let x = Arc::make_mut(x);
            let r = if go_left {
                put(&mut x.left, key, prefix, value, cap, index)
            } else {
                put(&mut x.right, key, prefix, value, cap, index + lc)
            };
            if let Put::Done(true) = r {
                x.key_count += 1;
            }
            x.hash = None;
            r
        }
    }
}
