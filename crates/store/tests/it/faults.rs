//! Faults: torn writes, I/O errors at every point, damaged files, a second process.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::TempDir;
use bavl_core::{Digest, Tree};
use bavl_store::{
    check::check, Backend, CheckpointPolicy, DirBackend, FaultyBackend, Options, Store, StoreError,
};
use bavl_workload::{block, next_key, Mix, Op};

const SEED: u64 = 5;
const POLICY: CheckpointPolicy = CheckpointPolicy::Auto { log_ratio: 0.5, min_log_bytes: 2048 };

thread_local! {
    /// Whether this test runs the store paged with a budget of 0 (`*_paged` variants).
    static PAGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn opts() -> Options {
    Options {
        capacity: Some(8),
        keep_recent: 3,
        checkpoint: POLICY,
        cache_bytes: PAGED.get().then_some(0),
        ..Options::default()
    }
}

fn mix() -> Mix {
    Mix::workload_b(60)
}

/// Applies block `v` to the store (stopping at the first error).
fn apply_store(store: &mut Store, v: u64) -> Result<(), StoreError> {
    let ops = if PAGED.get() {
        crate::common::reference_block(SEED, mix(), v)
    } else {
        block(SEED, v, mix(), |p| {
            next_key(|lo| store.working().range(lo, Bound::Unbounded), p).expect("resident")
        })
    };
    for op in ops {
        match op {
            Op::Put(k, val) => {
                store.insert(&k, &val)?;
            }
            Op::Delete(k) => {
                store.remove(&k)?;
            }
        }
    }
    Ok(())
}

/// Roots of versions 0..=n of the workload, computed in memory.
fn reference_roots(n: u64) -> Vec<Digest> {
    let mut t = Tree::with_capacity(8).unwrap();
    let mut roots = vec![t.root_hash()];
    for v in 1..=n {
        for op in block(SEED, v, mix(), |p| {
            next_key(|lo| t.range(lo, Bound::Unbounded), p).expect("resident")
        }) {
            match op {
                Op::Put(k, val) => {
                    t.insert(&k, &val).unwrap();
                }
                Op::Delete(k) => {
                    t.remove(&k);
                }
            }
        }
        roots.push(t.root_hash());
    }
    roots
}

fn build(dir: &Path, versions: u64) -> Store {
    let mut store = Store::open(dir, opts()).unwrap();
    while store.version() < versions {
        let v = store.version() + 1;
        apply_store(&mut store, v).unwrap();
        store.commit().unwrap();
    }
    store
}

/// An I/O fault injected after every possible number of operations: the store reports
/// an error (never panics), refuses writes afterwards, and reopening yields the last
/// acknowledged version or the one being committed when the fault hit — with exactly the
/// reference root — and a clean `check`.
#[test]
fn io_fault_at_every_point_loses_nothing_committed() {
    io_faults();
}

#[test]
fn io_fault_at_every_point_loses_nothing_committed_paged() {
    PAGED.set(true);
    io_faults();
}

fn io_faults() {
    const VERSIONS: u64 = 40;
    let roots = reference_roots(VERSIONS + 1);
    let mut budget = 0;
    let mut tripped_runs = 0;
    loop {
        let dir = TempDir::new(&format!("io{budget}{}", if PAGED.get() { "p" } else { "" }));
        let inner: Arc<dyn Backend> = Arc::new(DirBackend::open(dir.path()).unwrap());
        let faulty = FaultyBackend::new(inner, budget);
        let mut acknowledged = 0;
        let mut failed = false;
        match Store::open_backend(Arc::new(faulty.clone()), opts()) {
            Err(StoreError::Io { .. }) => failed = true,
            Err(e) => panic!("open with budget {budget}: unexpected {e}"),
            Ok(mut store) => {
                while store.version() < VERSIONS {
                    let v = store.version() + 1;
                    let r = apply_store(&mut store, v).and_then(|()| store.commit().map(|_| ()));
                    match r {
                        Ok(()) => acknowledged = v,
                        Err(StoreError::Io { .. }) => {
                            failed = true;
                            // Everything after a failure is refused.
                            assert!(matches!(
                                store.insert(b"k", b"v"),
                                Err(StoreError::Poisoned(_))
                            ));
                            assert!(matches!(store.commit(), Err(StoreError::Poisoned(_))));
                            // Committed versions stay readable.
                            assert_eq!(
                                store.snapshot(acknowledged).unwrap().root_hash(),
                                roots[acknowledged as usize]
                            );
                            break;
                        }
                        Err(e) => panic!("budget {budget}: unexpected {e}"),
                    }
                }
                if !failed {
                    // A fault may still hit the background checkpoint or `close`.
                    if let Err(e) = store.close() {
                        assert!(
                            matches!(e, StoreError::Io { .. } | StoreError::Poisoned(_)),
                            "{e}"
                        );
                        failed = true;
                    }
                }
            }
        }
        drop(faulty);
        // Reopen on the healthy disk.
        let store = Store::open(dir.path(), opts())
            .unwrap_or_else(|e| panic!("reopen after a fault at operation {budget}: {e}"));
        let head = store.version();
        assert!(
            head == acknowledged || head == acknowledged + 1,
            "budget {budget}: acknowledged {acknowledged}, reopened at {head}"
        );
        assert_eq!(store.root(), roots[head as usize], "budget {budget}: wrong root at {head}");
        drop(store);
        let b: Arc<dyn bavl_store::Backend> = Arc::new(DirBackend::open(dir.path()).unwrap());
        let report = check(&b).unwrap();
        assert!(report.ok(), "budget {budget}: {:?}", report.problems);
        if !failed {
            break;
        }
        tripped_runs += 1;
        budget += 1;
    }
    assert!(tripped_runs > 40, "faults were injected at {tripped_runs} points only");
}

/// A record cut short (a crash during the append) is discarded on open; the versions
/// before it are intact and new commits continue after it.
#[test]
fn torn_tail_is_discarded() {
    let dir = TempDir::new("torn");
    let roots = reference_roots(12);
    let mut store = build(dir.path(), 10);
    drop(store);
    let wal = newest(dir.path(), "wal-");
    let full = std::fs::read(&wal).unwrap();
    // Append half of a real record: the start of version 11's record.
    let mut s2 =
        Store::open(dir.path(), Options { checkpoint: CheckpointPolicy::Manual, ..opts() })
            .unwrap();
    apply_store(&mut s2, 11).unwrap();
    s2.commit().unwrap();
    drop(s2);
    let with11 = std::fs::read(&wal).unwrap();
    assert!(with11.len() > full.len(), "version 11 went to the same segment");
    let half = full.len() + (with11.len() - full.len()) / 2;
    for cut in [full.len() + 3, full.len() + 17, half, with11.len() - 1] {
        std::fs::write(&wal, &with11[..cut]).unwrap();
        store = Store::open(dir.path(), opts()).unwrap();
        assert_eq!(store.version(), 10, "cut at {cut}");
        assert_eq!(store.root(), roots[10]);
        assert_eq!(store.recovery().discarded_bytes, (cut - full.len()) as u64);
        drop(store);
        assert_eq!(std::fs::read(&wal).unwrap().len(), full.len(), "tail truncated on open");
    }
    store = Store::open(dir.path(), opts()).unwrap();
    for v in 11..=12 {
        apply_store(&mut store, v).unwrap();
        assert_eq!(store.commit().unwrap(), (v, roots[v as usize]));
    }
}

fn newest(dir: &Path, prefix: &str) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    v.sort();
    v.pop().unwrap_or_else(|| panic!("no {prefix}* file"))
}

