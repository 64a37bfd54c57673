//! A range leader's view of its ranges' size and load, and the load-based split key.
//!
//! Each node counts, per group, the client operations it served successfully (reads: get,
//! scan, proof; writes: put, delete, batch) in one bucket per tick, and keeps the last
//! `window` buckets; the load is the operations of the full buckets over their duration.
//! Only a leader serves client operations, so the counts are the leader's. It also keeps a
//! sample of the keys operated on (reservoir sampling, at most [`SAMPLES_PER_TICK`] keys a
//! bucket), from which a hot range picks a split key near the median of the accessed keys
//! (TiKV's load-based split), moved to a chunk boundary ([`load_split_key`]).
//!
//! These figures are soft state: they never enter a log, an epoch or a snapshot. They reach
//! the directory leader in each node's heartbeat ([`RangeStats`], see `liveness`).

use std::collections::{HashMap, VecDeque};

use bavl_core::Sha256;
use serde::{Deserialize, Serialize};

use crate::range::RangeState;
use crate::types::GroupId;

/// Keys sampled per group and tick at most.
pub const SAMPLES_PER_TICK: usize = 32;
/// Fewest samples a load split needs.
pub const MIN_SPLIT_SAMPLES: usize = 16;

/// The settings of load measurement, load splits and dead-node detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// A range leader splits a range that served more than this many client operations
    /// per second over a full window (`u64::MAX`: never, the default).
    pub split_load: u64,
    /// Fewest chunks each half of a load split keeps: a hot range whose median would
    /// leave a smaller half is not load-split (without a floor a range that stays hot kept
    /// splitting down to one chunk, a Raft group per chunk).
    pub split_load_floor_chunks: u64,
    /// Ticks in the load window.
    pub window_ticks: u32,
    /// The directory leader treats a node not heard from for this many ticks as dead (its
    /// replicas are re-created elsewhere, like a draining node's).
    pub dead_ticks: u64,
    /// The directory leader merges two neighbouring ranges when both hold at most this
    /// many keys (and are cold, see `merge_load`) over [`crate::merge_plan::MERGE_ROUNDS`]
    /// report rounds in a row (0: never, the default). See `merge_plan`.
    pub merge_keys: u64,
    /// A range counts as cold for a merge below this many operations per second.
    pub merge_load: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            split_load: u64::MAX,
            split_load_floor_chunks: 2,
            window_ticks: 10,
            dead_ticks: 15,
            merge_keys: 0,
            merge_load: 1,
        }
    }
}

/// Size and load of one range, as its leader reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeStats {
    pub group: GroupId,
    /// Keys in the range's tree.
    pub keys: u64,
    /// Payload bytes (keys plus values).
    pub bytes: u64,
    /// Client reads served per second over the last window.
    pub reads: u64,
    /// Client writes served per second over the last window.
    pub writes: u64,
}

impl RangeStats {
    /// Reads and writes per second.
    pub fn load(&self) -> u64 {
        self.reads.saturating_add(self.writes)
    }
}

#[derive(Default)]
struct Bucket {
    reads: u64,
    writes: u64,
    samples: Vec<Vec<u8>>,
    seen: u64,
    /// How long the bucket was open, in milliseconds (set when it closes).
    ms: u64,
}

/// One group's window of buckets.
#[derive(Default)]
struct Window {
    done: VecDeque<Bucket>,
    current: Bucket,
}

/// Per-group load counters of one node.
pub struct LoadTracker {
    window: usize,
    /// When the current buckets opened.
    opened: tokio::time::Instant,
    groups: HashMap<GroupId, Window>,
    /// A small generator for the reservoir (xorshift; the sample need not be reproducible).
    rng: u64,
}

