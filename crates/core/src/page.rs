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
//! A body on disk is `varint n`, then `n` times a length-prefixed key and value
//! ([`ChunkRef::encode_body`]); [`Body::decode`] reads it defensively.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::chunk::Chunk;
use crate::codec::{put_bytes, put_varint, Reader};
use crate::error::{DecodeError, InputError};
use crate::hash::{check_key, Digest, Hasher};
use crate::node::{Leaf, Node, Page};
use crate::snapshot::{Snapshot, View};
use crate::tree::Tree;
use crate::{MAX_KEY_LEN, MAX_VALUE_LEN};

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

/// A chunk body decoded from untrusted bytes, not yet verified: [`Tree::page_in`] and
/// [`Snapshot::with_bodies`] verify it against the page it is meant for.
pub struct Body {
    chunk: Chunk,
    /// The hasher whose chunk hash [`Body::prehash`] computed and the chunk caches.
    hashed_with: Option<&'static str>,
}

impl Body {
    /// Decodes a body (see the module documentation). Lengths are checked against the
    /// bytes before anything is allocated; keys must be valid and strictly increasing.
    pub fn decode(bytes: &[u8]) -> Result<Body, DecodeError> {
        let mut r = Reader::new(bytes);
        let n = r.varint()?;
        // Every entry takes at least three bytes (two lengths and a one-byte key).
        if n == 0 || n > (r.remaining() / 3) as u64 {
            return Err(DecodeError::OutOfRange { what: "entry count", value: n, at: 0 });
        }
        let mut chunk = Chunk::new();
        chunk.reserve(n as usize, 0, 0);
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n {
            let at = r.position();
            let key = r.bytes(MAX_KEY_LEN, "key length")?;
            let value = r.bytes(MAX_VALUE_LEN, "value length")?;
            if check_key(key).is_err() || prev.is_some_and(|p| p >= key) {
                return Err(DecodeError::OutOfRange { what: "key", value: key.len() as u64, at });
            }
            chunk.push(key, value, None);
            prev = Some(key);
        }
        r.finish()?;
        Ok(Body { chunk, hashed_with: None })
    }

    /// Computes the chunk hash with `H` now, on whatever thread decoded the body (a
    /// store's prefetch threads), so that verifying it ([`Tree::page_in`]) on the
    /// writer's thread only compares. A body prehashed with another hasher than the
    /// tree's is refused there ([`PageError::Mismatch`]), never compared.
    pub fn prehash<H: Hasher>(&mut self) {
        self.chunk.rehash::<H>();
        self.hashed_with = Some(H::NAME);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.chunk.len()
    }

    /// Never true for a decoded body (a chunk holds at least one entry).
    pub fn is_empty(&self) -> bool {
        self.chunk.len() == 0
    }

    /// Checks this body against `page` and returns it as a chunk carrying the page's
    /// location (it is the body stored there).
    fn verify<H: Hasher>(mut self, page: &Page, index: u64) -> Result<Chunk, PageError> {
        let what = if self.hashed_with.is_some_and(|n| n != H::NAME) {
            // Its cached hashes are another function's: refused, never compared.
            Some("hasher (prehashed with another)")
        } else if self.chunk.len() != page.len as usize {
            Some("entry count")
        } else if self.chunk.first_key() != &*page.first {
            Some("first key")
        } else if self.chunk.rehash::<H>() != page.hash {
            Some("chunk hash")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(PageError::Mismatch { index, what });
        }
        self.chunk.loc.store(page.loc, Ordering::Release);
        Ok(self.chunk)
    }
}

/// One chunk of a version, resident or absent, as the store's checkpoint writer sees it.
pub struct ChunkRef<'a> {
    leaf: Leaf<'a>,
    /// The chunk's index.
    pub index: u64,
    /// The height of the inner node whose separator is this chunk's first key (0 for the
    /// first chunk): with the chunks in order, it rebuilds the tree's shape. Only a
    /// whole-version walk ([`Snapshot::for_each_chunk`]) gives it; 0 from
    /// [`Tree::chunk_ref`].
    pub key_height: u8,
}

impl ChunkRef<'_> {
    /// The chunk hash (the version is fully hashed).
    pub fn hash(&self) -> Digest {
        match self.leaf {
            Leaf::Body(c) => c.hash.unwrap_or_default(),
            Leaf::Absent(p) => p.hash,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u32 {
        match self.leaf {
            Leaf::Body(c) => c.len() as u32,
            Leaf::Absent(p) => p.len,
        }
    }

    /// Never true: a chunk holds at least one entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first key.
    pub fn first_key(&self) -> &[u8] {
        match self.leaf {
            Leaf::Body(c) => c.first_key(),
            Leaf::Absent(p) => &p.first,
        }
    }

    /// Where the body is on disk, if anywhere (always for an absent chunk).
    pub fn location(&self) -> Option<u64> {
        match self.leaf {
            Leaf::Body(c) => c.location(),
            Leaf::Absent(p) => Some(p.loc),
        }
    }

    /// An identity of the resident body (its address), equal in every version that shares
    /// it and different between bodies alive at the same time; `None` when absent.
    pub fn body_id(&self) -> Option<usize> {
        match self.leaf {
            Leaf::Body(c) => Some(c as *const Chunk as usize),
            Leaf::Absent(_) => None,
        }
    }

    /// Heap bytes of the resident body (0 when absent).
    pub fn heap_bytes(&self) -> usize {
        match self.leaf {
            Leaf::Body(c) => c.heap_bytes(),
            Leaf::Absent(_) => 0,
        }
    }

    /// Records that the body is now durable at `loc` (nonzero), which makes the chunk
    /// evictable in every version that shares it. False for an absent chunk.
    pub fn set_location(&self, loc: u64) -> bool {
        match self.leaf {
            Leaf::Body(c) if loc != 0 => {
                c.loc.store(loc, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// Appends the body's encoding to `out`; false, with `out` unchanged, if absent.
    pub fn encode_body(&self, out: &mut Vec<u8>) -> bool {
        let Leaf::Body(c) = self.leaf else { return false };
        put_varint(out, c.len() as u64);
        for i in 0..c.len() {
            put_bytes(out, c.key(i));
            put_bytes(out, c.value(i));
        }
        true
    }
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
