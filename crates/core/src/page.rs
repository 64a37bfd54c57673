//! Paging (`docs/design.md` §8.5.1): chunks whose bodies are not in memory.
//!
//! An absent chunk is a [`Node::Paged`] in the skeleton: its hash, entry count, first key
//! and a location only the store interprets. Guarantees:
//! - evicting ([`Tree::page_out`]) and loading ([`Tree::page_in`]) never change a hash, a
//!   count or a separator, so neither changes the tree's root or its future;
//! - a body becomes resident only if its entry count, first key and chunk hash equal the
//!   page's ([`PageError::Mismatch`] otherwise): bytes damaged on disk are never an answer;
//! - the core does no I/O: before an operation, the caller asks which absent chunks it
//!   needs (`absent_for_*`), loads them, and only then applies it; an operation that would
//!   still meet an absent chunk is refused before it changes anything.
//!
//! Bodies read from disk and chunks as a writer sees them are in `body.rs`.

use std::ops::ControlFlow;
use std::sync::Arc;

use crate::body::{Body, ChunkRef};
use crate::error::InputError;
use crate::hash::{Digest, Hasher};
use crate::node::{Leaf, Node, Page};
use crate::snapshot::{Snapshot, View};
use crate::tree::Tree;

/// A key and its value, borrowed from a resident chunk.
pub type Entry<'a> = (&'a [u8], &'a [u8]);

/// An absent chunk that an operation needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRef {
    /// The chunk's index in its version.
    pub index: u64,
    /// The store's location of the body.
    pub loc: u64,
    /// The chunk hash the body must have.
    pub hash: Digest,
    /// Its entry count.
    pub len: u32,
}

impl PageRef {
    pub(crate) fn new(p: &Page, index: u64) -> Self {
        PageRef { index, loc: p.loc, hash: p.hash, len: p.len }
    }

    pub(crate) fn not_resident(&self) -> InputError {
        InputError::NotResident { index: self.index }
    }
}

/// A `PageRef` is also the error of a read that needs an absent chunk: the read is
/// refused (never answered from the chunks that happen to be resident) and the caller
/// loads the chunk it names.
impl std::fmt::Display for PageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chunk {} is not resident: load it before this read", self.index)
    }
}

impl std::error::Error for PageRef {}

impl From<PageRef> for InputError {
    fn from(p: PageRef) -> InputError {
        p.not_resident()
    }
}

/// Why a body was not made resident.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// Chunk `index` is resident already, or does not exist.
    #[error("chunk {index} is not an absent chunk")]
    NotAbsent { index: u64 },
    /// The body is not the one the skeleton commits to (damaged or misplaced on disk).
    #[error("the body of chunk {index} does not match its page: {what}")]
    Mismatch { index: u64, what: &'static str },
}

impl Node {
    /// Replaces leaf `i` by `new`, which has the same hash, count and first key, so no
    /// hash, count or separator above changes. Copies only the shared nodes on the path.
    fn replace_leaf(&mut self, i: u64, new: Node) {
        match self {
            Node::Inner(x) => {
                let x = Arc::make_mut(x);
                let lc = x.left.chunk_count();
                if i < lc {
                    x.left.replace_leaf(i, new);
                } else {
                    x.right.replace_leaf(i - lc, new);
                }
            }
            leaf => *leaf = new,
        }
    }

    /// Makes absent chunk `i` resident with `body`, verified against its page.
    fn page_in<H: Hasher>(&mut self, i: u64, body: Body) -> Result<(), PageError> {
        let (Leaf::Absent(p), _) = self.chunk_at(i) else {
            return Err(PageError::NotAbsent { index: i });
        };
        if i >= self.chunk_count() {
            return Err(PageError::NotAbsent { index: i });
        }
        let chunk = body.verify::<H>(p, i)?;
        self.replace_leaf(i, Node::chunk(chunk));
        Ok(())
    }

