//! A chunk: the leaf of the AVL tree, and the unit of proof and state transfer.
//!
//! A chunk holds up to `capacity` entries sorted by key, keys packed in one buffer and
//! values in another, and one small record per entry (key prefix, end offsets, leaf hash),
//! so a binary search touches contiguous memory, copying a chunk for copy-on-write is four
//! allocations and a few `memcpy`s, and no entry costs an allocation of its own.
//!
//! Over its entries lies the in-chunk hash tree, shaped as in RFC 6962: the node over
//! `n > 1` leaves splits after the largest power of two below `n`. Every node of that tree
//! is either an aligned perfect block of `2^j` leaves or lies on the right spine, so the
//! hashes of the blocks are cached per level and the spine (at most log2 n nodes) is
//! recomputed when the chunk is rehashed. The levels live in one buffer laid out for `span`
//! leaves (`span`, a power of two, at least the entry count): level `j` (blocks of
//! `2^(j+1)` leaves) holds `span >> (j + 1)` slots from offset `span - (span >> j)`.
//!
//! Hashing is lazy: edits only mark what they invalidate. An in-place value update marks
//! one leaf (`touched`); an insert or removal at position `p` invalidates every block at or
//! after `p` (`clean_prefix`), because positions shift. [`Chunk::rehash`] recomputes only
//! those. Callers guarantee a chunk in a tree is never empty.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::{Digest, Hasher};

#[path = "chunk_hash.rs"]
mod hash;

