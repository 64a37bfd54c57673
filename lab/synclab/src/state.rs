//! The state the experiments sync: `keys` pairs of Workload A (20-byte keys, 100-byte
//! values, `bavl_workload::initial(1)`) in a bavl tree of a given chunk capacity, written
//! as a store at version 1, with what both methods need to know about it.

use std::path::Path;

use anyhow::{Context, Result};
use bavl_core::Tree;
use bavl_store::{Options, Store};
use serde::{Deserialize, Serialize};

use crate::baseline;

/// Written beside the store as `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateInfo {
    pub keys: u64,
    pub capacity: u32,
    pub version: u64,
    /// The trusted bavl root (hex).
    pub root: String,
    pub chunk_count: u64,
    /// Sum of the exported chunk sizes: what a bavl sync downloads at least.
    pub bavl_bytes: u64,
    /// The baseline's serialised stream: what one baseline attempt downloads.
    pub stream_bytes: u64,
    /// The baseline's trusted root (IAVL-like, over the sorted pairs; hex).
    pub baseline_root: String,
    /// Raw key and value bytes.
    pub kv_bytes: u64,
}

/// Builds the state into `dir/store` and `dir/state.json` unless `state.json` exists.
pub fn ensure(dir: &Path, keys: u64, capacity: u32) -> Result<StateInfo> {
    let info_path = dir.join("state.json");
    if let Ok(text) = std::fs::read_to_string(&info_path) {
        if let Ok(info) = serde_json::from_str::<StateInfo>(&text) {
            if info.keys == keys && info.capacity == capacity {
                return Ok(info);
            }
        }
    }
    let store_dir = dir.join("store");
    if store_dir.exists() {
        std::fs::remove_dir_all(&store_dir).context("removing an old state")?;
    }
    std::fs::create_dir_all(dir)?;
    eprintln!("synclab: building {keys} keys at capacity {capacity} in {}", dir.display());
    let mut tree = Tree::with_capacity(capacity).context("capacity")?;
    for (k, v) in bavl_workload::initial(1).take(keys as usize) {
        tree.insert(&k, &v).context("insert")?;
    }
    let snap = tree.snapshot();
    let entries = || snap.iter().expect("a tree built in memory is resident");
    let bavl_bytes: u64 =
        (0..snap.chunk_count()).map(|i| snap.export_chunk(i).map_or(0, |c| c.len() as u64)).sum();
    let base = baseline::Snapshot::build(entries(), 1 << 20).context("baseline stream")?;
    let info = StateInfo {
        keys: tree.len(),
        capacity,
        version: 1,
        root: hex::encode(snap.root_hash()),
        chunk_count: snap.chunk_count(),
        bavl_bytes,
        stream_bytes: base.meta.total_bytes,
        baseline_root: hex::encode(baseline::root_of(entries())),
        kv_bytes: entries().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
    };
    drop(base);
    Store::create_from_tree(&store_dir, &mut tree, 1).context("writing the store")?;
    std::fs::write(&info_path, serde_json::to_string_pretty(&info)?)?;
    Ok(info)
}

/// Opens a store read-only-ish (no checkpoints) and builds the baseline snapshot of its
/// newest version: in memory (`Options::in_memory`), since the baseline iterates the whole
/// state, which a paged store's snapshot refuses for chunks it holds on disk.
pub fn baseline_snapshot(db: &Path, chunk_bytes: u64) -> Result<baseline::Snapshot> {
    let opts = Options { checkpoint: bavl_store::CheckpointPolicy::Manual, ..Options::in_memory() };
    let store = Store::open(db, opts).map_err(|e| anyhow::anyhow!("{}: {e}", db.display()))?;
    let snap = store.snapshot(store.version()).map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(store);
    Ok(baseline::Snapshot::build(snap.iter()?, chunk_bytes)?)
}