    /// Calls `f` for chunk `index` (counted from this node's first chunk at `index`'s
    /// value on entry) and every one after it, in order, until `f` breaks; subtrees
    /// wholly before `start` are skipped, not walked. Key-heights are not given (0).
    fn walk_from<'a>(
        &'a self,
        start: u64,
        index: &mut u64,
        f: &mut impl FnMut(ChunkRef<'a>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let leaf = match self {
            Node::Inner(x) => {
                let lc = x.left.chunk_count();
                if start < *index + lc {
                    x.left.walk_from(start, index, f)?;
                } else {
                    *index += lc;
                }
                return x.right.walk_from(start, index, f);
            }
            Node::Chunk(c) => Leaf::Body(c),
            Node::Paged(p) => Leaf::Absent(p),
        };
        let i = *index;
        *index += 1;
        if i < start {
            return ControlFlow::Continue(());
        }
        f(ChunkRef { leaf, index: i, key_height: 0 })
    }

    /// Calls `f` for every chunk in order, with its key-height.
    fn for_each_chunk<'a>(&'a self, up: u8, index: &mut u64, f: &mut impl FnMut(ChunkRef<'a>)) {
        match self {
            Node::Inner(x) => {
                x.left.for_each_chunk(up, index, f);
                x.right.for_each_chunk(x.height, index, f);
            }
            Node::Chunk(c) => {
                f(ChunkRef { leaf: Leaf::Body(c), index: *index, key_height: up });
                *index += 1;
            }
            Node::Paged(p) => {
                f(ChunkRef { leaf: Leaf::Absent(p), index: *index, key_height: up });
                *index += 1;
            }
        }
    }
}

impl<'a> View<'a> {
    /// The first absent chunk holding a key with index in `lo..hi`.
    pub(crate) fn absent_between(&self, lo: u64, hi: u64) -> Option<PageRef> {
        let root = self.root?;
        let mut k = lo;
        while k < hi.min(root.key_count()) {
            match root.locate(k) {
                (Leaf::Absent(p), index, _) => return Some(PageRef::new(p, index)),
                (Leaf::Body(c), _, before) => k = before + c.len() as u64,
            }
        }
        None
    }

    /// The first entry with a key within `lo`, or the absent chunk that holds it.
    pub(crate) fn try_first_from(
        &self,
        lo: std::ops::Bound<&[u8]>,
    ) -> Result<Option<Entry<'a>>, PageRef> {
        let Some(root) = self.root else { return Ok(None) };
        let start = self.try_lower_index(lo)?;
        if start >= root.key_count() {
            return Ok(None);
        }
        match root.locate(start) {
            (Leaf::Body(c), _, before) => {
                let i = (start - before) as usize;
                Ok(Some((c.key(i), c.value(i))))
            }
            (Leaf::Absent(p), index, _) => Err(PageRef::new(p, index)),
        }
    }

    /// The absent chunks among `i - 1`, `i + 1`.
    fn absent_neighbours(&self, i: u64) -> Vec<PageRef> {
        let Some(root) = self.root else { return Vec::new() };
        let count = root.chunk_count();
        let mut out = Vec::new();
        for j in [i.checked_sub(1), Some(i + 1).filter(|&j| j < count)].into_iter().flatten() {
            if let (Leaf::Absent(p), _) = root.chunk_at(j) {
                out.push(PageRef::new(p, j));
            }
        }
        out
    }
}

impl<H: Hasher> Tree<H> {
    /// The absent chunks an insert of `key` needs, its own chunk first: that chunk, and
    /// its neighbours when it is full and the key new (the fill policy then moves entries
    /// between them). For an absent chunk the page's entry count decides "full", so one
    /// answer covers the whole operation (a replacement may load a neighbour for nothing).
    pub fn absent_for_insert(&self, key: &[u8]) -> Vec<PageRef> {
        let cap = self.capacity as usize;
        self.absent_for(key, |len, found| len >= cap && found != Some(true))
    }