/// Inserts `bytes` at `at`, shifting the tail (one `memmove`).
fn insert_bytes(buf: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let old = buf.len();
    // Grown by an eighth, not doubled: a chunk's buffers are bounded by its capacity, so
    // geometric growth by 1.125 costs a few more copies of a few KB while a chunk fills,
    // and a full chunk holds at most an eighth of slack instead of up to half (a paged
    // store's budget counts capacity: slack is chunks not cached).
    if buf.capacity() < old + bytes.len() {
        buf.reserve_exact(bytes.len().max(old / 8));
    }
    buf.resize(old + bytes.len(), 0);
    buf.copy_within(at..old, at + bytes.len());
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// One entry's record. Key `i` is `kbuf[kend(i - 1)..kend(i)]` (from 0 for the first),
/// value `i` likewise in `vbuf`.
#[derive(Clone, Copy)]
struct Entry {
    /// First eight bytes of the key, big-endian and zero-padded: most comparisons in a
    /// binary search are decided here, without touching the key bytes.
    prefix: u64,
    vend: usize,
    kend: u32,
    /// The leaf hash; `None` when stale.
    leaf: Option<Digest>,
}

#[derive(Default)]
pub(crate) struct Chunk {
    kbuf: Vec<u8>,
    vbuf: Vec<u8>,
    entries: Vec<Entry>,
    /// Cached block hashes, laid out for `span` leaves (see the module documentation):
    /// `span - 1` slots, or none while `span < 2`.
    levels: Vec<Digest>,
    span: usize,
    /// Level hashes of blocks wholly below this position are valid, except over `touched`.
    /// Never above the entry count at the last rehash, so those blocks fit the layout.
    clean_prefix: usize,
    /// Positions below `clean_prefix` whose leaf changed in place.
    touched: Vec<u32>,
    /// The chunk hash; `None` when anything above is stale.
    pub(crate) hash: Option<Digest>,
    /// Where the store keeps this exact body on disk (0: nowhere yet). Set through a shared
    /// reference by the store's checkpoint thread once the body is durable; cleared by
    /// every edit, and a copy starts without one, so a location always names these bytes.
    pub(crate) loc: AtomicU64,
}

/// Bytes rounded up to a size class: four classes per power of two above 64 bytes (the
/// classes mimalloc itself uses, so the rounding costs it nothing).
#[inline]
fn size_class(bytes: usize) -> usize {
    if bytes <= 64 {
        return bytes.next_multiple_of(8);
    }
    let step = (bytes.next_power_of_two() / 8).max(8);
    bytes.next_multiple_of(step)
}

/// A copy of `v` with room to grow to the next size class, and at least `extra` more
/// elements, so that the write which made the copy (copy-on-write) rarely reallocates.
#[inline]
fn copy_vec<T: Copy>(v: &[T], extra: usize) -> Vec<T> {
    if v.is_empty() {
        return Vec::new();
    }
    let size = std::mem::size_of::<T>().max(1);
    let cap = size_class((v.len() + extra) * size) / size;
    let mut out = Vec::with_capacity(cap.max(v.len() + extra));
    out.extend_from_slice(v);
    out
}

/// A chunk is copied when a shared version is written (copy-on-write). The copy gets its
/// buffers rounded up to size classes with room for one more entry: the write that caused
/// the copy is most often an insert, which would otherwise reallocate three buffers at
/// once, and a heap of a few sizes stays cheap to allocate from (glibc's malloc slows down
/// several-fold on a heap of many distinct sizes).
impl Clone for Chunk {
    fn clone(&self) -> Self {
        let n = self.entries.len().max(1);
        let kavg = self.kbuf.len().div_ceil(n);
        let vavg = self.vbuf.len().div_ceil(n);
        Chunk {
            kbuf: copy_vec(&self.kbuf, kavg),
            vbuf: copy_vec(&self.vbuf, vavg),
            entries: copy_vec(&self.entries, 1),
            levels: self.levels.clone(),
            span: self.span,
            clean_prefix: self.clean_prefix,
            touched: self.touched.clone(),
            hash: self.hash,
            loc: AtomicU64::new(0),
        }
    }
}

/// The first eight bytes of `key` as a big-endian integer, zero-padded. If two keys'
/// prefixes differ, they order the keys the same way the keys order.
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Largest power of two strictly below `n` (`n >= 2`).
#[inline]
pub(crate) fn split_point(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// Offset of level `j` in a level buffer laid out for `span` leaves.
#[inline]
fn level_offset(span: usize, j: usize) -> usize {
    span - (span >> j)
}

impl Chunk {
    pub(crate) fn new() -> Self {
        Chunk::default()
    }

    /// Marks the hash stale and forgets the disk location: the body changed.
    #[inline]
    fn stale(&mut self) {
        self.hash = None;
        *self.loc.get_mut() = 0;
    }

    /// The disk location of this body, if it has one (see [`Chunk::loc`]).
    pub(crate) fn location(&self) -> Option<u64> {
        Some(self.loc.load(Ordering::Acquire)).filter(|&l| l != 0)
    }

    /// Appends an entry whose key follows every key here (used when building).
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8], leaf: Option<Digest>) {
        self.kbuf.extend_from_slice(key);
        self.vbuf.extend_from_slice(value);
        self.entries.push(Entry {
            prefix: key_prefix(key),
            vend: self.vbuf.len(),
            kend: self.kbuf.len() as u32,
            leaf,
        });
        self.stale();
    }

    /// Reserves room for `n` entries of about `bytes` key and value bytes in all.
    pub(crate) fn reserve(&mut self, n: usize, key_bytes: usize, value_bytes: usize) {
        self.kbuf.reserve_exact(key_bytes);
        self.vbuf.reserve_exact(value_bytes);
        self.entries.reserve(n);
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    fn kstart(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.entries[i - 1].kend as usize
        }
    }

    #[inline]
    fn vstart(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.entries[i - 1].vend
        }
    }

    #[inline]
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        &self.kbuf[self.kstart(i)..self.entries[i].kend as usize]
    }

    #[inline]
    pub(crate) fn value(&self, i: usize) -> &[u8] {
        &self.vbuf[self.vstart(i)..self.entries[i].vend]
    }

    pub(crate) fn first_key(&self) -> &[u8] {
        self.key(0)
    }

    /// Binary search: `Ok(i)` if key `i` equals `key`, else `Err(insertion point)`.
    #[inline]
    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        let p = key_prefix(key);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let order = match self.entries[mid].prefix.cmp(&p) {
                std::cmp::Ordering::Equal => self.key(mid).cmp(key),
                o => o,
            };
            match order {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Replaces the value of entry `i`.
    pub(crate) fn set_value(&mut self, i: usize, value: &[u8]) {
        let (a, b) = (self.vstart(i), self.entries[i].vend);
        if b - a == value.len() {
            self.vbuf[a..b].copy_from_slice(value);
        } else {
            self.vbuf.splice(a..b, value.iter().copied());
            // Every end from `i` on is at least `b - a`, so this never underflows.
            for e in &mut self.entries[i..] {
                e.vend = e.vend - (b - a) + value.len();
            }
        }
        self.entries[i].leaf = None;
        if i < self.clean_prefix {
            self.touched.push(i as u32);
        }
        self.stale();
    }

    pub(crate) fn insert_at(&mut self, i: usize, key: &[u8], value: &[u8]) {
        let (kat, vat) = (self.kstart(i), self.vstart(i));
        insert_bytes(&mut self.kbuf, kat, key);
        insert_bytes(&mut self.vbuf, vat, value);
        let klen = key.len() as u32;
        for e in &mut self.entries[i..] {
            e.kend += klen;
            e.vend += value.len();
        }
        let entry = Entry {
            prefix: key_prefix(key),
            vend: vat + value.len(),
            kend: kat as u32 + klen,
            leaf: None,
        };
        if self.entries.len() == self.entries.capacity() {
            self.entries.reserve_exact((self.entries.len() / 8).max(1));
        }
        self.entries.insert(i, entry);
        self.clean_prefix = self.clean_prefix.min(i);
        self.stale();
    }

    /// Removes entry `i` and returns its value.
    pub(crate) fn remove_at(&mut self, i: usize) -> Vec<u8> {
        let (ks, ke) = (self.kstart(i), self.entries[i].kend as usize);
        let (vs, ve) = (self.vstart(i), self.entries[i].vend);
        self.kbuf.drain(ks..ke);
        let old = self.vbuf.drain(vs..ve).collect();
        self.entries.remove(i);
        for e in &mut self.entries[i..] {
            e.kend -= (ke - ks) as u32;
            e.vend -= ve - vs;
        }
        self.clean_prefix = self.clean_prefix.min(i);
        self.stale();
        old
    }

    /// Removes the last `k` entries and returns them as a chunk. The entries kept keep
    /// their cached hashes.
    pub(crate) fn split_off_back(&mut self, k: usize) -> Chunk {
        let at = self.len() - k;
        let (kbase, vbase) = (self.kstart(at), self.vstart(at));
        let mut entries = self.entries.split_off(at);
        for e in &mut entries {
            e.kend -= kbase as u32;
            e.vend -= vbase;
        }
        let moved = Chunk {
            kbuf: self.kbuf.split_off(kbase),
            vbuf: self.vbuf.split_off(vbase),
            entries,
            ..Default::default()
        };
        self.clean_prefix = self.clean_prefix.min(at);
        self.stale();
        moved
    }

    /// Removes the first `k` entries and returns them as a chunk. Positions shift, so the
    /// entries kept are rehashed above the leaves.
    pub(crate) fn split_off_front(&mut self, k: usize) -> Chunk {
        let mut rest = self.split_off_back(self.len() - k);
        rest.clean_prefix = 0;
        // `rest` now becomes the front; `self` the back, with offsets already rebased.
        std::mem::swap(self, &mut rest);
        rest
    }

    /// Appends the entries of `other`, whose keys all follow this chunk's. The entries
    /// already here keep their cached hashes.
    pub(crate) fn append(&mut self, other: &Chunk) {
        let (kbase, vbase) = (self.kbuf.len(), self.vbuf.len());
        self.kbuf.extend_from_slice(&other.kbuf);
        self.vbuf.extend_from_slice(&other.vbuf);
        self.entries.extend(other.entries.iter().map(|e| Entry {
            kend: e.kend + kbase as u32,
            vend: e.vend + vbase,
            ..*e
        }));
        self.stale();
    }

    /// Puts the entries of `other`, whose keys all precede this chunk's, in front.
    pub(crate) fn prepend(&mut self, mut other: Chunk) {
        other.append(self);
        other.clean_prefix = 0;
        other.touched.clear();
        // Nothing in the levels is valid any more; only their buffer is reused.
        other.levels = std::mem::take(&mut self.levels);
        other.span = self.span;
        *self = other;
    }

    /// Heap bytes held by this chunk (its buffers and itself), for cache budgets.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Chunk>()
            + self.kbuf.capacity()
            + self.vbuf.capacity()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.levels.capacity() * std::mem::size_of::<Digest>()
            + self.touched.capacity() * 4
    }

    /// Bytes of keys and values, for statistics.
    pub(crate) fn payload_bytes(&self) -> usize {
        self.kbuf.len() + self.vbuf.len()
    }

    /// Debug check: sorted, offsets consistent, and cached hashes equal a fresh rehash.
    pub(crate) fn check<H: Hasher>(&self) -> Result<(), String> {
        let (mut kend, mut vend) = (0, 0);
        for e in &self.entries {
            if (e.kend as usize) < kend || e.vend < vend {
                return Err("chunk offsets decrease".into());
            }
            (kend, vend) = (e.kend as usize, e.vend);
        }
        if kend != self.kbuf.len() || vend != self.vbuf.len() {
            return Err("chunk offsets and buffers out of step".into());
        }
        for i in 0..self.len() {
            if self.entries[i].prefix != key_prefix(self.key(i)) {
                return Err(format!("cached key prefix stale at {i}"));
            }
            if i > 0 && self.key(i - 1) >= self.key(i) {
                return Err(format!("chunk keys not strictly increasing at {i}"));
            }
        }
        if let Some(h) = self.hash {
            let mut fresh = Chunk::new();
            for i in 0..self.len() {
                fresh.push(self.key(i), self.value(i), None);
            }
            if fresh.rehash::<H>() != h {
                return Err("cached chunk hash differs from a fresh computation".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "chunk_tests.rs"]
mod tests;
