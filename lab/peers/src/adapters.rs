//! One adapter per store: apply a block, make it durable, read a key back.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use bavl_store::{Options, Store};
use bavl_workload::{Key, Op, Value};
use sha2::{Digest as _, Sha256};

/// Two durations as milliseconds rounded to 0.01 (for the adapters' timing splits).
pub fn ms2(a: std::time::Duration, b: std::time::Duration) -> (f64, f64) {
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e5).round() / 100.0;
    (ms(a), ms(b))
}

/// A store under test, open in its own directory.
pub trait Adapter {
    /// Applies one block's operations (in order: a later one on the same key wins) and
    /// commits them as one version, durably where the store offers it.
    fn commit_block(&mut self, ops: &[Op]) -> Result<()>;
    /// The value of `key` at the last committed version.
    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>>;
    /// Figures the store reports about itself after the run (free-form).
    fn extra(&mut self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Makes what was committed cheap to open again (bavl: a checkpoint, so that opening
    /// replays no log); called by a loader before it closes. Nothing by default.
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
    /// Closes the store cleanly.
    fn close(self: Box<Self>) -> Result<()>;
}

/// What a store is and how durable its commit is (for the report).
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreInfo {
    pub name: &'static str,
    /// Counted among the peers bavl is compared with.
    pub peer: bool,
    pub description: &'static str,
    pub durability: &'static str,
    /// The cargo feature the adapter needs (`None`: always built).
    pub feature: Option<&'static str>,
}

/// Every store the harness knows, in report order.
pub const STORES: &[StoreInfo] = &[
    StoreInfo {
        name: "bavl",
        peer: false,
        description: "bavl_store::Store, Options::in_memory() (capacity 64, keep_recent 4, automatic background checkpoints)",
        durability: "one log record per block, fdatasync before commit() returns",
        feature: None,
    },
    StoreInfo {
        name: "bavl-paged",
        peer: false,
        description: "bavl_store::Store paged (docs/design.md §8.5.1): Options::paged (keep_recent 4, a checkpoint every 4 MiB of log) with cache_bytes = twice --nomt-cache-mib (nomt's two caches together; 512 MiB when unset); evicted chunk bodies in the store's durable chunk files",
        durability: "one log record per block, fdatasync before commit() returns",
        feature: None,
    },
    StoreInfo {
        name: "bavl-paged-heap",
        peer: false,
        description: "bavl-paged with Options::cache_counts_slack off: the budget counts the bodies' heap bytes alone, not the allocator's slack (as before 2026-11-28 evening; the A/B of that change)",
        durability: "one log record per block, fdatasync before commit() returns",
        feature: None,
    },
    StoreInfo {
        name: "bavl-paged-cached",
        peer: false,
        description: "bavl-paged with a budget no state here reaches (1 TiB): paging on, every body cached; against `bavl`, what the paged code path costs when nothing is evicted (the paged benchmark's cached_1m_ratio)",
        durability: "one log record per block, fdatasync before commit() returns",
        feature: None,
    },
    StoreInfo {
        name: "jmt-redb",
        peer: true,
        description: "jmt 0.12 (Sha256Jmt) with TreeReader/TreeWriter on redb 2: nodes keyed by version (big-endian) ‖ nibble path, values by key hash ‖ version; no pruning",
        durability: "one redb write transaction per block, Durability::Immediate (fsync on commit)",
        feature: Some("jmt"),
    },
    StoreInfo {
        name: "jmt-mock",
        peer: false,
        description: "jmt 0.12 (Sha256Jmt) on its in-memory MockTreeStore (HashMap of every node of every version)",
        durability: "none (in memory)",
        feature: Some("jmt"),
    },
    StoreInfo {
        name: "nomt",
        peer: true,
        description: "nomt 1.0.5 (Sha2Hasher), default options (64,000-bucket hash table up to ~1.5M keys, page and leaf caches 256 MiB each) but commit_concurrency = cores; key paths = SHA-256(key)",
        durability: "FinishedSession::commit: WAL and meta fsynced before it returns (nomt's only mode)",
        feature: Some("nomt"),
    },
    StoreInfo {
        name: "iavl",
        peer: true,
        description: "IAVL v1.2.4 (Go) on goleveldb (cosmos-db), cache 781,250 nodes (Cosmos SDK default), fast nodes on; no pruning",
        durability: "SyncOption(true): SaveVersion ends with a synced goleveldb batch write (fsync)",
        feature: None,
    },
    StoreInfo {
        name: "btreemap-floor",
        peer: false,
        description: "floor, not a Merkle store: BTreeMap + one SHA-256 of key ‖ value per written key + the block's operations appended to a log",
        durability: "log append + fdatasync per block",
        feature: None,
    },
];

pub fn info(name: &str) -> Option<&'static StoreInfo> {
    STORES.iter().find(|s| s.name == name)
}

/// Whether this build has the adapter for `name` (IAVL needs the `go` tool, checked at
/// run time).
// `cfg!` makes some arms constant `true` in some builds, which clippy reads as `matches!`.
#[allow(clippy::match_like_matches_macro)]
pub fn compiled(name: &str) -> bool {
    match name {
        "jmt-redb" | "jmt-mock" => cfg!(feature = "jmt"),
        "nomt" => cfg!(feature = "nomt"),
        _ => true,
    }
}

/// Opens the Rust adapter `name` in `dir` (a new, empty directory). `expected_keys` sizes
/// stores that need it (nomt's hash table).
pub fn open(name: &str, dir: &Path, expected_keys: u64) -> Result<Box<dyn Adapter>> {
    open_with(name, dir, expected_keys, Caches::default())
}

/// Cache sizes of the stores that have one, for a memory limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caches {
    /// nomt's page and leaf caches, MiB each (`None`: nomt's default of 256 MiB each).
    pub nomt_mib: Option<usize>,
    /// bavl-paged's budget of chunk bodies in MiB (`None`: twice `nomt_mib`, as nomt's
    /// two caches together; 512 MiB when that is unset too).
    pub bavl_mib: Option<u64>,
}