    /// The absent chunks a removal of `key` needs, its own chunk first: that chunk, and
    /// its neighbours when the removal leaves it below the fill floor.
    pub fn absent_for_remove(&self, key: &[u8]) -> Vec<PageRef> {
        let floor = self.capacity as usize / 2;
        self.absent_for(key, |len, found| len <= floor && found != Some(false))
    }

    /// The key's chunk if absent, then its absent neighbours if `restructures(len, found)`
    /// (`found`: whether the key is in the chunk, `None` when the chunk is absent).
    fn absent_for(
        &self,
        key: &[u8],
        restructures: impl Fn(usize, Option<bool>) -> bool,
    ) -> Vec<PageRef> {
        let Some(root) = &self.root else { return Vec::new() };
        let (leaf, i, _) = root.find(key);
        let (mut out, len, found) = match leaf {
            Leaf::Absent(p) => (vec![PageRef::new(p, i)], p.len as usize, None),
            Leaf::Body(c) => (Vec::new(), c.len(), Some(c.search(key).is_ok())),
        };
        if restructures(len, found) {
            out.extend(self.view().absent_neighbours(i));
        }
        out
    }

    /// The first entry with a key within `lo` (a seek), or the absent chunk holding it.
    pub fn try_first_from(&self, lo: std::ops::Bound<&[u8]>) -> Result<Option<Entry<'_>>, PageRef> {
        self.view().try_first_from(lo)
    }

    /// Whether some chunk may be absent.
    pub fn is_paged(&self) -> bool {
        self.paged
    }

    /// Evicts chunk `i` if it is resident, hashed and has a disk location (a clean
    /// chunk): its body is dropped from this tree (freed once no snapshot shares it).
    /// Returns the body's heap bytes, or `None` if the chunk was not evicted.
    pub fn page_out(&mut self, i: u64) -> Option<usize> {
        let root = self.root.as_mut()?;
        if i >= root.chunk_count() {
            return None;
        }
        let (Leaf::Body(c), _) = root.chunk_at(i) else { return None };
        let (hash, loc) = (c.hash?, c.location()?);
        let bytes = c.heap_bytes();
        let page = Page { hash, len: c.len() as u32, first: c.first_key().into(), loc };
        root.replace_leaf(i, Node::Paged(Arc::new(page)));
        self.paged = true;
        Some(bytes)
    }

    /// Gives absent chunk `i` a new location `loc` (nonzero; the caller copied its body
    /// there). False, changing nothing, if chunk `i` is not absent.
    pub fn relocate(&mut self, i: u64, loc: u64) -> bool {
        let Some(root) = self.root.as_mut() else { return false };
        let (Leaf::Absent(p), _) = root.chunk_at(i) else { return false };
        if loc == 0 || i >= root.chunk_count() {
            return false;
        }
        let page = Page { hash: p.hash, len: p.len, first: p.first.clone(), loc };
        root.replace_leaf(i, Node::Paged(Arc::new(page)));
        true
    }

    /// Makes absent chunk `i` resident with `body`, which must be the body its page
    /// commits to (count, first key and hash); otherwise nothing changes.
    pub fn page_in(&mut self, i: u64, body: Body) -> Result<(), PageError> {
        let root = self.root.as_mut().ok_or(PageError::NotAbsent { index: i })?;
        root.page_in::<H>(i, body)
    }

    /// Chunk `i`, resident or absent (for writing its body out before an eviction).
    pub fn chunk_ref(&self, i: u64) -> Option<ChunkRef<'_>> {
        let root = self.root.as_ref()?;
        if i >= root.chunk_count() {
            return None;
        }
        // The key-height is not needed here (only a whole-version walk gives it).
        Some(ChunkRef { leaf: root.chunk_at(i).0, index: i, key_height: 0 })
    }

    /// Whether chunk `i` exists with its body in memory.
    pub fn is_resident(&self, i: u64) -> bool {
        self.root.as_ref().is_some_and(|r| i < r.chunk_count() && r.is_resident(i))
    }

    /// Calls `f` for chunk `start` and each one after it, in order, until `f` breaks or
    /// the last chunk: one walk that visits each chunk once (key-heights 0), where a
    /// [`Tree::chunk_ref`] per index descends from the root each time. An eviction sweep
    /// picks its chunks so, then pages them out.
    pub fn for_each_chunk_from<'a>(
        &'a self,
        start: u64,
        mut f: impl FnMut(ChunkRef<'a>) -> ControlFlow<()>,
    ) {
        if let Some(root) = &self.root {
            let _ = root.walk_from(start, &mut 0, &mut f);
        }
    }
}

