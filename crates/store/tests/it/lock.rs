//! Who may open a store directory, and what a read-only open may touch (the store's
//! hardening against careless operators): the lock is on the directory itself, a writer
//! whose directory is replaced stops writing, only an empty directory becomes a store, and
//! a read-only open makes no change at all (proved on a backend that refuses every change,
//! as a read-only mount does, and by every file's identity, size and time staying the
//! same).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::TempDir;
use bavl_store::{
    Backend, CheckpointPolicy, DirBackend, MemBackend, Options, Store, StoreError, WriteFile,
};

fn opts() -> Options {
    Options { capacity: Some(8), checkpoint: CheckpointPolicy::Manual, ..Options::default() }
}

fn read_only() -> Options {
    Options { read_only: true, ..opts() }
}

fn commit(store: &mut Store, n: u64) -> Result<(u64, bavl_core::Digest), StoreError> {
    for i in 0..20u64 {
        store.insert(format!("k{}", (n * 31 + i * 7) % 101).as_bytes(), &n.to_le_bytes())?;
    }
    store.commit()
}

fn lock_error<T>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::WouldBlock)
}

#[test]
fn the_lock_is_the_directory_not_a_file_that_can_be_deleted() {
    let dir = TempDir::new("dir");
    let mut first = Store::open(dir.path(), opts()).unwrap();
    commit(&mut first, 1).unwrap();
    // No lock file to delete: whatever is deleted, a second writer is refused.
    let _ = std::fs::remove_file(dir.path().join("LOCK"));
    assert!(!dir.path().join("LOCK").exists(), "opening creates no lock file");
    assert!(lock_error(Store::open(dir.path(), opts())), "a second writer got in");
    assert!(lock_error(Store::open(dir.path(), read_only())), "a reader beside a writer");
    commit(&mut first, 2).unwrap();
    drop(first);
    // Readers share; a writer waits for them all.
    let r1 = Store::open(dir.path(), read_only()).unwrap();
    let r2 = Store::open(dir.path(), read_only()).unwrap();
    assert_eq!((r1.version(), r2.version()), (2, 2));
    assert!(lock_error(Store::open(dir.path(), opts())), "a writer beside readers");
    drop((r1, r2));
    assert_eq!(Store::open(dir.path(), opts()).unwrap().version(), 2);
}

#[test]
fn a_writer_whose_directory_is_replaced_stops_writing() {
    let dir = TempDir::new("moved");
    let mut first = Store::open(dir.path(), opts()).unwrap();
    let (_, root1) = commit(&mut first, 1).unwrap();
    // The directory renamed away and a new one made at its path: a second writer locks
    // the new one, so the first must not write on (into either).
    let moved = dir.path().with_extension("moved");
    std::fs::rename(dir.path(), &moved).unwrap();
    std::fs::create_dir(dir.path()).unwrap();
    let mut second = Store::open(dir.path(), opts()).unwrap();
    match commit(&mut first, 2) {
        Err(StoreError::Io { source, .. }) => {
            assert!(source.to_string().contains("no longer the directory"), "{source}")
        }
        other => panic!("the first writer committed on: {:?}", other.map(|c| c.0)),
    }
    assert!(matches!(commit(&mut first, 3), Err(StoreError::Poisoned(_))));
    assert!(matches!(first.checkpoint(), Err(StoreError::Poisoned(_))));
    assert_eq!(first.snapshot(1).unwrap().root_hash(), root1, "committed versions stay");
    commit(&mut second, 1).unwrap();
    drop((first, second));
    assert_eq!(Store::open(&moved, read_only()).unwrap().version(), 1);
    assert_eq!(Store::open(dir.path(), read_only()).unwrap().version(), 1);
    // Deleted outright: the same.
    let mut third = Store::open(dir.path(), opts()).unwrap();
    std::fs::remove_dir_all(dir.path()).unwrap();
    assert!(commit(&mut third, 2).is_err());
    assert!(matches!(commit(&mut third, 3), Err(StoreError::Poisoned(_))));
}

#[test]
fn only_an_empty_directory_becomes_a_store() {
    let dir = TempDir::new("foreign");
    std::fs::create_dir_all(dir.path()).unwrap();
    for (name, bytes) in [("notes.txt", &b"mine"[..]), ("cache.tmp", b"also mine"), ("HEAD", b"x")]
    {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let before = listing(dir.path());
    match Store::open(dir.path(), opts()) {
        Err(StoreError::InvalidOption(why)) => assert!(why.contains("neither empty"), "{why}"),
        other => panic!("another program's directory opened: {:?}", other.map(|s| s.version())),
    }
    assert_eq!(listing(dir.path()), before, "the directory was touched");
    // A store's own left-overs are not another program's.
    let fresh = TempDir::new("fresh");
    std::fs::create_dir_all(fresh.path()).unwrap();
    std::fs::write(fresh.path().join("bavl.meta.tmp"), b"half").unwrap();
    let mut s = Store::open(fresh.path(), opts()).unwrap();
    commit(&mut s, 1).unwrap();
    drop(s);
    // In a store, only the store's own temporaries are deleted.
    std::fs::write(fresh.path().join("notes.tmp"), b"theirs").unwrap();
    std::fs::write(fresh.path().join("HEAD.tmp"), b"ours").unwrap();
    drop(Store::open(fresh.path(), opts()).unwrap());
    assert!(fresh.path().join("notes.tmp").exists());
    assert!(!fresh.path().join("HEAD.tmp").exists());
}

/// Name → (inode, length, modification time) of every entry, and the directory's own.
fn listing(dir: &Path) -> BTreeMap<String, (u64, u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let mut m = BTreeMap::new();
    let d = std::fs::metadata(dir).unwrap();
    m.insert(".".into(), (d.ino(), 0, d.modified().unwrap()));
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        m.insert(
            e.file_name().into_string().unwrap(),
            (md.ino(), md.len(), md.modified().unwrap()),
        );
    }
    m
}

