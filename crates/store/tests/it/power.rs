//! Power loss and a failing `fsync` (what the store assumes of the disk: `docs/design.md`).
//!
//! Power loss: a recording backend keeps, per file, what was written and what was
//! synced, and per directory the names as they are and as last synced. Before every
//! operation that changes anything it takes crash images — what a disk could hold if the
//! power went then: (a) only the synced names with only their synced bytes, (b) the names
//! as they are (a rename or creation the journal happened to commit) with only synced
//! bytes, (c) the synced names with half of each file's unsynced appended bytes (a
//! writeback cut short). Every image must open, at a version no older than the last one
//! acknowledged when the image was taken and with exactly that version's root, and
//! `check` must find no problem in it: the design allows no `Corrupted` here.
//!
//! `EIO` from `fsync`: a backend fails one sync with `EIO` and lets every later one
//! succeed (as Linux does: the error is reported once, the dirty pages are dropped). The
//! store must poison itself at that sync and refuse every later write, although the
//! disk "works" again, and reopening must lose nothing acknowledged (§8.4).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bavl_core::Digest;
use bavl_store::check::check;
use bavl_store::{
    Backend, CheckpointPace, CheckpointPolicy, MemBackend, Options, Store, StoreError, WriteFile,
};
use bavl_workload::{block, next_key, Mix, Op};

const SEED: u64 = 11;

thread_local! {
    /// Whether this test runs the store paged with a budget of 0 (`*_paged` variants).
    static PAGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn opts() -> Options {
    Options {
        cache_bytes: PAGED.get().then_some(0),
        capacity: Some(8),
        keep_recent: 3,
        checkpoint: CheckpointPolicy::Auto { log_ratio: 0.5, min_log_bytes: 2048 },
        checkpoint_pace: CheckpointPace::Unpaced,
        head_interval: Some(Duration::ZERO),
        ..Options::default()
    }
}

fn apply(store: &mut Store, v: u64) -> Result<(), StoreError> {
    let ops = if PAGED.get() {
        crate::common::reference_block(SEED, Mix::workload_b(30), v)
    } else {
        block(SEED, v, Mix::workload_b(30), |p| {
            next_key(|lo| store.working().range(lo, Bound::Unbounded), p).expect("resident")
        })
    };
    for op in ops {
        match op {
            Op::Put(k, val) => store.insert(&k, &val).map(drop)?,
            Op::Delete(k) => store.remove(&k).map(drop)?,
        }
    }
    Ok(())
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
}

pub(crate) type Image = BTreeMap<String, Vec<u8>>;

#[derive(Default)]
pub(crate) struct Disk {
    inodes: Vec<Inode>,
    names: BTreeMap<String, usize>,
    synced_names: BTreeMap<String, usize>,
    /// (image, the version acknowledged when it was taken), three kinds, deduplicated.
    pub(crate) images: Vec<(Image, u64)>,
    last: [Image; 3],
}

impl Disk {
    pub(crate) fn snapshot(&mut self, acked: u64) {
        let synced = |names: &BTreeMap<String, usize>, inodes: &[Inode]| -> Image {
            names.iter().map(|(n, &i)| (n.clone(), inodes[i].synced.clone())).collect()
        };
        let a = synced(&self.synced_names, &self.inodes);
        let b = synced(&self.names, &self.inodes);
        let c = self
            .synced_names
            .iter()
            .map(|(n, &i)| {
                let f = &self.inodes[i];
                let mut bytes = f.synced.clone();
                if f.data.len() > bytes.len() && f.data.starts_with(&bytes) {
                    let extra = (f.data.len() - bytes.len()) / 2;
                    bytes.extend_from_slice(&f.data[f.synced.len()..f.synced.len() + extra]);
                }
                (n.clone(), bytes)
            })
            .collect();
        for (k, image) in [a, b, c].into_iter().enumerate() {
            if image != self.last[k] {
                self.last[k] = image.clone();
                self.images.push((image, acked));
            }
        }
    }
}

/// The recording backend: every change first takes the crash images of that moment.
#[derive(Clone, Default)]
pub(crate) struct PowerLoss {
    pub(crate) disk: Arc<Mutex<Disk>>,
    pub(crate) acked: Arc<AtomicU64>,
}

impl PowerLoss {
    /// Takes the images, then runs `f` on the disk.
    fn change<T>(&self, f: impl FnOnce(&mut Disk) -> io::Result<T>) -> io::Result<T> {
        let mut d = self.disk.lock().unwrap();
        d.snapshot(self.acked.load(Ordering::SeqCst));
        f(&mut d)
    }
    fn inode(d: &Disk, name: &str) -> io::Result<usize> {
        d.names.get(name).copied().ok_or_else(|| io::ErrorKind::NotFound.into())
    }
}

struct PowerFile(PowerLoss, usize);

impl Write for PowerFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.change(|d| {
            d.inodes[self.1].data.extend_from_slice(buf);
            Ok(buf.len())
        })
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl WriteFile for PowerFile {
    fn sync(&mut self) -> io::Result<()> {
        self.0.change(|d| {
            let f = &mut d.inodes[self.1];
            f.synced = f.data.clone();
            Ok(())
        })
    }
}

impl Backend for PowerLoss {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.disk.lock().unwrap().names.keys().cloned().collect())
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        let d = self.disk.lock().unwrap();
        let bytes = d.inodes[Self::inode(&d, name)?].data.clone();
        Ok(Box::new(io::Cursor::new(bytes)))
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        let d = self.disk.lock().unwrap();
        Ok(d.inodes[Self::inode(&d, name)?].data.len() as u64)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        let ino = self.change(|d| {
            d.inodes.push(Inode::default());
            let ino = d.inodes.len() - 1;
            d.names.insert(name.to_string(), ino);
            Ok(ino)
        })?;
        Ok(Box::new(PowerFile(self.clone(), ino)))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        // `DirBackend` cuts and syncs the file here.
        let ino = self.change(|d| {
            let ino = Self::inode(d, name)?;
            let f = &mut d.inodes[ino];
            f.data.truncate(len as usize);
            f.synced.truncate(len as usize);
            Ok(ino)
        })?;
        Ok(Box::new(PowerFile(self.clone(), ino)))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.change(|d| {
            let ino = d.names.remove(from).ok_or(io::ErrorKind::NotFound)?;
            d.names.insert(to.to_string(), ino);
            Ok(())
        })
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.change(|d| d.names.remove(name).map(drop).ok_or(io::ErrorKind::NotFound.into()))
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        self.change(|d| {
            let ino = Self::inode(d, name)?;
            d.inodes[ino].data.truncate(len as usize);
            Ok(())
        })
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.change(|d| {
            d.synced_names = d.names.clone();
            Ok(())
        })
    }
    fn describe(&self) -> String {
        "power-loss recorder".into()
    }
}