impl LoadTracker {
    /// Keeps `window` buckets, one a tick (the rates use the time really elapsed between
    /// rotations, not the nominal tick).
    pub fn new(window: usize) -> Self {
        LoadTracker {
            window: window.max(1),
            opened: tokio::time::Instant::now(),
            groups: HashMap::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Counts one served operation on `key`.
    pub fn record(&mut self, group: GroupId, key: &[u8], write: bool) {
        let r = self.next();
        let b = &mut self.groups.entry(group).or_default().current;
        if write {
            b.writes += 1;
        } else {
            b.reads += 1;
        }
        b.seen += 1;
        if b.samples.len() < SAMPLES_PER_TICK {
            b.samples.push(key.to_vec());
        } else if let Some(slot) = b.samples.get_mut((r % b.seen) as usize) {
            *slot = key.to_vec();
        }
    }

    /// Closes the current bucket of every group (once a tick); a group with no operation
    /// over a whole window is forgotten.
    pub fn rotate(&mut self) {
        let now = tokio::time::Instant::now();
        let ms = now.saturating_duration_since(self.opened).as_millis() as u64;
        self.opened = now;
        self.rotate_after(ms);
    }

    /// [`LoadTracker::rotate`] for buckets that were open `ms` milliseconds (a tick that
    /// ran late makes a longer bucket: the rates divide by the time really covered).
    pub fn rotate_after(&mut self, ms: u64) {
        let window = self.window;
        let ms = ms.max(1);
        self.groups.retain(|_, w| {
            let mut b = std::mem::take(&mut w.current);
            b.ms = ms;
            w.done.push_back(b);
            while w.done.len() > window {
                w.done.pop_front();
            }
            w.done.iter().any(|b| b.seen > 0)
        });
    }

    /// Reads and writes per second over the closed buckets, and whether they fill a window.
    pub fn rates(&self, group: GroupId) -> (u64, u64, bool) {
        let Some(w) = self.groups.get(&group) else { return (0, 0, false) };
        let n = w.done.len() as u64;
        if n == 0 {
            return (0, 0, false);
        }
        let ms: u64 = w.done.iter().map(|b| b.ms).sum();
        let per_s = |x: u64| x.saturating_mul(1000) / ms.max(1);
        let reads = per_s(w.done.iter().map(|b| b.reads).sum());
        let writes = per_s(w.done.iter().map(|b| b.writes).sum());
        (reads, writes, n as usize >= self.window)
    }

    /// The keys sampled over the closed buckets.
    pub fn samples(&self, group: GroupId) -> Vec<Vec<u8>> {
        let Some(w) = self.groups.get(&group) else { return Vec::new() };
        w.done.iter().flat_map(|b| b.samples.iter().cloned()).collect()
    }

    /// Forgets a group's counts (after it split: its load is measured again from zero).
    pub fn reset(&mut self, group: GroupId) {
        self.groups.remove(&group);
    }
}

/// The first key of chunk `i` of the tree under `snap`, read from the chunk exported and
/// verified against the root.
fn chunk_first_key(snap: &bavl_core::Snapshot<Sha256>, i: u64) -> Option<Vec<u8>> {
    let bytes = snap.export_chunk(i).ok()?;
    let chunk = bavl_core::verify_chunk::<Sha256>(&snap.root_hash(), i, &bytes).ok()?;
    let key = chunk.entries().next()?.0.to_vec();
    Some(key)
}

/// A split key for a hot range: a chunk boundary near the median of the sampled keys (those
/// inside the range), the boundary below or above the median whichever divides the samples
/// more evenly. `None` when there are fewer than [`MIN_SPLIT_SAMPLES`] samples, when no such
/// boundary leaves `floor` chunks (at least one) on each side, or when none leaves samples on
/// both sides (one hot key: splitting would not divide its load). Both halves are non-empty:
/// the key is the first key of a chunk other than the first.
pub fn load_split_key(state: &RangeState, samples: &[Vec<u8>], floor: u64) -> Option<Vec<u8>> {
    let floor = floor.max(1);
    let mut keys: Vec<&[u8]> =
        samples.iter().map(Vec::as_slice).filter(|k| state.desc.contains(k)).collect();
    if keys.len() < MIN_SPLIT_SAMPLES {
        return None;
    }
    keys.sort_unstable();
    let median = keys[keys.len() / 2];
    let mut tree = state.tree.clone();
    let snap = tree.snapshot();
    let count = snap.chunk_count();
    if count < 2 * floor {
        return None;
    }
    // The last chunk whose first key is <= the median (chunks are in key order).
    let (mut lo, mut hi) = (0u64, count - 1);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if chunk_first_key(&snap, mid)?.as_slice() <= median {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let candidates = [lo, lo + 1].into_iter().filter(|&i| i >= floor && count - i >= floor);
    let mut best: Option<(usize, Vec<u8>)> = None;
    for i in candidates {
        let key = chunk_first_key(&snap, i)?;
        let left = keys.partition_point(|k| *k < key.as_slice());
        let right = keys.len() - left;
        if left == 0 || right == 0 || !state.desc.can_split_at(&key) {
            continue;
        }
        let imbalance = left.abs_diff(right);
        if best.as_ref().is_none_or(|(b, _)| imbalance < *b) {
            best = Some((imbalance, key));
        }
    }
    best.map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Command, Epoch, RangeDesc};

    fn range(n: u32) -> RangeState {
        let mut s = RangeState::new(RangeDesc::whole(1, [1].into()), 8).unwrap();
        for i in 0..n {
            let key = format!("k{i:04}").into_bytes();
            let cmd = Command::Put { epoch: Epoch::default(), key, value: vec![1; 8] };
            s.apply(&cmd);
        }
        s
    }

    fn keys(range: std::ops::Range<u32>, times: usize) -> Vec<Vec<u8>> {
        range.flat_map(|i| vec![format!("k{i:04}").into_bytes(); times]).collect()
    }

    #[test]
    fn the_load_split_key_is_a_chunk_boundary_near_the_median_of_the_samples() {
        let s = range(400);
        // Hot keys 300..340: the median is about k0320, far from the tree's middle (k0200).
        let samples = keys(300..340, 2);
        let key = load_split_key(&s, &samples, 1).expect("a split key");
        let left = samples.iter().filter(|k| k.as_slice() < key.as_slice()).count();
        assert!(left > 0 && left < samples.len(), "{key:?} does not divide the hot keys");
        assert!(left.abs_diff(samples.len() - left) <= 24, "{left} of {}", samples.len());
        // A chunk boundary: the first key of some chunk other than the first.
        let mut tree = s.tree.clone();
        let snap = tree.snapshot();
        let firsts: Vec<Vec<u8>> =
            (1..snap.chunk_count()).map(|i| chunk_first_key(&snap, i).unwrap()).collect();
        assert!(firsts.contains(&key), "{key:?} is not a chunk's first key");
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "chunks out of key order");
        // The key-count split would have cut elsewhere.
        assert_ne!(s.split_key(), Some(key));
    }

    #[test]
    fn no_load_split_without_enough_samples_one_chunk_or_one_hot_key() {
        let s = range(400);
        assert_eq!(load_split_key(&s, &keys(300..305, 2), 1), None, "10 samples");
        assert_eq!(load_split_key(&range(5), &keys(0..5, 10), 1), None, "one chunk");
        assert_eq!(load_split_key(&s, &keys(100..101, 50), 1), None, "one hot key");
        // Samples outside the range's fences do not count.
        let mut narrow = range(400);
        narrow.desc.end = b"k0100".to_vec();
        assert_eq!(load_split_key(&narrow, &keys(300..340, 2), 1), None);
    }

    /// The floor: a hot range is split only where each half keeps `floor` chunks, so a
    /// range that stays hot stops splitting instead of going down to one chunk.
    #[test]
    fn a_load_split_leaves_each_half_the_floor_of_chunks() {
        let s = range(400);
        let chunks = s.tree.clone().snapshot().chunk_count();
        assert!(chunks >= 8, "{chunks} chunks");
        // The hot keys at the very end: the median's boundary leaves few chunks right.
        let hot = keys(385..400, 2);
        let key = load_split_key(&s, &hot, 1).expect("without a floor it splits");
        let right_chunks = |key: &[u8]| {
            let snap = s.tree.clone().snapshot();
            (0..snap.chunk_count())
                .filter(|&i| chunk_first_key(&snap, i).unwrap().as_slice() >= key)
                .count() as u64
        };
        let right = right_chunks(&key);
        assert!(right <= 4, "the hot tail is within the last chunks: {right}");
        // Of the two boundaries around the median, neither keeps `right + 2` chunks right.
        assert_eq!(load_split_key(&s, &hot, right + 2), None, "a half would be too small");
        let floored = load_split_key(&s, &hot, right).expect("the floor the split met");
        assert!(right_chunks(&floored) >= right);
        // In the middle of the range the floor leaves the split as it was.
        let mid = keys(180..220, 2);
        assert_eq!(load_split_key(&s, &mid, 3), load_split_key(&s, &mid, 1));
        assert!(load_split_key(&s, &mid, 3).is_some());
        // A range of fewer than twice the floor is never load-split.
        assert_eq!(load_split_key(&s, &mid, chunks / 2 + 1), None);
    }

    #[test]
    fn the_tracker_measures_rates_over_a_full_window() {
        let mut t = LoadTracker::new(4);
        for _ in 0..4 {
            for i in 0..100u32 {
                t.record(7, &i.to_be_bytes(), i % 4 == 0);
            }
            assert!(!t.rates(7).2);
            t.rotate_after(250);
        }
        // 100 operations per 250 ms: 300 reads/s and 100 writes/s.
        assert_eq!(t.rates(7), (300, 100, true));
        assert_eq!(t.samples(7).len(), 4 * SAMPLES_PER_TICK);
        // A late tick: 100 operations over one 1000-ms bucket and three of 250 ms.
        for i in 0..100u32 {
            t.record(7, &i.to_be_bytes(), false);
        }
        t.rotate_after(1000);
        assert_eq!(t.rates(7), (325 * 1000 / 1750, 75 * 1000 / 1750, true));
        for _ in 0..4 {
            t.rotate_after(250);
        }
        assert_eq!(t.rates(7), (0, 0, false), "an idle group is forgotten");
        t.record(8, b"x", true);
        t.reset(8);
        t.rotate_after(250);
        assert_eq!(t.rates(8), (0, 0, false));
    }
}
