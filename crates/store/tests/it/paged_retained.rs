//! Retained versions of a paged store hold no body the budget let go: after every
//! commit, a body on disk is resident in an older version only if the working tree (the
//! head) still holds it, what they hold alone is what `PagingStats::pinned_bytes` says,
//! and each of them still reads back exactly its own state, loading what it needs; the
//! same after a reopen, whose replay rebuilds the retained versions.

use std::collections::{BTreeMap, HashSet};

use crate::common::TempDir;
use bavl_store::{CheckpointPolicy, Options, Store};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Body identities and bytes of the resident chunks of `snap`, and of those on disk.
fn residents(snap: &bavl_core::Snapshot) -> (Vec<(usize, u64, bool)>, u64) {
    let mut out = Vec::new();
    snap.for_each_chunk(|c| {
        if let Some(id) = c.body_id() {
            out.push((id, c.heap_bytes() as u64, c.location().is_some()));
        }
    });
    (out, snap.chunk_count())
}

fn read_all(store: &Store, snap: &bavl_core::Snapshot) -> Model {
    let mut view = snap.clone();
    while let Some(page) =
        view.absent_for_range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
    {
        view = store.load_pages(&view, &[page]).unwrap();
    }
    view.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

#[test]
fn retained_versions_drop_the_bodies_the_working_tree_evicted() {
    let dir = TempDir::new("paged-retained-drop");
    let opts = Options {
        capacity: Some(8),
        keep_recent: 4,
        checkpoint: CheckpointPolicy::Auto { log_ratio: 0.5, min_log_bytes: 4096 },
        // A few chunks' worth: every commit evicts most of the tree.
        cache_bytes: Some(8 << 10),
        ..Options::default()
    };
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut models: BTreeMap<u64, Model> = BTreeMap::new();
    let mut model = Model::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut dropped_somewhere = false;
    for round in 0..40u64 {
        for _ in 0..60 {
            let k = (rand() % 400).to_be_bytes().to_vec();
            if rand() % 5 == 0 {
                store.remove(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("v{round}-{}", rand() % 1000).into_bytes();
                store.insert(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        let (v, _) = store.commit().unwrap();
        models.insert(v, model.clone());
        if round % 10 == 9 {
            // Reopened: the versions the replay rebuilds let go the same way.
            store.close().unwrap();
            store = Store::open(dir.path(), opts.clone()).unwrap();
        }
        let head = store.snapshot(v).unwrap();
        let live: HashSet<usize> = residents(&head).0.iter().map(|r| r.0).collect();
        let (mut alone, mut seen) = (0u64, HashSet::new());
        for old in store.versions().filter(|&o| o != v).collect::<Vec<_>>() {
            let snap = store.snapshot(old).unwrap();
            let (res, chunks) = residents(&snap);
            dropped_somewhere |= (res.len() as u64) < chunks;
            for (id, bytes, on_disk) in res {
                if live.contains(&id) {
                    continue;
                }
                assert!(!on_disk, "version {old} holds a body on disk that the head let go");
                if seen.insert(id) {
                    alone += bytes + 16;
                }
            }
        }
        let pinned = store.stats().unwrap().paging.unwrap().pinned_bytes;
        assert_eq!(pinned, alone, "pinned_bytes after version {v}");
    }
    assert!(dropped_somewhere, "some retained version had absent chunks");
    for v in store.versions().collect::<Vec<_>>() {
        let snap = store.snapshot(v).unwrap();
        assert_eq!(read_all(&store, &snap), models[&v], "version {v} reads its own state");
    }
}