#[test]
fn every_power_loss_image_opens_at_an_acknowledged_version() {
    power_loss_images();
}

#[test]
fn every_power_loss_image_opens_at_an_acknowledged_version_paged() {
    PAGED.set(true);
    power_loss_images();
}

fn power_loss_images() {
    const VERSIONS: u64 = 30;
    let disk = PowerLoss::default();
    let mut roots: BTreeMap<u64, Digest> = BTreeMap::new();
    {
        let mut store = Store::open_backend(Arc::new(disk.clone()), opts()).unwrap();
        roots.insert(0, store.root());
        for v in 1..=VERSIONS {
            apply(&mut store, v).unwrap();
            let (version, root) = store.commit().unwrap();
            roots.insert(version, root);
            disk.acked.store(version, Ordering::SeqCst);
            // Every other version, the running checkpoint is waited for: the others run
            // beside the commits as usual, and checkpoints happen as often on a loaded
            // machine as on an idle one (left to the background thread alone, a loaded
            // CI machine finished so few that only 9 images held a checkpoint).
            if v % 2 == 0 {
                store.wait_checkpoint().unwrap();
            }
        }
        store.close().unwrap();
    }
    let mut d = disk.disk.lock().unwrap();
    d.snapshot(VERSIONS);
    let images = std::mem::take(&mut d.images);
    drop(d);
    assert!(images.len() > 200, "only {} crash images", images.len());
    let mut during_checkpoints = 0;
    for (i, (image, acked)) in images.iter().enumerate() {
        let mem = MemBackend::new();
        for (name, bytes) in image {
            mem.put(name, bytes.clone());
        }
        during_checkpoints +=
            image.keys().any(|n| n.starts_with("ckpt-") || n.starts_with("skel-")) as u32;
        // Before its metadata is durable there is no store yet (opening creates one).
        if image.contains_key("bavl.meta") {
            let report = check(&(Arc::new(mem.clone()) as Arc<dyn bavl_store::Backend>)).unwrap();
            assert!(
                report.ok(),
                "image {i} (acknowledged {acked}): {:?} {:?}",
                report.problems,
                image.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>()
            );
        }
        let o = Options { checkpoint: CheckpointPolicy::Manual, ..opts() };
        let store = Store::open_backend(Arc::new(mem.clone()), o)
            .unwrap_or_else(|e| panic!("image {i} (acknowledged {acked}): {e}"));
        let v = store.version();
        assert!(v >= *acked && v <= acked + 1, "image {i}: acknowledged {acked}, opened at {v}");
        assert_eq!(store.root(), roots[&v], "image {i}: the root of version {v}");
    }
    assert!(during_checkpoints > 50, "checkpoints in only {during_checkpoints} images");
    if PAGED.get() {
        // Crash images in the middle of incremental checkpoints: a skeleton newer than
        // every installed one being written (not an old one renamed for deletion).
        let writing = |image: &Image| {
            let newest = image.keys().filter(|n| n.starts_with("skel-") && n.ends_with(".bavl"));
            let newest = newest.max().cloned().unwrap_or_default();
            image.keys().any(|n| n.starts_with("skel-") && n.ends_with(".tmp") && *n > newest)
        };
        let mid = images.iter().filter(|(i, _)| writing(i));
        assert!(mid.count() > 10, "too few images during an incremental checkpoint");
    }
}

