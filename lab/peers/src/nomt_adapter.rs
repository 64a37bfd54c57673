//! nomt 1.0.5 (SHA-256 node hashing), one session per block committed to disk.
//!
//! Key paths are SHA-256(key), as nomt expects uniformly distributed 32-byte paths. Each
//! block is reduced to its final effect per key (nomt's `finish` takes sorted, unique
//! writes). The hash table (bitbox) has a fixed number of buckets set at creation: nomt's
//! default (64,000 pages of 4 KiB), or more for states beyond about 1.6M keys — measured,
//! a Workload B state needs about one page per 95 keys, so the default stays under ~40%
//! occupied. The report gives the occupancy reached. On Linux nomt does its I/O through
//! io_uring.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use bavl_workload::{Key, Op};
use nomt::hasher::Sha2Hasher;
use nomt::trie::KeyPath;
use nomt::{KeyReadWrite, Nomt, Options, SessionParams};
use sha2::{Digest as _, Sha256};

use crate::adapters::{ms2, Adapter};
use crate::stream::final_effect;

fn key_path(key: &Key) -> KeyPath {
    Sha256::digest(key).into()
}

/// Buckets of the hash table for a state of `keys` keys: nomt's default (64,000), or about
/// four times the pages the state needs (one per ~95 keys, measured) when that is more.
pub fn buckets_for(keys: u64) -> u32 {
    (keys / 24).clamp(64_000, u32::MAX as u64) as u32
}

pub struct NomtStore {
    nomt: Nomt<Sha2Hasher>,
    buckets: u32,
    concurrency: usize,
    /// Page and leaf cache sizes, MiB each.
    cache_mib: usize,
    /// Per commit: ms in `finish` (merkle update) and in `commit` (writing, syncing).
    split: Vec<(f64, f64)>,
}

impl NomtStore {
    /// Opens nomt in `dir` sized for `expected_keys`, with page and leaf caches of
    /// `cache_mib` MiB each (nomt's default: 256).
    pub fn open(dir: &Path, expected_keys: u64, cache_mib: Option<usize>) -> Result<NomtStore> {
        match nomt::check_iou_permissions() {
            nomt::IoUringPermission::Allowed => {}
            nomt::IoUringPermission::Denied => anyhow::bail!(
                "nomt needs io_uring, which this kernel or sandbox denies (io_uring_setup failed)"
            ),
            nomt::IoUringPermission::NotSupported => anyhow::bail!(
                "nomt needs io_uring with IORING_SETUP_SINGLE_ISSUER (Linux 6.x), not supported here"
            ),
        }
        let mut o = Options::new();
        o.path(dir.join("nomt_db"));
        let concurrency = std::thread::available_parallelism().map_or(1, |n| n.get());
        o.commit_concurrency(concurrency);
        let buckets = buckets_for(expected_keys);
        o.hashtable_buckets(buckets);
        o.bitbox_seed(*b"bavl-peers-seed!");
        let cache_mib = cache_mib.unwrap_or(256);
        o.page_cache_size(cache_mib);
        o.leaf_cache_size(cache_mib);
        let nomt = Nomt::open(o).context("opening nomt")?;
        Ok(NomtStore { nomt, buckets, concurrency, cache_mib, split: Vec::new() })
    }
}

impl Adapter for NomtStore {
    fn commit_block(&mut self, ops: &[Op]) -> Result<()> {
        let mut actuals: Vec<(KeyPath, KeyReadWrite)> = final_effect(ops)
            .into_iter()
            .map(|(k, v)| (key_path(&k), KeyReadWrite::Write(v.map(|v| v.to_vec()))))
            .collect();
        actuals.sort_unstable_by_key(|a| a.0);
        let t = Instant::now();
        let session = self.nomt.begin_session(SessionParams::default());
        let finished = session.finish(actuals)?;
        let t1 = Instant::now();
        finished.commit(&self.nomt)?;
        self.split.push(ms2(t1 - t, t1.elapsed()));
        Ok(())
    }

    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.nomt.read(key_path(key))
    }

    fn extra(&mut self) -> serde_json::Value {
        let u = self.nomt.hash_table_utilization();
        serde_json::json!({
            "hashtable_buckets": self.buckets,
            "hashtable_occupied": u.occupied,
            "hashtable_occupancy": u.occupied as f64 / u.capacity.max(1) as f64,
            "commit_concurrency": self.concurrency,
            "page_cache_mib": self.cache_mib,
            "leaf_cache_mib": self.cache_mib,
            "split_note": "per commit (load commits first): ms in Session::finish (merkle update), ms in FinishedSession::commit (write + sync)",
            "finish_commit_ms": self.split,
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
