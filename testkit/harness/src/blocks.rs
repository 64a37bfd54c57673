//! What every version of a load test contains, applied the same way to a durable
//! [`Store`] (by `bavl-harness loadtest`) and to an in-memory [`Tree`] (the reference of
//! `bavl-harness crashtest`), so the two can be compared root for root.
//!
//! Versions `1..=initial_versions` load the initial state of `seed`
//! ([`bavl_workload::initial`]) in batches of [`INITIAL_BATCH`] keys; every later version
//! `v` is the Workload B block [`bavl_workload::block`]`(seed, v, mix, ..)` over the state
//! it is applied to. A block depends only on the seed, its version and that state, so a
//! process resuming a store at version `v` applies exactly what one that never stopped
//! would have.

use std::ops::Bound;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bavl_core::Tree;
use bavl_store::Store;
use bavl_workload::{initial, next_key, to_key, try_block, Key, Mix, Op, Value};

/// Keys per version while loading the initial state.
pub const INITIAL_BATCH: u64 = 10_000;

/// Something a version can be applied to.
pub trait State {
    /// The first key at or after `probe` in the working state (a paged store loads the
    /// chunks it needs; a failed load is an error, never "no key").
    fn next_key(&mut self, probe: &Key) -> Result<Option<Key>>;
    fn put(&mut self, key: &Key, value: &Value) -> Result<()>;
    fn delete(&mut self, key: &Key) -> Result<()>;
    /// Makes what `ops` will touch resident before they are applied (a paged store);
    /// nothing by default.
    fn prefetch(&mut self, _ops: &[Op]) -> Result<()> {
        Ok(())
    }
}

impl State for Tree {
    fn next_key(&mut self, probe: &Key) -> Result<Option<Key>> {
        Ok(next_key(|lo| self.range(lo, Bound::Unbounded), probe)?)
    }
    fn put(&mut self, key: &Key, value: &Value) -> Result<()> {
        self.insert(key, value)?;
        Ok(())
    }
    fn delete(&mut self, key: &Key) -> Result<()> {
        self.remove(key);
        Ok(())
    }
}

impl State for Store {
    fn next_key(&mut self, probe: &Key) -> Result<Option<Key>> {
        Ok(self.seek(Bound::Included(&probe[..]))?.map(|(k, _)| to_key(&k)))
    }
    fn put(&mut self, key: &Key, value: &Value) -> Result<()> {
        self.insert(key, value)?;
        Ok(())
    }
    fn delete(&mut self, key: &Key) -> Result<()> {
        self.remove(key)?;
        Ok(())
    }
    fn prefetch(&mut self, ops: &[Op]) -> Result<()> {
        let keys: Vec<&Key> = ops.iter().map(Op::key).collect();
        Store::prefetch(self, &keys)?;
        Ok(())
    }
}

/// What applying one version did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Applied {
    /// Operations applied.
    pub ops: u64,
    /// Generating the operations (including the lookups of existing keys).
    pub generate: Duration,
    /// Loading what they touch first ([`State::prefetch`]), when asked to.
    pub prefetch: Duration,
    /// Applying them to the state.
    pub apply: Duration,
}

/// The contents of every version of one load test.
pub struct Workload {
    seed: u64,
    initial_keys: u64,
    mix: Mix,
    /// The initial state's pairs not yet loaded, and the version that loads the next ones.
    pairs: Box<dyn Iterator<Item = (Key, Value)> + Send>,
    next_initial: u64,
    /// Whether a block's chunks are loaded before it is applied ([`State::prefetch`]).
    prefetch: bool,
}

impl Workload {
    /// Versions `1..=ceil(initial_keys / INITIAL_BATCH)` load `initial_keys` keys; the
    /// later ones are blocks of `mix`.
    pub fn new(seed: u64, initial_keys: u64, mix: Mix) -> Self {
        let pairs = Box::new(initial(seed));
        Workload { seed, initial_keys, mix, pairs, next_initial: 1, prefetch: true }
    }

    /// Whether [`State::prefetch`] runs before each block (it does by default).
    pub fn with_prefetch(mut self, on: bool) -> Self {
        self.prefetch = on;
        self
    }

    /// How many versions load the initial state.
    pub fn initial_versions(&self) -> u64 {
        self.initial_keys.div_ceil(INITIAL_BATCH)
    }

    /// Whether `version` is one of the initial-state versions.
    pub fn is_initial(&self, version: u64) -> bool {
        (1..=self.initial_versions()).contains(&version)
    }

    /// Applies the operations of `version` to `state` (without committing). The initial
    /// versions must be applied in order, from 1.
    pub fn apply(&mut self, state: &mut impl State, version: u64) -> Result<Applied> {
        if self.is_initial(version) {
            if version != self.next_initial {
                bail!(
                    "initial version {version} applied out of order (expected {})",
                    self.next_initial
                );
            }
            let start = (version - 1) * INITIAL_BATCH;
            let count = INITIAL_BATCH.min(self.initial_keys - start);
            let t = Instant::now();
            let batch: Vec<(Key, Value)> = self.pairs.by_ref().take(count as usize).collect();
            let generate = t.elapsed();
            let t = Instant::now();
            for (k, v) in &batch {
                state.put(k, v)?;
            }
            self.next_initial += 1;
            return Ok(Applied {
                ops: count,
                generate,
                prefetch: Duration::ZERO,
                apply: t.elapsed(),
            });
        }
        let t = Instant::now();
        let ops = try_block(self.seed, version, self.mix, |p| state.next_key(p))?;
        let generate = t.elapsed();
        let t = Instant::now();
        if self.prefetch {
            state.prefetch(&ops)?;
        }
        let prefetch = t.elapsed();
        let t = Instant::now();
        for op in &ops {
            match op {
                Op::Put(k, v) => state.put(k, v)?,
                Op::Delete(k) => state.delete(k)?,
            }
        }
        Ok(Applied { ops: ops.len() as u64, generate, prefetch, apply: t.elapsed() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_versions_then_blocks() {
        let mut w = Workload::new(3, 25_000, Mix::workload_b(100));
        assert_eq!(w.initial_versions(), 3);
        let mut t = Tree::with_capacity(16).unwrap();
        assert!(w.apply(&mut t, 2).is_err(), "initial versions go in order");
        for v in 1..=3 {
            w.apply(&mut t, v).unwrap();
        }
        assert_eq!(t.len(), 25_000);
        let a = w.apply(&mut t, 4).unwrap();
        assert_eq!(a.ops, 100);
        assert_eq!(t.len(), 25_000 + 40 - 10);
    }
}
