//! Deterministic workloads and the small statistics the benchmarks report.
//!
//! Everything a timed loop consumes is generated here beforehand, from one seed: the N
//! keys in insertion order (20 random bytes each, so insertion order is random), a pool of
//! 100-byte values, the update blocks (half new keys, half existing keys, shuffled), the
//! lookup keys and the keys whose membership proofs are measured. No timed loop draws a
//! random number or allocates a key.

use std::time::Duration;

use rand::seq::{index, SliceRandom};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use bavl_labkit::stats::{median, percentile};

/// Key length in bytes.
pub const KEY_LEN: usize = 20;
/// Value length in bytes.
pub const VALUE_LEN: usize = 100;
/// Distinct values in the pool; values are drawn from it by index.
const VALUE_POOL: usize = 4096;

pub type Key = [u8; KEY_LEN];

/// Sizes of a workload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Keys in the initial state.
    pub keys: usize,
    /// Update blocks, the first of which is a warm-up.
    pub blocks: usize,
    /// Upserts per block (half new keys, half existing).
    pub block_size: usize,
    /// Lookups of existing keys per get pass.
    pub lookups: usize,
    /// Keys whose membership proofs are measured.
    pub proof_samples: usize,
}

/// One pre-generated workload.
pub struct Workload {
    pub shape: Shape,
    pub seed: u64,
    /// The initial keys, in insertion order.
    pub keys: Vec<Key>,
    values: Vec<[u8; VALUE_LEN]>,
    /// Update blocks: key and value index; block 0 is the warm-up.
    pub blocks: Vec<Vec<(Key, u32)>>,
    /// Existing keys to look up, drawn uniformly with replacement.
    pub lookups: Vec<Key>,
    /// Distinct existing keys to prove.
    pub proof_keys: Vec<Key>,
}

impl Workload {
    pub fn generate(seed: u64, shape: Shape) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut keys = vec![[0u8; KEY_LEN]; shape.keys];
        for k in &mut keys {
            rng.fill_bytes(k);
        }
        let mut values = vec![[0u8; VALUE_LEN]; VALUE_POOL];
        for v in &mut values {
            rng.fill_bytes(v);
        }
        let half = shape.block_size / 2;
        let blocks = (0..shape.blocks)
            .map(|_| {
                let mut b = Vec::with_capacity(shape.block_size);
                for _ in 0..half {
                    let mut k = [0u8; KEY_LEN];
                    rng.fill_bytes(&mut k);
                    b.push((k, rng.gen_range(0..VALUE_POOL as u32)));
                }
                for _ in half..shape.block_size {
                    let k = keys[rng.gen_range(0..keys.len())];
                    b.push((k, rng.gen_range(0..VALUE_POOL as u32)));
                }
                b.shuffle(&mut rng);
                b
            })
            .collect();
        let lookups = (0..shape.lookups).map(|_| keys[rng.gen_range(0..keys.len())]).collect();
        let samples = shape.proof_samples.min(keys.len());
        let proof_keys =
            index::sample(&mut rng, keys.len(), samples).iter().map(|i| keys[i]).collect();
        Workload { shape, seed, keys, values, blocks, lookups, proof_keys }
    }

    /// The value stored with initial key `i`.
    #[inline]
    pub fn initial_value(&self, i: usize) -> &[u8] {
        &self.values[i % VALUE_POOL]
    }

    /// A value of the pool by index.
    #[inline]
    pub fn value(&self, i: u32) -> &[u8] {
        &self.values[i as usize]
    }

    /// A deterministic generator for shuffles made from this workload's seed and a salt.
    pub fn rng(&self, salt: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
}

/// Median of durations, in seconds (nearest rank: one of the runs).
pub fn median_secs(d: &[Duration]) -> f64 {
    let s: Vec<f64> = d.iter().map(Duration::as_secs_f64).collect();
    median(&s)
}

/// Runs `f` `reps` times and returns the median duration it reports.
pub fn median_of(reps: usize, mut f: impl FnMut() -> Duration) -> f64 {
    let runs: Vec<Duration> = (0..reps.max(1)).map(|_| f()).collect();
    median_secs(&runs)
}

/// CPU time used by other processes while something ran, from `/proc/stat` and
/// `/proc/self/stat`: a busy machine makes every figure lower.
#[derive(Clone, Copy)]
pub struct CpuMeter {
    busy: u64,
    own: u64,
    at: std::time::Instant,
}

fn read_busy() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> =
        s.lines().next()?.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = f.iter().take(8).sum();
    Some(total - f.get(3)? - f.get(4)?)
}

fn read_own() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

impl CpuMeter {
    pub fn start() -> Self {
        CpuMeter {
            busy: read_busy().unwrap_or(0),
            own: read_own().unwrap_or(0),
            at: std::time::Instant::now(),
        }
    }

    /// Average number of cores kept busy by other processes since `start` (clock ticks of
    /// 10 ms, so short intervals are coarse).
    pub fn others_cores(&self) -> f64 {
        let secs = self.at.elapsed().as_secs_f64();
        let (Some(busy), Some(own)) = (read_busy(), read_own()) else { return f64::NAN };
        let others = busy.saturating_sub(self.busy).saturating_sub(own.saturating_sub(self.own));
        if secs <= 0.0 {
            return 0.0;
        }
        others as f64 / 100.0 / secs
    }
}

/// Waits, up to `max` seconds, for a second in which other processes keep fewer than
/// `threshold` cores busy; returns the seconds waited. On a shared machine this starts
/// each measurement in a lull rather than in the middle of someone's compile.
pub fn wait_for_quiet(max: f64, threshold: f64) -> f64 {
    let start = std::time::Instant::now();
    while start.elapsed().as_secs_f64() < max {
        let m = CpuMeter::start();
        std::thread::sleep(Duration::from_millis(1000));
        if m.others_cores() < threshold {
            break;
        }
    }
    start.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_is_deterministic_and_shaped() {
        let shape =
            Shape { keys: 1000, blocks: 3, block_size: 100, lookups: 50, proof_samples: 20 };
        let a = Workload::generate(7, shape);
        let b = Workload::generate(7, shape);
        assert_eq!(a.keys, b.keys);
        assert_eq!(a.blocks, b.blocks);
        assert_eq!(a.blocks.len(), 3);
        assert!(a.blocks.iter().all(|b| b.len() == 100));
        let existing: std::collections::HashSet<_> = a.keys.iter().collect();
        let old = a.blocks[0].iter().filter(|(k, _)| existing.contains(k)).count();
        assert_eq!(old, 50, "half of each block updates existing keys");
        assert_eq!(a.proof_keys.len(), 20);
    }
}