fn expect_corrupted(dir: &Path, file: &Path) {
    let name = file.file_name().unwrap().to_str().unwrap().to_string();
    match Store::open(dir, opts()) {
        Err(StoreError::Corrupted { file, .. }) => assert_eq!(file, name),
        Err(e) => panic!("damage to {name}: expected Corrupted, got {e}"),
        Ok(s) => panic!("damage to {name} not detected (opened at {})", s.version()),
    }
    let b: Arc<dyn bavl_store::Backend> = Arc::new(DirBackend::open(dir).unwrap());
    let report = check(&b).unwrap();
    assert!(report.problems.iter().any(|p| p.file == name), "{:?}", report.problems);
}

/// Flipping any of a sample of bytes of a log segment or a checkpoint is detected, by
/// opening and by `check`; so is a truncated checkpoint and a log cut below `HEAD`.
#[test]
fn damaged_files_are_detected() {
    let dir = TempDir::new("damage");
    drop(build(dir.path(), 30));
    // From here on only the checkpoint of 30, so that the files are known: it, and the
    // log of 31..=36 after it (the older files go once 30 is the oldest retained).
    let manual = Options { checkpoint: CheckpointPolicy::Manual, ..opts() };
    let mut store = Store::open(dir.path(), manual).unwrap();
    assert_eq!(store.checkpoint().unwrap(), Some(30));
    store.wait_checkpoint().unwrap();
    for v in 31..=36 {
        apply_store(&mut store, v).unwrap();
        store.commit().unwrap();
    }
    store.close().unwrap();
    let wal = newest(dir.path(), "wal-");
    let ckpt = newest(dir.path(), "ckpt-");
    for file in [&wal, &ckpt] {
        let good = std::fs::read(file).unwrap();
        let step = (good.len() / 97).max(1);
        for i in (0..good.len()).step_by(step) {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(file, &bad).unwrap();
            expect_corrupted(dir.path(), file);
        }
        std::fs::write(file, &good).unwrap();
    }
    // A truncated checkpoint.
    let good = std::fs::read(&ckpt).unwrap();
    std::fs::write(&ckpt, &good[..good.len() / 2]).unwrap();
    expect_corrupted(dir.path(), &ckpt);
    std::fs::write(&ckpt, &good).unwrap();
    // A log cut at a record boundary below the version `HEAD` records: the log is named.
    let good = std::fs::read(&wal).unwrap();
    std::fs::write(&wal, &good[..24]).unwrap();
    let wal_name = wal.file_name().unwrap().to_str().unwrap();
    match Store::open(dir.path(), opts()) {
        Err(StoreError::Corrupted { file, .. }) => assert_eq!(file, wal_name),
        other => panic!("truncated log not detected: {:?}", other.map(|s| s.version())),
    }
    std::fs::write(&wal, &good).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.version(), 36);
}

