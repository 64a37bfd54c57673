//! The durable store against in-memory models: versions, historic reads, reopen,
//! checkpoints and the deletion of what they make obsolete.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use bavl_core::{verify_membership, Sha256, Tree};
use bavl_store::{
    Backend, CheckpointPolicy, MemBackend, Options, Reclaim, Store, StoreError, WriteFile,
};
use bavl_workload::{block, initial, next_key, Mix, Op};

use crate::common::TempDir;

/// The in-memory store, explicitly: these tests read full checkpoints and the versions an
/// unpaged open rebuilds from the checkpoint before the newest (the paged store has its
/// own model tests: `paged.rs`, `paged_retained.rs`, `bounded.rs`).
fn opts(capacity: u32, keep: u64, policy: CheckpointPolicy) -> Options {
    Options {
        capacity: Some(capacity),
        keep_recent: keep,
        checkpoint: policy,
        ..Options::in_memory()
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const SMALL_AUTO: CheckpointPolicy = CheckpointPolicy::Auto { log_ratio: 0.5, min_log_bytes: 4096 };

/// Applies block `v` of the workload to the store and to the reference tree.
fn apply(store: &mut Store, reference: &mut Tree, seed: u64, v: u64, mix: Mix) {
    let ops = block(seed, v, mix, |p| {
        next_key(|lo| reference.range(lo, Bound::Unbounded), p).expect("resident")
    });
    for op in ops {
        match op {
            Op::Put(k, val) => {
                assert_eq!(store.insert(&k, &val).unwrap(), reference.insert(&k, &val).unwrap());
            }
            Op::Delete(k) => assert_eq!(store.remove(&k).unwrap(), reference.remove(&k)),
        }
    }
}

#[test]
fn versions_survive_reopen_and_stay_readable() {
    let dir = TempDir::new("versions");
    let seed = 11;
    let mix = Mix::workload_b(200);
    let keep = 5;
    let mut reference = Tree::with_capacity(8).unwrap();
    let mut models: BTreeMap<u64, (Model, [u8; 32])> = BTreeMap::new();
    let mut store = Store::open(dir.path(), opts(8, keep, SMALL_AUTO)).unwrap();
    assert_eq!(store.version(), 0);
    for (k, v) in initial(seed).take(500) {
        store.insert(&k, &v).unwrap();
        reference.insert(&k, &v).unwrap();
    }
    for round in 0..4 {
        for _ in 0..6 {
            let v = store.version() + 1;
            apply(&mut store, &mut reference, seed, v, mix);
            let (version, root) = store.commit().unwrap();
            assert_eq!(version, v);
            assert_eq!(root, reference.root_hash());
            let model = reference.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            models.insert(version, (model, root));
        }
        // Every retained version reads, iterates and proves as its model says.
        let versions: Vec<u64> = store.versions().collect();
        assert_eq!(versions.len() as u64, keep);
        assert_eq!(*versions.last().unwrap(), store.version());
        for &v in &versions {
            let snap = store.snapshot(v).unwrap();
            let (model, root) = &models[&v];
            assert_eq!(snap.root_hash(), *root);
            assert!(snap.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).eq(model.clone()));
            let (k, val) = model.iter().nth(model.len() / 3).unwrap();
            assert_eq!(snap.get(k), Ok(Some(&val[..])));
            let proof = snap.prove_membership(k).unwrap();
            let m = verify_membership::<Sha256>(root, k, val, &proof).unwrap();
            assert_eq!(m.key_count, model.len() as u64);
        }
        let oldest = versions[0];
        assert!(matches!(store.snapshot(oldest - 1), Err(StoreError::UnknownVersion { .. })));
        if round % 2 == 1 {
            store.wait_checkpoint().unwrap();
        }
        // Uncommitted changes are not durable.
        store.insert(b"uncommitted", b"x").unwrap();
        let head = store.version();
        drop(store);
        store = Store::open(dir.path(), opts(8, keep, SMALL_AUTO)).unwrap();
        assert_eq!(store.version(), head);
        assert_eq!(store.root(), models[&head].1);
        assert_eq!(store.get(b"uncommitted").unwrap(), None);
        assert_eq!(store.versions().collect::<Vec<_>>(), versions);
    }
    let stats = store.stats().unwrap();
    assert!(stats.files.iter().any(|(n, _)| n.starts_with("ckpt-")), "{:?}", stats.files);
    store.close().unwrap();
}

/// Both places to free pruned versions keep the same versions readable, release the same
/// ones, and leave a snapshot a caller still holds intact.
#[test]
fn pruned_versions_are_released_alike_inline_and_in_the_background() {
    let mut outcomes = Vec::new();
    for reclaim in [Reclaim::Inline, Reclaim::Background] {
        let o = Options { reclaim, ..opts(8, 3, CheckpointPolicy::Manual) };
        let mut store = Store::open_backend(std::sync::Arc::new(MemBackend::new()), o).unwrap();
        let mut reference = Tree::with_capacity(8).unwrap();
        let mut held = None;
        let mut roots = Vec::new();
        for v in 1..=12 {
            apply(&mut store, &mut reference, 5, v, Mix::workload_b(300));
            let (version, root) = store.commit().unwrap();
            roots.push(root);
            if version == 2 {
                held = Some((store.latest(), reference.snapshot()));
            }
        }
        let versions: Vec<u64> = store.versions().collect();
        assert_eq!(versions, vec![10, 11, 12], "{reclaim:?}");
        assert!(matches!(store.snapshot(2), Err(StoreError::UnknownVersion { .. })));
        store.prune(12);
        assert_eq!(store.versions().collect::<Vec<_>>(), vec![12], "{reclaim:?}");
        let (snap, model) = held.unwrap();
        assert_eq!(snap.root_hash(), roots[1]);
        assert!(
            snap.iter().unwrap().eq(model.iter().unwrap()),
            "{reclaim:?}: a held snapshot changed"
        );
        store.close().unwrap();
        outcomes.push(roots);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// A backend whose listing names a file that is already gone, as when a checkpoint renames
/// `HEAD.tmp` between `stats()` listing the directory and reading a length.
/// Armed after opening (opening deletes left-over temporaries it lists).
struct Vanishing(MemBackend, std::sync::atomic::AtomicBool);

impl Backend for Vanishing {
    fn list(&self) -> std::io::Result<Vec<String>> {
        let mut names = self.0.list()?;
        if self.1.load(std::sync::atomic::Ordering::SeqCst) {
            names.push("HEAD.tmp".into());
        }
        Ok(names)
    }
    fn open_read(&self, name: &str) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        self.0.open_read(name)
    }
    fn file_len(&self, name: &str) -> std::io::Result<u64> {
        self.0.file_len(name)
    }
    fn create(&self, name: &str) -> std::io::Result<Box<dyn WriteFile>> {
        self.0.create(name)
    }
    fn open_append(&self, name: &str, len: u64) -> std::io::Result<Box<dyn WriteFile>> {
        self.0.open_append(name, len)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.0.remove(name)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.0.sync_dir()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
}

#[test]
fn stats_skip_a_file_that_vanished_while_listing() {
    let backend = std::sync::Arc::new(Vanishing(MemBackend::new(), Default::default()));
    let mut store =
        Store::open_backend(backend.clone(), opts(8, 2, CheckpointPolicy::Manual)).unwrap();
    store.insert(b"k", b"v").unwrap();
    store.commit().unwrap();
    backend.1.store(true, std::sync::atomic::Ordering::SeqCst);
    let stats = store.stats().expect("a vanished file is not an error");
    assert!(stats.files.iter().all(|(n, _)| n != "HEAD.tmp"), "{:?}", stats.files);
    assert!(stats.disk_bytes > 0);
}

use bavl_store::meta::checkpoint_name as name;

fn files(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// A checkpoint is of the newest version, and replaces the files before it only once no
/// retained version is older: it waits to be renamed into place, and when someone waits
/// for it, it is installed at once but the older checkpoint and log stay until the
/// versions they rebuild are pruned. Reopening in between rebuilds every retained version
/// from the older checkpoint; a damaged older checkpoint falls back to the newest.
#[test]
fn a_checkpoint_of_the_newest_version_keeps_older_retained_versions_rebuildable() {
    let dir = TempDir::new("newest");
    let (seed, keep, mix) = (5, 4, Mix::workload_b(100));
    let manual = opts(8, keep, CheckpointPolicy::Manual);
    let mut reference = Tree::with_capacity(8).unwrap();
    let mut roots = BTreeMap::new();
    let mut store = Store::open(dir.path(), manual.clone()).unwrap();
    let commit = |store: &mut Store, reference: &mut Tree, roots: &mut BTreeMap<u64, _>| {
        let v = store.version() + 1;
        apply(store, reference, seed, v, mix);
        let (version, root) = store.commit().unwrap();
        roots.insert(version, root);
        version
    };
    for _ in 0..6 {
        commit(&mut store, &mut reference, &mut roots);
    }
    assert_eq!(store.checkpoint().unwrap(), Some(6));
    store.wait_checkpoint().unwrap().unwrap();
    for _ in 0..keep {
        commit(&mut store, &mut reference, &mut roots);
    }
    // 10 is the head, 7..=10 retained: the old files went at the commit that pruned 5.
    assert_eq!(files(dir.path(), "ckpt-"), [name(6)]);

    // Paced, it waits (idle or not) until the versions before it are pruned.
    assert_eq!(store.checkpoint().unwrap(), Some(10));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(store.checkpoint_running(), Some(10));
    assert_eq!(files(dir.path(), "ckpt-"), [name(6), format!("{}.tmp", name(10))]);
    for _ in 0..keep - 1 {
        commit(&mut store, &mut reference, &mut roots);
    }
    let t = std::time::Instant::now();
    while store.checkpoint_running().is_some() {
        assert!(t.elapsed().as_secs() < 30, "the checkpoint never finished");
        std::thread::sleep(std::time::Duration::from_millis(10));
        store.commit().map(|(v, r)| roots.insert(v, r)).unwrap();
    }
    assert_eq!(files(dir.path(), "ckpt-"), [name(10)]);

    // Waited for at once: installed, and the older files stay for versions before it.
    let head = commit(&mut store, &mut reference, &mut roots);
    let before: Vec<u64> = store.versions().collect();
    assert_eq!(store.checkpoint().unwrap(), Some(head));
    let report = store.wait_checkpoint().unwrap().unwrap();
    assert_eq!(report.version, head);
    assert_eq!(files(dir.path(), "ckpt-"), [name(10), name(head)]);
    drop(store);
    let store = Store::open(dir.path(), manual.clone()).unwrap();
    assert_eq!(store.versions().collect::<Vec<_>>(), before);
    for &v in &before {
        assert_eq!(store.snapshot(v).unwrap().root_hash(), roots[&v]);
    }
    assert_eq!(store.recovery().checkpoint, Some(10));
    drop(store);

    // The newest checkpoint damaged: found on open although the older one is loaded.
    let flip = |file: &Path| {
        let mut bytes = std::fs::read(file).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        std::fs::write(file, bytes).unwrap();
    };
    let newest = dir.path().join(name(head));
    flip(&newest);
    let err = Store::open(dir.path(), manual.clone()).err().expect("opened a damaged store");
    assert!(matches!(err, StoreError::Corrupted { .. }), "{err}");
    flip(&newest);

    // The older checkpoint damaged: the newest one alone, fewer versions, same head.
    flip(&dir.path().join(name(10)));
    let mut store = Store::open(dir.path(), manual).unwrap();
    assert_eq!(store.recovery().checkpoint, Some(head));
    assert!(store.recovery().older_checkpoint_skipped.is_some());
    assert_eq!(store.versions().collect::<Vec<_>>(), vec![head]);
    assert_eq!(store.root(), roots[&head]);
    // The first commit deletes what the newest checkpoint made obsolete.
    commit(&mut store, &mut reference, &mut roots);
    assert_eq!(files(dir.path(), "ckpt-"), [name(head)]);
    store.close().unwrap();
}
