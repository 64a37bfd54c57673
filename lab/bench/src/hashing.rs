//! SHA-256 throughput and hash accounting.
//!
//! The throughput figures use `bavl_core::hash::Sha256`, the very backend the tree uses.
//! [`Counting`] is that backend wrapped to count every hash the tree computes, by domain
//! tag (the first input byte), and the SHA-256 compressions each costs
//! (`ceil((len + 9) / 64)` blocks after padding): the bill of work that bounds update and
//! verify throughput.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use bavl_core::hash::{Digest, Hasher, Sha256};
use serde::Serialize;

use crate::workload::median_of;

/// Hashes per second of 64-byte inputs, one thread, each input depending on the last
/// digest (as in a tree, where a node's input is its children's digests).
pub fn sha256_64b_per_s(count: usize, reps: usize) -> f64 {
    let run = || {
        let mut buf = [7u8; 64];
        let start = Instant::now();
        for _ in 0..count {
            let mut h = Sha256::default();
            h.update(black_box(&buf));
            let d = h.finalize();
            buf[..32].copy_from_slice(&d);
        }
        black_box(buf);
        start.elapsed()
    };
    run(); // warm-up
    count as f64 / median_of(reps, run)
}

/// MB/s (1 MB = 10^6 bytes) of one long SHA-256 stream over `bytes` bytes.
pub fn sha256_bulk_mb_per_s(bytes: usize, reps: usize) -> f64 {
    let data: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
    let run = || {
        let start = Instant::now();
        let mut h = Sha256::default();
        h.update(black_box(&data));
        black_box(h.finalize());
        start.elapsed()
    };
    run();
    bytes as f64 / 1e6 / median_of(reps, run)
}

/// MB/s of one SHA-256 stream over the given buffers in order (the exported chunks).
pub fn sha256_over(buffers: &[Vec<u8>], reps: usize) -> f64 {
    let total: usize = buffers.iter().map(Vec::len).sum();
    let run = || {
        let start = Instant::now();
        let mut h = Sha256::default();
        for b in buffers {
            h.update(black_box(b));
        }
        black_box(h.finalize());
        start.elapsed()
    };
    run();
    total as f64 / 1e6 / median_of(reps, run)
}

/// Kinds of hash inputs, by domain tag (`docs/design.md`, section 2), plus "other".
pub const KINDS: [&str; 7] = ["value", "leaf", "chunk_node", "chunk", "inner", "root", "other"];

/// Process-wide counts (the library may hash on helper threads).
static CALLS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
static BLOCKS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

/// SHA-256 that counts, process-wide, its hashes and compressions by domain tag.
#[derive(Default, Clone)]
pub struct Counting {
    inner: Sha256,
    len: usize,
    tag: Option<u8>,
}

impl Hasher for Counting {
    const NAME: &'static str = "sha256";
    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        if self.tag.is_none() {
            self.tag = bytes.first().copied();
        }
        self.len += bytes.len();
        self.inner.update(bytes);
    }
    #[inline]
    fn finalize(self) -> Digest {
        let k = self.tag.map_or(6, |t| (t as usize).min(6));
        CALLS[k].fetch_add(1, Relaxed);
        BLOCKS[k].fetch_add((self.len + 9).div_ceil(64) as u64, Relaxed);
        self.inner.finalize()
    }
}

/// Hash counts gathered between [`Tally::reset`] and [`Tally::take`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub calls: [u64; 7],
    pub blocks: [u64; 7],
}

impl Tally {
    pub fn reset() {
        Tally::take();
    }

    pub fn take() -> Tally {
        let mut t = Tally::default();
        for k in 0..7 {
            t.calls[k] = CALLS[k].swap(0, Relaxed);
            t.blocks[k] = BLOCKS[k].swap(0, Relaxed);
        }
        t
    }

    /// Per-unit figures: hashes by kind, total hashes and compressions per unit.
    pub fn per(&self, units: f64) -> PerUnit {
        let by_kind = KINDS
            .iter()
            .zip(self.calls)
            .filter(|(_, c)| *c > 0)
            .map(|(k, c)| (k.to_string(), round(c as f64 / units)))
            .collect();
        PerUnit {
            hashes_by_kind: by_kind,
            hashes: round(self.calls.iter().sum::<u64>() as f64 / units),
            compressions: round(self.blocks.iter().sum::<u64>() as f64 / units),
        }
    }
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Hashes and SHA-256 compressions per unit of work (a key, an upsert, a chunk).
#[derive(Clone, Debug, Serialize)]
pub struct PerUnit {
    pub hashes_by_kind: std::collections::BTreeMap<String, f64>,
    pub hashes: f64,
    pub compressions: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters are process-wide: tests that hash with [`Counting`] take turns.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn compressions_follow_sha256_padding() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        Tally::reset();
        for len in [55usize, 56, 64, 119, 120] {
            let mut h = Counting::default();
            h.update(&vec![9u8; len]);
            let _ = h.finalize();
        }
        let t = Tally::take();
        // 55 -> 1, 56 -> 2, 64 -> 2, 119 -> 2, 120 -> 3 (tag 9 counts as "other").
        assert_eq!(t.blocks[6], 10);
        assert_eq!(t.calls[6], 5);
    }

    #[test]
    fn counting_hasher_gives_sha256_digests() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut a = Counting::default();
        let mut b = Sha256::default();
        a.update(b"abc");
        b.update(b"abc");
        assert_eq!(a.finalize(), b.finalize());
    }
}