/// A store with what a writable open would change: a torn record at the end of the log
/// and a left-over temporary file.
fn store_with_leftovers(dir: &Path) {
    let mut s = Store::open(dir, opts()).unwrap();
    for n in 1..=4 {
        commit(&mut s, n).unwrap();
    }
    s.checkpoint().unwrap();
    s.wait_checkpoint().unwrap();
    commit(&mut s, 5).unwrap();
    drop(s);
    let wal = dir.join(bavl_store::meta::wal_name(5));
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(&[0xAB; 10]);
    std::fs::write(&wal, bytes).unwrap();
    std::fs::write(dir.join("ckpt-00000000000000000007.bavl.tmp"), b"half a checkpoint").unwrap();
}

#[test]
fn a_read_only_open_changes_nothing() {
    let dir = TempDir::new("ro");
    store_with_leftovers(dir.path());
    let before = listing(dir.path());
    std::thread::sleep(std::time::Duration::from_millis(20)); // so a change shows in a time
    let mut s = Store::open(dir.path(), read_only()).unwrap();
    assert_eq!(s.version(), 5);
    assert!(matches!(s.insert(b"k", b"v"), Err(StoreError::ReadOnly(_))));
    assert!(matches!(s.commit(), Err(StoreError::ReadOnly(_))));
    assert!(matches!(s.checkpoint(), Err(StoreError::ReadOnly(_))));
    assert!(s.stats().unwrap().files.len() >= 4);
    s.close().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(DirBackend::open_read_only(dir.path()).unwrap());
    let report = bavl_store::check::check(&backend).unwrap();
    assert!(report.ok() && report.notes.len() == 2, "{report:?}");
    drop(backend);
    assert_eq!(listing(dir.path()), before, "a read-only open changed the directory");
    // The comparison can fail: a writable open discards both left-overs.
    drop(Store::open(dir.path(), opts()).unwrap());
    assert_ne!(listing(dir.path()), before);
}

/// A backend that refuses every change, as a read-only mount does (`EROFS`), and counts
/// the attempts.
struct ReadOnlyMount(MemBackend, AtomicU64);

impl ReadOnlyMount {
    fn refuse<T>(&self) -> io::Result<T> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Err(io::ErrorKind::ReadOnlyFilesystem.into())
    }
}

impl Backend for ReadOnlyMount {
    fn list(&self) -> io::Result<Vec<String>> {
        self.0.list()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn io::Read + Send>> {
        self.0.open_read(name)
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.0.file_len(name)
    }
    fn create(&self, _: &str) -> io::Result<Box<dyn WriteFile>> {
        self.refuse()
    }
    fn open_append(&self, _: &str, _: u64) -> io::Result<Box<dyn WriteFile>> {
        self.refuse()
    }
    fn rename(&self, _: &str, _: &str) -> io::Result<()> {
        self.refuse()
    }
    fn remove(&self, _: &str) -> io::Result<()> {
        self.refuse()
    }
    fn shrink(&self, _: &str, _: u64) -> io::Result<()> {
        self.refuse()
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.refuse()
    }
    fn describe(&self) -> String {
        "a read-only mount".into()
    }
}

#[test]
fn a_read_only_mount_can_be_opened_and_checked() {
    let mem = MemBackend::new();
    let mut s = Store::open_backend(Arc::new(mem.clone()), opts()).unwrap();
    for n in 1..=3 {
        commit(&mut s, n).unwrap();
    }
    let root = s.root();
    drop(s);
    let w1 = bavl_store::meta::wal_name(1);
    let mut bytes = mem.get(&w1).unwrap();
    bytes.extend_from_slice(&[0xAB; 10]); // a torn tail a writable open would cut
    mem.put(&w1, bytes);
    mem.put("wal-00000000000000000004.log.tmp", vec![1, 2, 3]);
    let mount = Arc::new(ReadOnlyMount(mem, AtomicU64::new(0)));
    let s = Store::open_backend(mount.clone(), read_only()).unwrap();
    assert_eq!((s.version(), s.root()), (3, root));
    s.close().unwrap();
    let report = bavl_store::check::check(&(mount.clone() as Arc<dyn Backend>)).unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!(mount.1.load(Ordering::SeqCst), 0, "a read-only open tried to change a file");
    // A writable open is refused by such a mount (it would cut the tail).
    assert!(Store::open_backend(mount.clone(), opts()).is_err());
    assert!(mount.1.load(Ordering::SeqCst) > 0);
}