/// Budget of `bavl-paged-cached`: more than any state here holds.
pub const CACHED_BUDGET_BYTES: u64 = 1 << 40;

/// [`open`], with the cache sizes `caches` (for a memory limit).
pub fn open_with(
    name: &str,
    dir: &Path,
    expected_keys: u64,
    caches: Caches,
) -> Result<Box<dyn Adapter>> {
    let _ = expected_keys;
    let paged_with = |bytes: u64, slack: bool| -> Result<Box<dyn Adapter>> {
        // A budget that evicts gets the paged checkpoint policy (a short log); the loader
        // of --preload and bavl-paged-cached, which evict nothing, keep the in-memory
        // store's, so that the cached run differs from `bavl` by the paged code path alone.
        let opts = if bytes < CACHED_BUDGET_BYTES {
            // As `bavl` runs a paged store: freed memory returned after 100 ms.
            #[cfg(feature = "mimalloc")]
            bavl_alloc::paged_memory();
            Options { cache_counts_slack: slack, ..Options::paged(bytes) }
        } else {
            Options { cache_bytes: Some(bytes), ..Options::in_memory() }
        };
        Ok(Box::new(Bavl::open_with(dir, opts)?))
    };
    let paged = |bytes: u64| paged_with(bytes, true);
    let budget = || caches.bavl_mib.unwrap_or(caches.nomt_mib.map_or(512, |m| 2 * m as u64)) << 20;
    Ok(match name {
        "bavl" => Box::new(Bavl::open(dir)?),
        "bavl-paged" => paged(budget())?,
        "bavl-paged-heap" => paged_with(budget(), false)?,
        "bavl-paged-cached" => paged(CACHED_BUDGET_BYTES)?,
        "btreemap-floor" => Box::new(Floor::open(dir)?),
        #[cfg(feature = "jmt")]
        "jmt-redb" => Box::new(crate::jmt_adapter::JmtRedb::open(dir)?),
        #[cfg(feature = "jmt")]
        "jmt-mock" => Box::new(crate::jmt_adapter::JmtMock::default()),
        #[cfg(feature = "nomt")]
        "nomt" => {
            Box::new(crate::nomt_adapter::NomtStore::open(dir, expected_keys, caches.nomt_mib)?)
        }
        other if info(other).is_some() => {
            anyhow::bail!("{other} is not built into this binary (see --help for its feature)")
        }
        other => anyhow::bail!("unknown store {other}"),
    })
}

/// bavl's durable store with its default options.
pub struct Bavl {
    store: Store,
    /// Per commit: ms applying the operations, hashing, appending + syncing the log.
    split: Vec<(f64, f64, f64)>,
    /// Paged: operations whose key's chunk was resident, and all operations, over every
    /// block committed (asked of the skeleton before the block's prefetch).
    hits: (u64, u64),
    /// Opened with a cache budget.
    paging: bool,
}

impl Bavl {
    pub fn open(dir: &Path) -> Result<Bavl> {
        Self::open_with(dir, Options::in_memory())
    }

    pub fn open_with(dir: &Path, opts: Options) -> Result<Bavl> {
        let paging = opts.cache_bytes.is_some();
        Ok(Bavl { store: Store::open(dir, opts)?, split: Vec::new(), hits: (0, 0), paging })
    }
}

