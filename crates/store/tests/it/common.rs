//! Helpers shared by the store's integration tests.

use std::ops::Bound;
use std::path::{Path, PathBuf};

use bavl_workload::{block, next_key, Mix, Op};

/// A directory path under the system's temporary directory (not created: opening a
/// store there creates it), removed with its siblings `<path>.*` when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("bavl-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(self.0.with_extension("moved"));
    }
}

/// Block `v` of the workload (`seed`, `mix`) as generated on an in-memory tree of
/// capacity 8: a paged working tree cannot serve the generator's range reads, and the
/// blocks are the same.
pub fn reference_block(seed: u64, mix: Mix, v: u64) -> Vec<Op> {
    let mut t = bavl_core::Tree::with_capacity(8).unwrap();
    for u in 1..=v {
        let ops = block(seed, u, mix, |p| {
            next_key(|lo| t.range(lo, Bound::Unbounded), p).expect("resident")
        });
        if u == v {
            return ops;
        }
        for op in ops {
            match op {
                Op::Put(k, val) => drop(t.insert(&k, &val).unwrap()),
                Op::Delete(k) => drop(t.remove(&k)),
            }
        }
    }
    Vec::new()
}