#[test]
fn a_second_process_cannot_open_the_store() {
    let dir = TempDir::new("lock");
    let _store = build(dir.path(), 1);
    match Store::open(dir.path(), opts()) {
        Err(StoreError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::WouldBlock)
        }
        other => panic!("expected a lock error, got {:?}", other.map(|s| s.version())),
    }
}

#[test]
fn options_are_checked() {
    let dir = TempDir::new("opts");
    drop(build(dir.path(), 1));
    let bad = Options { capacity: Some(16), ..opts() };
    assert!(matches!(Store::open(dir.path(), bad), Err(StoreError::InvalidOption(_))));
    let bad = Options { keep_recent: 0, ..opts() };
    assert!(matches!(Store::open(dir.path(), bad), Err(StoreError::InvalidOption(_))));
    let dir2 = TempDir::new("opts2");
    let bad = Options { capacity: Some(3), ..opts() };
    assert!(matches!(Store::open(dir2.path(), bad), Err(StoreError::Input(_))));
}

/// Snapshots are read on other threads while the writer commits and checkpoints;
/// checkpoints delete the log they make obsolete, and pruning releases versions.
#[test]
fn snapshots_are_read_concurrently_and_old_files_go() {
    let dir = TempDir::new("concurrent");
    let roots = reference_roots(60);
    let mut store = build(dir.path(), 20);
    let snap = store.snapshot(20).unwrap();
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        for _ in 0..50 {
            n += snap.iter().unwrap().count() as u64;
            for i in 0..snap.chunk_count() {
                let c = bavl_core::verify_chunk::<bavl_core::Sha256>(
                    &snap.root_hash(),
                    i,
                    &snap.export_chunk(i).unwrap(),
                )
                .unwrap();
                assert_eq!(c.index, i);
            }
        }
        n
    });
    for v in 21..=60 {
        apply_store(&mut store, v).unwrap();
        assert_eq!(store.commit().unwrap().1, roots[v as usize]);
    }
    assert!(reader.join().unwrap() > 0);
    // The commits started automatic checkpoints: one finished, or one still running (a
    // paced checkpoint at nice 10 may outlast the 40 commits on a loaded machine).
    let auto =
        store.checkpoint_running().is_some() || store.stats().unwrap().checkpoints_written > 0;
    assert!(auto, "no automatic checkpoint in 40 commits");
    // Starts one, unless an automatic one is still running.
    let started = store.checkpoint().unwrap();
    let running = store.checkpoint_running();
    assert!(running.is_some());
    assert!(started.is_none() || started == running);
    let report = store.wait_checkpoint().unwrap().expect("a checkpoint ran");
    assert_eq!(store.checkpoint_running(), None);
    assert_eq!(store.last_checkpoint_report().map(|r| r.version), Some(report.version));
    assert!(store.stats().unwrap().checkpoints_written >= 1);
    drop(store);

    // Without automatic ones (whose timing would decide which files are there): a
    // checkpoint of the head, waited for, keeps the files before it while older versions
    // are retained, and they go at the commit that prunes the last of them.
    let manual = Options { checkpoint: CheckpointPolicy::Manual, ..opts() };
    let mut store = Store::open(dir.path(), manual).unwrap();
    assert_eq!(store.checkpoint().unwrap(), Some(60));
    store.wait_checkpoint().unwrap().expect("a checkpoint ran");
    for v in 61..=62 {
        apply_store(&mut store, v).unwrap();
        store.commit().unwrap();
    }
    let stats = store.stats().unwrap();
    let ckpts: Vec<_> = stats.files.iter().filter(|(n, _)| n.starts_with("ckpt-")).collect();
    let wals: Vec<_> = stats.files.iter().filter(|(n, _)| n.starts_with("wal-")).collect();
    assert_eq!(ckpts.len(), 1, "{:?}", stats.files);
    assert!(wals.len() <= 2, "{:?}", stats.files);
    assert_eq!(stats.retained, 3);
    store.prune(62);
    assert_eq!(store.versions().collect::<Vec<_>>(), vec![62]);
}
