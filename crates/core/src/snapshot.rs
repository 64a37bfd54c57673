//! Immutable versions of a tree, and the read-only view and iterator that working trees
//! and snapshots share.
//!
//! A [`Snapshot`] holds the root of a fully hashed tree; every node is shared with the
//! tree it came from (copy-on-write), so taking one is O(1) and it can be read from other
//! threads while the tree goes on changing.

use std::marker::PhantomData;
use std::ops::Bound;

use crate::chunk::Chunk;
use crate::hash::{Digest, Hasher, Sha256};
use crate::node::{Leaf, Node};
use crate::page::PageRef;
use crate::tree::Tree;

/// An immutable version of a tree: cheap to clone, safe to share between threads.
pub struct Snapshot<H: Hasher = Sha256> {
    pub(crate) root: Option<Node>,
    pub(crate) capacity: u32,
    root_hash: Digest,
    /// Whether some chunk may be absent (§8.5.1).
    pub(crate) paged: bool,
    _h: PhantomData<H>,
}

impl<H: Hasher> Snapshot<H> {
    /// Wraps a fully hashed root; `root_hash` must be its commitment.
    pub(crate) fn new(root: Option<Node>, capacity: u32, root_hash: Digest, paged: bool) -> Self {
        Snapshot { root, capacity, root_hash, paged, _h: PhantomData }
    }
}

impl<H: Hasher> Clone for Snapshot<H> {
    fn clone(&self) -> Self {
        Snapshot::new(self.root.clone(), self.capacity, self.root_hash, self.paged)
    }
}

impl<H: Hasher> Snapshot<H> {
    /// The root commitment of this version.
    pub fn root_hash(&self) -> Digest {
        self.root_hash
    }
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.view().len()
    }
    /// Whether this version holds no key.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }
    /// Number of chunks.
    pub fn chunk_count(&self) -> u64 {
        self.view().chunk_count()
    }
    /// The value of `key`, if present; on a version with absent chunks a key whose chunk
    /// is absent is an error naming it, never `None` (see [`Tree::get`]).
    pub fn get(&self, key: &[u8]) -> Result<Option<&[u8]>, PageRef> {
        self.view().get(key)
    }
    /// The same as [`Snapshot::get`] (the name the loaders use).
    pub fn try_get(&self, key: &[u8]) -> Result<Option<&[u8]>, PageRef> {
        self.get(key)
    }
    /// Entries in the bounds, in key order; an error if an absent chunk holds a key of
    /// the range (see [`Tree::range`]).
    pub fn range<'a>(&'a self, lo: Bound<&[u8]>, hi: Bound<&'a [u8]>) -> Result<Iter<'a>, PageRef> {
        self.view().range(lo, hi)
    }
    /// All entries in key order (see [`Snapshot::range`]).
    pub fn iter(&self) -> Result<Iter<'_>, PageRef> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
    pub(crate) fn view(&self) -> View<'_> {
        View { root: self.root.as_ref(), capacity: self.capacity, paged: self.paged }
    }
    /// A working tree starting from this version (O(1); copies on write).
    pub fn to_tree(&self) -> Tree<H> {
        Tree::from_root(self.root.clone(), self.capacity, self.paged)
    }
}

/// A read-only view shared by [`Tree`] and [`Snapshot`].
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub root: Option<&'a Node>,
    pub capacity: u32,
    /// Whether some chunk may be absent (reads then check before answering).
    pub paged: bool,
}

impl<'a> View<'a> {
    pub(crate) fn len(&self) -> u64 {
        self.root.map_or(0, Node::key_count)
    }

    pub(crate) fn chunk_count(&self) -> u64 {
        self.root.map_or(0, Node::chunk_count)
    }

    /// The value of `key`, or the absent chunk that would hold it.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<&'a [u8]>, PageRef> {
        let Some(root) = self.root else { return Ok(None) };
        match root.find(key) {
            (Leaf::Body(c), _, _) => Ok(c.search(key).ok().map(|i| c.value(i))),
            (Leaf::Absent(p), index, _) => Err(PageRef::new(p, index)),
        }
    }

    /// Global index of the first key not below `lo`, or the absent chunk that decides it.
    pub(crate) fn try_lower_index(&self, lo: Bound<&[u8]>) -> Result<u64, PageRef> {
        let Some(root) = self.root else { return Ok(0) };
        match lo {
            Bound::Unbounded => Ok(0),
            Bound::Included(k) | Bound::Excluded(k) => {
                let (c, index, before) = root.find(k);
                let c = match c {
                    Leaf::Body(c) => c,
                    Leaf::Absent(p) => return Err(PageRef::new(p, index)),
                };
                let i = match (c.search(k), lo) {
                    (Ok(i), Bound::Excluded(_)) => i + 1,
                    (Ok(i), _) | (Err(i), _) => i,
                };
                Ok(before + i as u64)
            }
        }
    }

    /// Entries in the bounds, or the first absent chunk holding a key of them (checked
    /// only when the tree may have absent chunks: an all-resident tree pays nothing).
    pub(crate) fn range(&self, lo: Bound<&[u8]>, hi: Bound<&'a [u8]>) -> Result<Iter<'a>, PageRef> {
        let mut it = Iter { root: self.root, chunk: None, chunk_index: 0, pos: 0, hi };
        let Some(root) = self.root else { return Ok(it) };
        let start = self.try_lower_index(lo)?;
        if self.paged {
            let end = match hi {
                Bound::Unbounded => root.key_count(),
                Bound::Included(b) => self.try_lower_index(Bound::Excluded(b))?,
                Bound::Excluded(b) => self.try_lower_index(Bound::Included(b))?,
            };
            if let Some(p) = self.absent_between(start, end) {
                return Err(p);
            }
        }
        if start < root.key_count() {
            if let (Leaf::Body(c), index, before) = root.locate(start) {
                it.chunk = Some(c);
                it.chunk_index = index;
                it.pos = (start - before) as usize;
            }
        }
        Ok(it)
    }
}

/// Iterator over entries in key order.
pub struct Iter<'a> {
    root: Option<&'a Node>,
    chunk: Option<&'a Chunk>,
    chunk_index: u64,
    pos: usize,
    hi: Bound<&'a [u8]>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let c = self.chunk?;
        let key = c.key(self.pos);
        let inside = match self.hi {
            Bound::Unbounded => true,
            Bound::Included(h) => key <= h,
            Bound::Excluded(h) => key < h,
        };
        if !inside {
            self.chunk = None;
            return None;
        }
        let item = (key, c.value(self.pos));
        self.pos += 1;
        if self.pos == c.len() {
            self.pos = 0;
            self.chunk_index += 1;
            let root = self.root?;
            self.chunk = match root.chunk_at(self.chunk_index).0 {
                Leaf::Body(c) if self.chunk_index < root.chunk_count() => Some(c),
                _ => None,
            };
        }
        Some(item)
    }
}
