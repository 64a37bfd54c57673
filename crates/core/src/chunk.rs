//! A chunk: the leaf of the AVL tree, and the unit of proof and state transfer.
//!
//! A chunk holds up to `capacity` entries sorted by key, keys packed in one buffer and
//! values in another (so a binary search touches contiguous memory, copying a chunk for
//! copy-on-write is a few `memcpy`s, and no entry costs an allocation of its own).
//!
//! Over its entries lies the in-chunk hash tree, shaped as in RFC 6962: the node over
//! `n > 1` leaves splits after the largest power of two below `n`. Every node of that tree
//! is either an aligned perfect block of `2^j` leaves or lies on the right spine, so the
//! hashes are cached per level (`levels[j-1][b]` = block `b` of `2^j` leaves) and the
//! spine (at most log2 n nodes) is recomputed when the chunk is rehashed.
//!
//! Hashing is lazy: edits only mark what they invalidate. An in-place value update marks
//! one leaf (`touched`); an insert or removal at position `p` invalidates every block at or
//! after `p` (`clean_prefix`), because positions shift. [`Chunk::rehash`] recomputes only
//! those. Callers guarantee a chunk in a tree is never empty.

use crate::hash::{chunk_hash, chunk_node_hash, leaf_hash_of, Digest, Hasher};