impl Adapter for Bavl {
    fn commit_block(&mut self, ops: &[Op]) -> Result<()> {
        let t = std::time::Instant::now();
        // Paged: load the block's chunks on several threads first (a no-op otherwise).
        if self.store.working().is_paged() {
            let keys: Vec<&Key> = ops.iter().map(Op::key).collect();
            let tree = self.store.working();
            let resident = keys.iter().filter(|k| tree.try_get(&k[..]).is_ok()).count();
            self.hits.0 += resident as u64;
            self.hits.1 += keys.len() as u64;
            self.store.prefetch(&keys)?;
        } else if self.paging {
            // Paging on, nothing evicted yet: every operation's chunk is resident.
            self.hits.0 += ops.len() as u64;
            self.hits.1 += ops.len() as u64;
        }
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    self.store.insert(k, v)?;
                }
                Op::Delete(k) => {
                    self.store.remove(k)?;
                }
            }
        }
        let apply = t.elapsed();
        self.store.commit()?;
        let c = self.store.last_commit_timing();
        let (a, h) = ms2(apply, c.hash);
        self.split.push((a, h, ms2(c.persist, c.persist).0));
        Ok(())
    }
    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        // `get` loads a paged-out chunk.
        Ok(self.store.get(key)?.map(<[u8]>::to_vec))
    }
    fn extra(&mut self) -> serde_json::Value {
        match self.store.stats() {
            Ok(s) => serde_json::json!({
                "version": s.head,
                "chunks": s.chunks,
                "checkpoints_written": s.checkpoints_written,
                "log_bytes_written": s.log_bytes_written,
                "checkpoint_bytes_written": s.checkpoint_bytes_written,
                "paging": s.paging.map(|p| serde_json::json!({
                    "loads": p.loads, "evictions": p.evictions, "spilled_bytes": p.spilled_bytes,
                    "resident_bytes": p.resident_bytes, "skeleton_bytes": p.skeleton_bytes,
                    "slack_permille": p.slack_permille,
                })),
                "cache_hit_rate": (self.hits.1 > 0)
                    .then(|| self.hits.0 as f64 / self.hits.1 as f64),
                "split_note": "per commit (load commits first): ms applying the operations, ms hashing (root_hash), ms appending + syncing the log record",
                "apply_hash_persist_ms": self.split,
            }),
            Err(e) => serde_json::json!({ "stats_error": e.to_string() }),
        }
    }
    /// Keeps only the newest version, checkpoints it, and commits one empty version so
    /// that the files before the checkpoint are deleted: the measured process then opens
    /// the loaded state from one checkpoint, not by rebuilding the retained versions from
    /// the loader's 100,000-key commits (a real node's load is its history, not that).
    fn settle(&mut self) -> Result<()> {
        self.store.wait_checkpoint()?;
        let head = self.store.version();
        self.store.prune(head);
        self.store.checkpoint()?;
        self.store.wait_checkpoint()?;
        self.store.commit()?;
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.store.close()?;
        Ok(())
    }
}

/// The floor: what any durable store keyed by a hash must at least do — update an
/// in-memory ordered map, hash every written entry once, and append and sync the block.
/// It is not authenticated (no tree, no root).
pub struct Floor {
    map: std::collections::BTreeMap<Key, Value>,
    log: File,
    record: Vec<u8>,
    /// Folds every leaf hash, so that the hashing cannot be optimised away.
    acc: [u8; 32],
}

impl Floor {
    pub fn open(dir: &Path) -> Result<Floor> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("floor.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Floor { map: Default::default(), log, record: Vec::new(), acc: [0; 32] })
    }
}

impl Adapter for Floor {
    fn commit_block(&mut self, ops: &[Op]) -> Result<()> {
        self.record.clear();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    let mut h = Sha256::new();
                    h.update(k);
                    h.update(v);
                    let d: [u8; 32] = h.finalize().into();
                    self.acc[0] ^= d[0];
                    self.map.insert(*k, *v);
                    self.record.push(1);
                    self.record.extend_from_slice(k);
                    self.record.extend_from_slice(v);
                }
                Op::Delete(k) => {
                    self.map.remove(k);
                    self.record.push(2);
                    self.record.extend_from_slice(k);
                }
            }
        }
        self.record.extend_from_slice(&self.acc);
        self.log.write_all(&self.record)?;
        self.log.sync_data()?;
        Ok(())
    }
    fn get(&mut self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.map.get(key).map(|v| v.to_vec()))
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.log.sync_all()?;
        Ok(())
    }
}
