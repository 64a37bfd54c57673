//! A paged store's bodies are bounded by its budget, not by the largest version
//! (`docs/design.md` §8.5.1): a writer applying one block far larger than the cache, and
//! an open replaying that block from the log, both evict as they go. Measured through
//! the pager's own counters (`PagingStats::peak_resident_bytes`), never by timing.

use std::collections::BTreeMap;

use crate::common::TempDir;
use bavl_store::{CheckpointPolicy, Options, PagingStats, Store};

/// The cache of bodies the test gives the store.
const BUDGET: u64 = 1 << 20;
/// What the peak may pass the budget by: the growth between two eviction passes within
/// a block (256 KiB, `evict::MIN_STEP`) and one operation's chunks.
const MARGIN: u64 = (256 << 10) + (64 << 10);

fn options(read_only: bool) -> Options {
    Options {
        capacity: Some(16),
        keep_recent: 2,
        checkpoint: CheckpointPolicy::Manual,
        read_only,
        cache_counts_slack: false,
        ..Options::paged(BUDGET)
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000_007).into_bytes()
}

fn value(i: u32, v: u64) -> Vec<u8> {
    format!("{v:04}-{i:08}-").repeat(6).into_bytes()
}

fn paging(store: &Store) -> PagingStats {
    store.stats().unwrap().paging.expect("paged")
}

#[test]
fn one_version_larger_than_the_cache_commits_and_reopens_within_the_budget() {
    let dir = TempDir::new("bounded");
    let mut model = BTreeMap::new();
    let mut store = Store::open(dir.path(), options(false)).unwrap();
    // Version 1, checkpointed: the state on disk as a skeleton and chunk files.
    for i in 0..24_000u32 {
        store.insert(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.wait_checkpoint().unwrap().unwrap();
    // Version 2, only in the log: every key rewritten and as many added, in key order
    // of their hashes, so the block touches every chunk (several MiB of bodies).
    let mut order: Vec<u32> = (0..48_000).collect();
    order.sort_by_key(|&i| key(i));
    store.prefetch(&order.iter().map(|&i| key(i)).collect::<Vec<_>>()).unwrap();
    for &i in &order {
        store.insert(&key(i), &value(i, 2)).unwrap();
        model.insert(key(i), value(i, 2));
    }
    let (v2, root2) = store.commit().unwrap();
    let written = paging(&store);
    // Version 1, retained, let go of what the passes within the block evicted, and still
    // reads its own values (loading what it needs).
    let v1 = store.snapshot(1).unwrap();
    for i in (0..24_000u32).step_by(97) {
        let k = key(i);
        let snap = store.resident_for(&v1, |s| s.get(&k).err()).unwrap();
        assert_eq!(snap.get(&k), Ok(Some(&value(i, 1)[..])), "version 1, key {i}");
    }
    drop(v1);
    let state: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert!(state > 4 * BUDGET, "the version ({state} bytes of entries) dwarfs the cache");
    assert!(written.mid_evictions > 0, "the writer evicted within the block");
    assert!(
        written.peak_resident_bytes <= BUDGET + MARGIN,
        "the writer held {} bytes of bodies against a budget of {BUDGET}",
        written.peak_resident_bytes
    );
    drop(store);

    for read_only in [true, false] {
        let mut store = Store::open(dir.path(), options(read_only)).unwrap();
        assert_eq!(store.recovery().replayed, 1, "version 2 came from the log");
        assert_eq!((store.version(), store.root()), (v2, root2));
        let opened = paging(&store);
        assert!(opened.mid_evictions > 0, "the replay evicted within the version");
        assert!(
            opened.peak_resident_bytes <= BUDGET + MARGIN,
            "opening (read-only: {read_only}) held {} bytes of bodies against {BUDGET}",
            opened.peak_resident_bytes
        );
        // Every key reads back, loading as it goes, and the reads stay bounded too.
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap(), Some(&v[..]));
        }
        let read = paging(&store);
        assert!(read.peak_resident_bytes <= BUDGET + MARGIN, "reads: {read:?}");
    }

    // The same log replayed unpaged gives the same root (the paged replay's slices
    // change nothing but where bodies live).
    let whole = Options { cache_bytes: None, read_only: true, ..options(true) };
    let store = Store::open(dir.path(), whole).unwrap();
    assert_eq!((store.version(), store.root()), (v2, root2));
    assert_eq!(store.latest().len(), model.len() as u64);
}