/// Inserts `bytes` at `at`, shifting the tail (one `memmove`).
fn insert_bytes(buf: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let old = buf.len();
    buf.resize(old + bytes.len(), 0);
    buf.copy_within(at..old, at + bytes.len());
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[derive(Clone, Default)]
pub(crate) struct Chunk {
    kbuf: Vec<u8>,
    /// `koff.len() == len() + 1`; key `i` is `kbuf[koff[i]..koff[i + 1]]`.
    koff: Vec<u32>,
    /// First eight bytes of each key, big-endian and zero-padded: most comparisons in a
    /// binary search are decided here, without touching the key bytes.
    prefixes: Vec<u64>,
    vbuf: Vec<u8>,
    /// `voff.len() == len() + 1`; value `i` is `vbuf[voff[i]..voff[i + 1]]`.
    voff: Vec<usize>,
    /// Leaf hashes; `None` when stale.
    leaves: Vec<Option<Digest>>,
    /// `levels[j]` holds the hashes of the aligned blocks of `2^(j+1)` leaves.
    levels: Vec<Vec<Digest>>,
    /// Level hashes of blocks wholly below this position are valid, except over `touched`.
    clean_prefix: usize,
    /// Positions below `clean_prefix` whose leaf changed in place.
    touched: Vec<u32>,
    /// The chunk hash; `None` when anything above is stale.
    pub(crate) hash: Option<Digest>,
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

impl Chunk {
    pub(crate) fn new() -> Self {
        Chunk { koff: vec![0], voff: vec![0], ..Default::default() }
    }

    /// Appends an entry whose key follows every key here (used when building).
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8], leaf: Option<Digest>) {
        self.kbuf.extend_from_slice(key);
        self.koff.push(self.kbuf.len() as u32);
        self.prefixes.push(key_prefix(key));
        self.vbuf.extend_from_slice(value);
        self.voff.push(self.vbuf.len());
        self.leaves.push(leaf);
        self.hash = None;
    }

    /// Reserves room for `n` entries of about `bytes` key and value bytes in all.
    pub(crate) fn reserve(&mut self, n: usize, key_bytes: usize, value_bytes: usize) {
        self.kbuf.reserve(key_bytes);
        self.koff.reserve(n);
        self.prefixes.reserve(n);
        self.vbuf.reserve(value_bytes);
        self.voff.reserve(n);
        self.leaves.reserve(n);
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.prefixes.len()
    }

    #[inline]
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        &self.kbuf[self.koff[i] as usize..self.koff[i + 1] as usize]
    }

    #[inline]
    pub(crate) fn value(&self, i: usize) -> &[u8] {
        &self.vbuf[self.voff[i]..self.voff[i + 1]]
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
            let order = match self.prefixes[mid].cmp(&p) {
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
        let (a, b) = (self.voff[i], self.voff[i + 1]);
        if b - a == value.len() {
            self.vbuf[a..b].copy_from_slice(value);
        } else {
            self.vbuf.splice(a..b, value.iter().copied());
            for o in &mut self.voff[i + 1..] {
                *o = *o + value.len() - (b - a);
            }
        }
        self.leaves[i] = None;
        if i < self.clean_prefix {
            self.touched.push(i as u32);
        }
        self.hash = None;
    }

    pub(crate) fn insert_at(&mut self, i: usize, key: &[u8], value: &[u8]) {
        let at = self.koff[i];
        let len = key.len() as u32;
        insert_bytes(&mut self.kbuf, at as usize, key);
        self.koff.insert(i + 1, at + len);
        for o in &mut self.koff[i + 2..] {
            *o += len;
        }
        let vat = self.voff[i];
        insert_bytes(&mut self.vbuf, vat, value);
        self.voff.insert(i + 1, vat + value.len());
        for o in &mut self.voff[i + 2..] {
            *o += value.len();
        }
        self.prefixes.insert(i, key_prefix(key));
        self.leaves.insert(i, None);
        self.clean_prefix = self.clean_prefix.min(i);
        self.hash = None;
    }

    /// Removes entry `i` and returns its value.
    pub(crate) fn remove_at(&mut self, i: usize) -> Vec<u8> {
        let (start, end) = (self.koff[i], self.koff[i + 1]);
        self.kbuf.drain(start as usize..end as usize);
        self.koff.remove(i + 1);
        for o in &mut self.koff[i + 1..] {
            *o -= end - start;
        }
        let (vs, ve) = (self.voff[i], self.voff[i + 1]);
        let old = self.vbuf.drain(vs..ve).collect();
        self.voff.remove(i + 1);
        for o in &mut self.voff[i + 1..] {
            *o -= ve - vs;
        }
        self.leaves.remove(i);
        self.prefixes.remove(i);
        self.clean_prefix = self.clean_prefix.min(i);
        self.hash = None;
        old
    }

    /// Removes the last `k` entries and returns them as a chunk. The entries kept keep
    /// their cached hashes.
    pub(crate) fn split_off_back(&mut self, k: usize) -> Chunk {
        let at = self.len() - k;
        let (base, vbase) = (self.koff[at], self.voff[at]);
        let moved = Chunk {
            kbuf: self.kbuf.split_off(base as usize),
            koff: self.koff[at..].iter().map(|o| o - base).collect(),
            prefixes: self.prefixes.split_off(at),
            vbuf: self.vbuf.split_off(vbase),
            voff: self.voff[at..].iter().map(|o| o - vbase).collect(),
            leaves: self.leaves.split_off(at),
            ..Default::default()
        };
        self.koff.truncate(at + 1);
        self.voff.truncate(at + 1);
        self.clean_prefix = self.clean_prefix.min(at);
        self.hash = None;
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
        let base = self.kbuf.len() as u32;
        self.kbuf.extend_from_slice(&other.kbuf);
        self.koff.extend(other.koff[1..].iter().map(|o| o + base));
        self.prefixes.extend_from_slice(&other.prefixes);
        let vbase = self.vbuf.len();
        self.vbuf.extend_from_slice(&other.vbuf);
        self.voff.extend(other.voff[1..].iter().map(|o| o + vbase));
        self.leaves.extend_from_slice(&other.leaves);
        self.hash = None;
    }

    /// Puts the entries of `other`, whose keys all precede this chunk's, in front.
    pub(crate) fn prepend(&mut self, mut other: Chunk) {
        other.append(self);
        other.clean_prefix = 0;
        other.touched.clear();
        other.levels = std::mem::take(&mut self.levels);
        *self = other;
    }

    /// Hash of the aligned perfect block of `size` leaves starting at `lo`.
    #[inline]
    fn block(&self, lo: usize, size: usize) -> Digest {
        if size == 1 {
            // Callers only ask after `rehash`, when every leaf hash is present.
            self.leaves[lo].unwrap_or_default()
        } else {
            let j = size.trailing_zeros() as usize;
            self.levels[j - 1][lo >> j]
        }
    }

    /// Hash of the in-chunk node over leaves `lo..hi` (a node of the RFC 6962 shape).
    pub(crate) fn node_hash<H: Hasher>(&self, lo: usize, hi: usize) -> Digest {
        let n = hi - lo;
        if n.is_power_of_two() {
            return self.block(lo, n);
        }
        let k = split_point(n);
        chunk_node_hash::<H>(&self.block(lo, k), &self.node_hash::<H>(lo + k, hi))
    }

    /// Recomputes what edits invalidated and returns the chunk hash.
    pub(crate) fn rehash<H: Hasher>(&mut self) -> Digest {
        if let Some(h) = self.hash {
            return h;
        }
        let n = self.len();
        let cp = self.clean_prefix.min(n);
        for i in cp..n {
            if self.leaves[i].is_none() {
                self.leaves[i] = Some(leaf_hash_of::<H>(self.key(i), self.value(i)));
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.retain(|&t| (t as usize) < cp);
        touched.sort_unstable();
        touched.dedup();
        for &t in &touched {
            let t = t as usize;
            self.leaves[t] = Some(leaf_hash_of::<H>(self.key(t), self.value(t)));
        }
        let mut j = 0;
        loop {
            let count = n >> (j + 1);
            if count == 0 {
                self.levels.truncate(j);
                break;
            }
            if self.levels.len() <= j {
                self.levels.push(Vec::with_capacity(count));
            }
            let keep = self.levels[j].len().min(cp >> (j + 1));
            self.levels[j].truncate(keep);
            let half = 1usize << j;
            for b in keep..count {
                let lo = b << (j + 1);
                let h = chunk_node_hash::<H>(&self.block(lo, half), &self.block(lo + half, half));
                self.levels[j].push(h);
            }
            let mut last = usize::MAX;
            for &t in &touched {
                let b = (t as usize) >> (j + 1);
                if b < keep && b != last {
                    let lo = b << (j + 1);
                    self.levels[j][b] =
                        chunk_node_hash::<H>(&self.block(lo, half), &self.block(lo + half, half));
                    last = b;
                }
            }
            j += 1;
        }
        touched.clear();
        self.touched = touched;
        self.clean_prefix = n;
        let h = chunk_hash::<H>(n as u32, &self.node_hash::<H>(0, n));
        self.hash = Some(h);
        h
    }

    /// Bytes of keys and values, for statistics.
    pub(crate) fn payload_bytes(&self) -> usize {
        self.kbuf.len() + self.vbuf.len()
    }

    /// Debug check: sorted, offsets consistent, and cached hashes equal a fresh rehash.
    pub(crate) fn check<H: Hasher>(&self) -> Result<(), String> {
        if self.koff.len() != self.len() + 1
            || self.voff.len() != self.len() + 1
            || self.leaves.len() != self.len()
        {
            return Err("chunk arrays out of step".into());
        }
        for i in 0..self.len() {
            if self.prefixes[i] != key_prefix(self.key(i)) {
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
mod tests {
    use super::*;
    use crate::hash::Sha256;

    /// Reference: the RFC 6962 tree hash computed from scratch.
    fn reference(leaves: &[Digest]) -> Digest {
        if leaves.len() == 1 {
            return leaves[0];
        }
        let k = split_point(leaves.len());
        chunk_node_hash::<Sha256>(&reference(&leaves[..k]), &reference(&leaves[k..]))
    }

    fn fresh_root(c: &Chunk) -> Digest {
        let leaves: Vec<_> =
            (0..c.len()).map(|i| leaf_hash_of::<Sha256>(c.key(i), c.value(i))).collect();
        chunk_hash::<Sha256>(c.len() as u32, &reference(&leaves))
    }

    #[test]
    fn incremental_rehash_equals_reference_under_random_edits() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut c = Chunk::new();
        c.insert_at(0, b"m", b"0");
        for step in 0..3000 {
            let n = c.len();
            let op = rng.gen_range(0..3);
            if op == 0 || n < 2 {
                let k: [u8; 4] = rng.gen();
                if let Err(i) = c.search(&k) {
                    c.insert_at(i, &k, &k);
                }
            } else if op == 1 {
                let i = rng.gen_range(0..n);
                c.set_value(i, &[step as u8; 3][..(step % 4) as usize]);
            } else if n > 1 {
                c.remove_at(rng.gen_range(0..n));
            }
            if rng.gen_bool(0.3) {
                assert_eq!(c.rehash::<Sha256>(), fresh_root(&c), "step {step}");
            }
            if c.len() > 70 {
                c.remove_at(0);
            }
        }
        assert_eq!(c.rehash::<Sha256>(), fresh_root(&c));
        c.check::<Sha256>().unwrap();
    }

    #[test]
    fn search_finds_keys_and_gaps() {
        let mut c = Chunk::new();
        for (i, k) in [b"b", b"d", b"f"].iter().enumerate() {
            c.insert_at(i, *k, b"");
        }
        assert_eq!(c.search(b"d"), Ok(1));
        assert_eq!(c.search(b"a"), Err(0));
        assert_eq!(c.search(b"e"), Err(2));
        assert_eq!(c.search(b"z"), Err(3));
    }
}
