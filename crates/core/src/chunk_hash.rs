//! The in-chunk hash tree of [`Chunk`] (see the module documentation of `chunk`): cached
//! blocks per level, the right spine recomputed, [`Chunk::rehash`].

use super::{level_offset, split_point, Chunk};
use crate::hash::{chunk_hash, chunk_node_hash, leaf_hash_of, Digest, Hasher, Key};

impl Chunk {
    /// Hash of the aligned perfect block of `size` leaves starting at `lo`.
    #[inline]
    fn block(&self, lo: usize, size: usize) -> Digest {
        if size == 1 {
            // Callers only ask after `rehash`, when every leaf hash is present.
            self.entries[lo].leaf.unwrap_or_default()
        } else {
            let j = size.trailing_zeros() as usize;
            self.levels[level_offset(self.span, j - 1) + (lo >> j)]
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

    /// Lays the levels out for `span` leaves, keeping the blocks wholly below `clean`, and
    /// returns the new clean prefix (0 if nothing could be kept).
    fn relayout(&mut self, span: usize, clean: usize) -> usize {
        let slots = span.saturating_sub(1);
        let clean = if clean < 2 || self.span < 2 || span < 2 {
            self.levels.clear();
            self.levels.resize(slots, Digest::default());
            0
        } else {
            let mut levels = vec![Digest::default(); slots];
            let mut j = 0;
            loop {
                let keep = (clean >> (j + 1)).min(span >> (j + 1)).min(self.span >> (j + 1));
                if keep == 0 {
                    break;
                }
                let (from, to) = (level_offset(self.span, j), level_offset(span, j));
                levels[to..to + keep].copy_from_slice(&self.levels[from..from + keep]);
                j += 1;
            }
            self.levels = levels;
            clean
        };
        self.span = span;
        clean
    }

    /// Recomputes what edits invalidated and returns the chunk hash.
    pub(crate) fn rehash<H: Hasher>(&mut self) -> Digest {
        if let Some(h) = self.hash {
            return h;
        }
        let n = self.len();
        let mut cp = self.clean_prefix.min(n);
        for i in cp..n {
            if self.entries[i].leaf.is_none() {
                self.entries[i].leaf =
                    Some(leaf_hash_of::<H>(Key::in_tree(self.key(i)), self.value(i)));
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.retain(|&t| (t as usize) < cp);
        touched.sort_unstable();
        touched.dedup();
        for &t in &touched {
            let t = t as usize;
            self.entries[t].leaf =
                Some(leaf_hash_of::<H>(Key::in_tree(self.key(t)), self.value(t)));
        }
        let span = if n >= 2 { n.next_power_of_two() } else { 0 };
        if span != self.span {
            cp = self.relayout(span, cp);
        }
        let mut j = 0;
        loop {
            let count = n >> (j + 1);
            if count == 0 {
                break;
            }
            let off = level_offset(span, j);
            let keep = count.min(cp >> (j + 1));
            let half = 1usize << j;
            for b in keep..count {
                let lo = b << (j + 1);
                self.levels[off + b] =
                    chunk_node_hash::<H>(&self.block(lo, half), &self.block(lo + half, half));
            }
            let mut last = usize::MAX;
            for &t in &touched {
                let b = (t as usize) >> (j + 1);
                if b < keep && b != last {
                    let lo = b << (j + 1);
                    self.levels[off + b] =
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
}
