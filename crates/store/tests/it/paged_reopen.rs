//! Where a reopen starts: an unpaged store rebuilds the versions before its newest
//! checkpoint from the checkpoint before it (its log is replayed in memory), while a paged
//! store starts from its newest skeleton (that replay would read a chunk from disk per
//! operation: 25 s at 3M keys against 1.1 s), so it keeps the versions from there on
//! (`docs/design.md` §8.5.1). Both reach the same head with the same root, and every
//! version a paged reopen keeps reads back its committed state.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::TempDir;
use bavl_store::{Backend, CheckpointPolicy, DirBackend, Options, Store};

fn options(cache_bytes: Option<u64>) -> Options {
    Options {
        capacity: Some(8),
        keep_recent: 4,
        checkpoint: CheckpointPolicy::Manual,
        cache_bytes,
        ..Options::default()
    }
}

/// Commits version `v`: 40 keys of its own, and a new value for 20 keys of version 1.
fn commit(store: &mut Store, v: u64, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) -> u64 {
    for i in 0..40 {
        let (k, val) = (format!("k{v:03}-{i:02}").into_bytes(), format!("v{v}-{i}").into_bytes());
        store.insert(&k, &val).unwrap();
        model.insert(k, val);
    }
    for i in 0..20 {
        let (k, val) = (format!("k001-{i:02}").into_bytes(), format!("u{v}").into_bytes());
        store.insert(&k, &val).unwrap();
        model.insert(k, val);
    }
    let (version, _) = store.commit().unwrap();
    assert_eq!(version, v);
    version
}

/// A store whose directory holds two skeletons (versions 5 and 9), the log from 6 on,
/// and a head at 10: the older skeleton stays because versions 7 and 8 were retained
/// when the newer one was installed. Returns the model of every version.
fn two_skeletons(dir: &std::path::Path) -> BTreeMap<u64, BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut store = Store::open(dir, options(Some(600))).unwrap();
    let (mut model, mut models) = (BTreeMap::new(), BTreeMap::new());
    for v in 1..=10 {
        commit(&mut store, v, &mut model);
        models.insert(v, model.clone());
        if v == 5 || v == 9 {
            assert_eq!(store.checkpoint().unwrap(), Some(v));
            store.wait_checkpoint().unwrap().unwrap();
        }
    }
    store.close().unwrap();
    let skeletons = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("skel-"))
        .count();
    assert_eq!(skeletons, 2, "both skeletons are on disk");
    models
}

#[test]
fn a_paged_reopen_starts_from_the_newest_skeleton() {
    let (dir, copy) = (TempDir::new("paged-reopen"), TempDir::new("paged-reopen-copy"));
    let models = two_skeletons(dir.path());
    copy_files(dir.path(), copy.path());

    // The same files opened unpaged rebuild the versions before 9 from the skeleton of 5.
    let plain = Store::open(copy.path(), options(None)).unwrap();
    assert_eq!(plain.recovery().checkpoint, Some(5));
    assert_eq!(plain.versions().collect::<Vec<_>>(), vec![7, 8, 9, 10]);
    let head = plain.root();
    drop(plain);

    let store = Store::open(dir.path(), options(Some(600))).unwrap();
    assert_eq!(store.recovery().checkpoint, Some(9), "the newest skeleton");
    assert_eq!(store.recovery().replayed, 1, "only the log after it");
    assert_eq!(store.versions().collect::<Vec<_>>(), vec![9, 10]);
    assert_eq!(store.root(), head);
    for v in [9, 10] {
        let snap = store.snapshot(v).unwrap();
        let snap =
            store.resident_for(&snap, |s| models[&v].keys().find_map(|k| s.get(k).err())).unwrap();
        for (k, val) in &models[&v] {
            assert_eq!(snap.get(k).unwrap(), Some(val.as_slice()), "version {v}");
        }
    }
    store.close().unwrap();

    // The open deleted the older skeleton, its log and the chunk files only it named (all
    // hidden before any is deleted, skeletons first): `check` finds nothing wrong, and
    // replays from the newest skeleton, paged.
    let backend: Arc<dyn Backend> = Arc::new(DirBackend::open_read_only(dir.path()).unwrap());
    let report = bavl_store::check::check(&backend).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.checkpoints_checked, 1, "{report:?}");
    assert_eq!(report.head.map(|h| h.1), Some(head));
    assert_eq!(report.versions_replayed, 1, "from the newest skeleton");
}

fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}