impl<H: Hasher> Snapshot<H> {
    /// The first entry with a key within `lo` (a seek), or the absent chunk holding it.
    pub fn try_first_from(&self, lo: std::ops::Bound<&[u8]>) -> Result<Option<Entry<'_>>, PageRef> {
        self.view().try_first_from(lo)
    }

    /// The first absent chunk a range proof of `lo..hi` (or a read of the range) needs.
    pub fn absent_for_range(
        &self,
        lo: std::ops::Bound<&[u8]>,
        hi: std::ops::Bound<&[u8]>,
    ) -> Option<PageRef> {
        match self.range_span(lo, hi) {
            Err(p) => Some(p),
            Ok((plo, phi, _, _)) => self.view().absent_between(plo, phi),
        }
    }

    /// Chunk `i` if it is absent.
    pub fn absent_chunk(&self, i: u64) -> Option<PageRef> {
        let root = self.root.as_ref()?;
        match root.chunk_at(i) {
            (Leaf::Absent(p), _) if i < root.chunk_count() => Some(PageRef::new(p, i)),
            _ => None,
        }
    }

    /// This version with the given absent chunks resident, each verified against its
    /// page: a new snapshot sharing every other node (this one is unchanged, so versions
    /// shared between threads are never written).
    pub fn with_bodies(
        &self,
        bodies: impl IntoIterator<Item = (u64, Body)>,
    ) -> Result<Snapshot<H>, PageError> {
        let mut root = self.root.clone();
        for (i, body) in bodies {
            let r = root.as_mut().ok_or(PageError::NotAbsent { index: i })?;
            r.page_in::<H>(i, body)?;
        }
        Ok(Snapshot::new(root, self.capacity, self.root_hash(), self.paged))
    }

    /// This version with the bodies of the chunks `drop` picks made absent: only
    /// resident, hashed chunks whose body has a location (is on disk) can be, and no hash,
    /// count or key changes. A new snapshot sharing every other node (this one is
    /// unchanged); a body is freed once nothing else shares it. Returns it and how many
    /// chunks were made absent. A store drops from its retained versions the bodies its
    /// working tree evicted, so that old versions do not keep them in memory.
    pub fn without_bodies(
        &self,
        mut drop: impl FnMut(&ChunkRef<'_>) -> bool,
    ) -> (Snapshot<H>, u64) {
        let mut picked = Vec::new();
        self.for_each_chunk(|c| {
            if c.body_id().is_some() && c.location().is_some() && drop(&c) {
                picked.push(c.index);
            }
        });
        if picked.is_empty() {
            return (self.clone(), 0);
        }
        let mut t = self.to_tree();
        let n = picked.into_iter().filter(|&i| t.page_out(i).is_some()).count() as u64;
        (Snapshot::new(t.root, self.capacity, self.root_hash(), true), n)
    }

    /// Calls `f` for every chunk in order (resident or absent), with its key-height.
    pub fn for_each_chunk<'a>(&'a self, mut f: impl FnMut(ChunkRef<'a>)) {
        if let Some(root) = &self.root {
            root.for_each_chunk(0, &mut 0, &mut f);
        }
    }
}