/// Fails the `target`-th file sync with `EIO`; every other operation succeeds.
struct FsyncFails {
    inner: MemBackend,
    left: Arc<AtomicI64>,
}

struct FailingFile(Box<dyn WriteFile>, Arc<AtomicI64>);

impl Write for FailingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl WriteFile for FailingFile {
    fn sync(&mut self) -> io::Result<()> {
        if self.1.fetch_sub(1, Ordering::SeqCst) == 0 {
            return Err(io::Error::from_raw_os_error(5)); // EIO, once
        }
        self.0.sync()
    }
}

impl Backend for FsyncFails {
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        self.inner.open_read(name)
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.inner.file_len(name)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(FailingFile(self.inner.create(name)?, self.left.clone())))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(FailingFile(self.inner.open_append(name, len)?, self.left.clone())))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
    fn describe(&self) -> String {
        "fsync fails once".into()
    }
}

#[test]
fn an_eio_from_fsync_poisons_the_store_for_good() {
    eio_poisons();
}

#[test]
fn an_eio_from_fsync_poisons_the_store_for_good_paged() {
    PAGED.set(true);
    eio_poisons();
}

fn eio_poisons() {
    const VERSIONS: u64 = 16;
    let mut target = 0;
    loop {
        let mem = MemBackend::new();
        let left = Arc::new(AtomicI64::new(target));
        let backend = Arc::new(FsyncFails { inner: mem.clone(), left: left.clone() });
        let mut acked = 0;
        let mut roots = BTreeMap::new();
        let failed = match Store::open_backend(backend, opts()) {
            Err(StoreError::Io { .. }) => true,
            Err(e) => panic!("sync {target}: unexpected {e}"),
            Ok(mut store) => {
                roots.insert(0, store.root());
                let mut failed = false;
                for v in 1..=VERSIONS {
                    let r = apply(&mut store, v).and_then(|()| store.commit());
                    match r {
                        Ok((version, root)) => {
                            roots.insert(version, root);
                            acked = version;
                        }
                        Err(StoreError::Io { source, .. }) => {
                            assert_eq!(source.raw_os_error(), Some(5), "sync {target}");
                            failed = true;
                            break;
                        }
                        // The checkpoint thread's sync failed: reported at a later commit.
                        Err(StoreError::Poisoned(_)) => {
                            failed = true;
                            break;
                        }
                        Err(e) => panic!("sync {target}: unexpected {e}"),
                    }
                }
                if !failed {
                    failed = store.close().is_err();
                } else {
                    // The disk works again; the store must still refuse.
                    assert!(left.load(Ordering::SeqCst) < 0, "sync {target}: not the EIO");
                    assert!(matches!(store.insert(b"k", b"v"), Err(StoreError::Poisoned(_))));
                    assert!(matches!(store.commit(), Err(StoreError::Poisoned(_))));
                    assert!(matches!(store.checkpoint(), Err(StoreError::Poisoned(_))));
                    assert_eq!(store.snapshot(acked).unwrap().root_hash(), roots[&acked]);
                }
                failed
            }
        };
        let reopened = Store::open_backend(Arc::new(mem.clone()), opts())
            .unwrap_or_else(|e| panic!("reopen after an EIO at sync {target}: {e}"));
        let v = reopened.version();
        assert!(v >= acked, "sync {target}: acknowledged {acked}, reopened at {v}");
        if let Some(root) = roots.get(&v) {
            assert_eq!(reopened.root(), *root, "sync {target}");
        }
        if !failed {
            assert!(target > 20, "too few syncs: {target}");
            break;
        }
        target += 1;
    }
}
