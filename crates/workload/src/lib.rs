//! Workload B of the design brief, deterministic: a state of `n` random 20-byte keys with
//! 100-byte values, then blocks of inserts (new random keys), updates and deletes (of
//! existing keys). Block `v` depends only on the seed, `v` and the state it is applied
//! to, so a process that resumes a store at version `v` generates the same blocks as one
//! that never stopped, and an in-memory reference can follow a durable store exactly.
#![forbid(unsafe_code)]

use std::ops::Bound;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Key length in bytes.
pub const KEY_LEN: usize = 20;
/// Value length in bytes.
pub const VALUE_LEN: usize = 100;

pub type Key = [u8; KEY_LEN];
pub type Value = [u8; VALUE_LEN];

/// One operation of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Key, Value),
    Delete(Key),
}

impl Op {
    /// The key the operation writes.
    pub fn key(&self) -> &Key {
        match self {
            Op::Put(k, _) | Op::Delete(k) => k,
        }
    }
}

/// Operations per block by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub inserts: u32,
    pub updates: u32,
    pub deletes: u32,
}

impl Mix {
    /// The brief's Workload B block: `ops` operations, 40% inserts, 50% updates, 10%
    /// deletes.
    pub fn workload_b(ops: u32) -> Mix {
        let inserts = ops * 4 / 10;
        let deletes = ops / 10;
        Mix { inserts, updates: ops - inserts - deletes, deletes }
    }
    pub fn total(&self) -> u32 {
        self.inserts + self.updates + self.deletes
    }
}

fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// The `i`-th key/value pair of the initial state of `seed` (keys are random, so the
/// insertion order is random).
pub fn initial(seed: u64) -> impl Iterator<Item = (Key, Value)> {
    let mut rng = rng_for(seed, 0);
    std::iter::from_fn(move || {
        let mut k = [0u8; KEY_LEN];
        let mut v = [0u8; VALUE_LEN];
        rng.fill_bytes(&mut k);
        rng.fill_bytes(&mut v);
        Some((k, v))
    })
}

/// The operations of block `version`. `next_key(probe)` must return the first key of the
/// current state at or after `probe` (or `None` past the last key); updates and deletes
/// pick existing keys through it, so they are uniform over the key space.
pub fn block(
    seed: u64,
    version: u64,
    mix: Mix,
    mut next_key: impl FnMut(&Key) -> Option<Key>,
) -> Vec<Op> {
    match try_block(seed, version, mix, |p| Ok::<_, std::convert::Infallible>(next_key(p))) {
        Ok(ops) => ops,
        Err(never) => match never {},
    }
}

/// [`block`] over a state whose reads can fail (a paged store loading chunks): the first
/// error ends the generation, so a block is never made from a state read wrongly.
pub fn try_block<E>(
    seed: u64,
    version: u64,
    mix: Mix,
    mut next_key: impl FnMut(&Key) -> Result<Option<Key>, E>,
) -> Result<Vec<Op>, E> {
    let mut rng = rng_for(seed, version.wrapping_add(1));
    let mut ops = Vec::with_capacity(mix.total() as usize);
    let mut existing = |rng: &mut ChaCha8Rng| {
        let mut probe = [0u8; KEY_LEN];
        rng.fill_bytes(&mut probe);
        match next_key(&probe)? {
            Some(k) => Ok(Some(k)),
            None => next_key(&[0u8; KEY_LEN]),
        }
    };
    for _ in 0..mix.inserts {
        let mut k = [0u8; KEY_LEN];
        let mut v = [0u8; VALUE_LEN];
        rng.fill_bytes(&mut k);
        rng.fill_bytes(&mut v);
        ops.push(Op::Put(k, v));
    }
    for _ in 0..mix.updates {
        let mut v = [0u8; VALUE_LEN];
        rng.fill_bytes(&mut v);
        if let Some(k) = existing(&mut rng)? {
            ops.push(Op::Put(k, v));
        }
    }
    for _ in 0..mix.deletes {
        if let Some(k) = existing(&mut rng)? {
            ops.push(Op::Delete(k));
        }
    }
    // Interleave the kinds deterministically.
    for i in (1..ops.len()).rev() {
        ops.swap(i, rng.gen_range(0..=i));
    }
    Ok(ops)
}

/// The first key at or after `probe` in a `bavl_core`-style tree: pass
/// `|lo| tree.range(lo, Bound::Unbounded)` (an error of the range, such as a chunk not
/// in memory, is returned, never read as "no key").
pub fn next_key<'a, I, E>(
    range: impl FnOnce(Bound<&[u8]>) -> Result<I, E>,
    probe: &Key,
) -> Result<Option<Key>, E>
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    Ok(range(Bound::Included(&probe[..]))?.next().map(|(k, _)| to_key(k)))
}

/// A stored key as a workload key (the first [`KEY_LEN`] bytes, zero-padded).
pub fn to_key(k: &[u8]) -> Key {
    let mut key = [0u8; KEY_LEN];
    let n = k.len().min(KEY_LEN);
    key[..n].copy_from_slice(&k[..n]);
    key
}

/// Nearest-rank percentile (`p` in 0..=100) of unsorted samples; 0 when empty.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn next_in(m: &BTreeMap<Key, Value>) -> impl FnMut(&Key) -> Option<Key> + '_ {
        |p| m.range(*p..).next().map(|(k, _)| *k)
    }

    #[test]
    fn blocks_are_deterministic_and_follow_the_mix() {
        let state: BTreeMap<Key, Value> = initial(3).take(1000).collect();
        let mix = Mix::workload_b(100);
        assert_eq!(mix, Mix { inserts: 40, updates: 50, deletes: 10 });
        let a = block(3, 7, mix, next_in(&state));
        let b = block(3, 7, mix, next_in(&state));
        let c = block(3, 8, mix, next_in(&state));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 100);
        let deletes = a.iter().filter(|o| matches!(o, Op::Delete(_))).count();
        let updates =
            a.iter().filter(|o| matches!(o, Op::Put(k, _) if state.contains_key(k))).count();
        assert_eq!(deletes, 10);
        assert_eq!(updates, 50);
    }

    #[test]
    fn empty_state_has_only_inserts() {
        let state = BTreeMap::new();
        let ops = block(1, 1, Mix::workload_b(10), next_in(&state));
        assert_eq!(ops.len(), 4);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