#[test]
fn a_large_version_replays_with_removes_in_slices() {
    // Removes need neighbours loaded when a chunk falls below the fill floor: a version
    // that removes most keys and rewrites the rest replays paged to the logged root.
    let dir = TempDir::new("bounded-removes");
    let mut model = BTreeMap::new();
    let mut store = Store::open(dir.path(), options(false)).unwrap();
    for i in 0..10_000u32 {
        store.insert(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.wait_checkpoint().unwrap().unwrap();
    for i in 0..10_000u32 {
        if i % 3 == 0 {
            store.insert(&key(i), &value(i, 2)).unwrap();
            model.insert(key(i), value(i, 2));
        } else {
            assert!(store.remove(&key(i)).unwrap().is_some());
            model.remove(&key(i));
        }
    }
    let (v2, root2) = store.commit().unwrap();
    drop(store);
    let mut store = Store::open(dir.path(), options(true)).unwrap();
    assert_eq!((store.version(), store.root()), (v2, root2));
    assert!(paging(&store).peak_resident_bytes <= BUDGET + MARGIN);
    store.working().check().unwrap();
    for i in 0..10_000u32 {
        assert_eq!(store.get(&key(i)).unwrap().map(<[u8]>::to_vec), model.get(&key(i)).cloned());
    }
}

#[test]
fn retained_versions_read_their_own_state_across_passes_within_blocks() {
    // Against a model: five versions of 6,000 inserts, updates and removes each (each
    // grows the bodies far past MIN_STEP, so passes run within every block), three of
    // them retained; every retained version reads every key as the model had it, and the
    // head's root is an in-memory tree's given the same operations.
    let dir = TempDir::new("bounded-model");
    let opts = Options { keep_recent: 3, ..options(false) };
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut reference = bavl_core::Tree::with_capacity(16).unwrap();
    let (mut model, mut models) = (BTreeMap::new(), BTreeMap::new());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for v in 1..=5u64 {
        for _ in 0..6_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % 12_000) as u32;
            if x.is_multiple_of(5) && model.contains_key(&key(i)) {
                assert!(store.remove(&key(i)).unwrap().is_some());
                reference.remove(&key(i));
                model.remove(&key(i));
            } else {
                store.insert(&key(i), &value(i, v)).unwrap();
                reference.insert(&key(i), &value(i, v)).unwrap();
                model.insert(key(i), value(i, v));
            }
        }
        let (version, root) = store.commit().unwrap();
        assert_eq!(root, reference.root_hash(), "version {version}");
        models.insert(version, model.clone());
    }
    let p = paging(&store);
    assert!(p.mid_evictions >= 5, "passes within the blocks: {p:?}");
    assert!(p.peak_resident_bytes <= BUDGET + MARGIN, "{p:?}");
    for v in store.versions().collect::<Vec<_>>() {
        let snap = store.snapshot(v).unwrap();
        for i in 0..12_000u32 {
            let k = key(i);
            let s = store.resident_for(&snap, |s| s.get(&k).err()).unwrap();
            let want = models[&v].get(&k).map(Vec::as_slice);
            assert_eq!(s.get(&k), Ok(want), "version {v}, key {i}");
        }
    }
    // And after a reopen (the last version replayed from the log: no checkpoint was
    // taken), the head again.
    drop(store);
    let mut store = Store::open(dir.path(), opts).unwrap();
    assert_eq!(store.root(), reference.root_hash());
    for (k, v) in &models[&5] {
        assert_eq!(store.get(k).unwrap(), Some(&v[..]));
    }
}
