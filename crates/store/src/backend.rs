//! Where the store's files live.
//!
//! The store writes only a few kinds of files — a metadata file, write-ahead log
//! segments it appends to, checkpoint files written once and renamed into place, and a
//! small `HEAD` marker — so the [`Backend`] trait is a tiny file-system interface.
//! [`DirBackend`] is a directory on the local file system (the default, chosen by
//! measurement: `docs/design.md` §8.6). [`FaultyBackend`] wraps another backend and fails
//! every mutating operation after a budget of them, for fault tests; `MemBackend`
//! (module `memory`) keeps the files in memory.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub use crate::memory::MemBackend;

/// A file open for writing at its end.
pub trait WriteFile: Write + Send {
    /// Makes everything written so far durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Starts writing bytes `offset..offset + len` (already written to the file) to the
    /// disk, without waiting for them. A hint, not a promise: only [`WriteFile::sync`]
    /// makes bytes durable. A paced checkpoint, written to the page cache whole, hands it
    /// to the disk this way slice by slice; a backend may do nothing.
    fn start_writeback(&mut self, _offset: u64, _len: u64) {}
}

/// The file operations the store needs. Names are plain file names (no separators).
pub trait Backend: Send + Sync + 'static {
    /// Names of all files, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens a file for reading from its start.
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>>;
    /// Length of a file in bytes.
    fn file_len(&self, name: &str) -> io::Result<u64>;
    /// Creates a file (truncating any old one) for writing.
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>>;
    /// Opens an existing file, truncated to `len` bytes, for appending.
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Deletes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Cuts a file to `len` bytes, not synced. The store shrinks a large file it is about
    /// to delete in steps, so that freeing its blocks never lands in one journal
    /// transaction its log's next sync would wait for; a backend may do nothing here.
    fn shrink(&self, _name: &str, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Makes creations, renames and removals durable (`fsync` of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// Reads exactly `buf.len()` bytes of file `name` at `offset` (a paged store reads
    /// chunk bodies from its chunk files this way). It must see every byte written to
    /// the file so far, also through a [`WriteFile`] still open. The default reads the
    /// file from its start (correct, slow: a backend for real use overrides it).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut r = self.open_read(name)?;
        let skipped = io::copy(&mut (&mut r).take(offset), &mut io::sink())?;
        if skipped != offset {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        r.read_exact(buf)
    }
    /// Where the files are, for messages.
    fn describe(&self) -> String;
}

/// A directory on the local file system, locked against a second process.
///
/// The lock is an advisory `flock` on the **directory itself**, not on a file in it: a
/// file can be unlinked under a running writer (and a second writer would then lock a
/// new one), the directory cannot while it holds the store's files. A writer takes it
/// exclusively, a reader ([`DirBackend::open_read_only`]) shared. Before every operation
/// that changes a file — creating, renaming, removing, shrinking, writing or syncing a
/// file — the backend checks that the path still names the directory it locked (same
/// device and inode): a directory renamed away or deleted and recreated under a running
/// writer makes every later write fail, so the store poisons itself instead of writing
/// into a directory another process may have locked since.
pub struct DirBackend {
    guard: Arc<DirGuard>,
    /// Held for the lifetime of the backend: the directory, `flock`ed.
    lock: File,
    /// Files opened for [`Backend::read_at`], dropped when renamed or removed.
    readers: std::sync::Mutex<std::collections::HashMap<String, Arc<File>>>,
}

/// The directory a backend locked, re-checked before every write.
struct DirGuard {
    dir: PathBuf,
    id: (u64, u64),
    read_only: bool,
}

impl DirGuard {
    /// Fails unless writes are allowed and the path still names the locked directory.
    fn check(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                format!("{} is open read-only", self.dir.display()),
            ));
        }
        let now = fs::metadata(&self.dir).map(|m| dev_ino(&m));
        if now.as_ref().ok() != Some(&self.id) {
            return Err(io::Error::other(format!(
                "{} is no longer the directory this store locked (moved, deleted or \
                 replaced while open): refusing to write",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

#[cfg(unix)]
fn dev_ino(m: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn dev_ino(_: &fs::Metadata) -> (u64, u64) {
    (0, 0)
}

/// The name of the lock file that stores before this version locked (and that a
/// listing still ignores). The lock is now on the directory itself.
pub const LOCK_FILE: &str = "LOCK";

impl DirBackend {
    /// Opens (creating it if needed) the directory and locks it exclusively. Nothing in
    /// the directory is created or changed here.
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        Self::lock(dir, false)
    }

    /// Opens an existing directory for reading only, with a shared lock: any number of
    /// readers, no writer. Every operation that would change a file fails (with
    /// `ReadOnlyFilesystem`) before touching the disk, so this works on a read-only mount
    /// or a directory without write permission.
    pub fn open_read_only(dir: &Path) -> io::Result<Self> {
        Self::lock(dir, true)
    }

    /// Opens an existing directory for writing **without** locking it, for files that
    /// are not a store's (a node's descriptor, a home directory's markers): their owner
    /// serialises its own writes. The directory is still re-checked before every write.
    pub fn unlocked(dir: &Path) -> io::Result<Self> {
        let (lock, meta) = Self::open_dir(dir)?;
        let guard = DirGuard { dir: dir.to_path_buf(), id: dev_ino(&meta), read_only: false };
        Ok(DirBackend { guard: Arc::new(guard), lock, readers: Default::default() })
    }

    fn open_dir(dir: &Path) -> io::Result<(File, fs::Metadata)> {
        let lock = File::open(dir)?;
        let meta = lock.metadata()?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Ok((lock, meta))
    }

    fn lock(dir: &Path, read_only: bool) -> io::Result<Self> {
        let (lock, meta) = Self::open_dir(dir)?;
        let taken = if read_only { lock.try_lock_shared() } else { lock.try_lock() };
        match taken {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is in use by another process", dir.display()),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let guard = DirGuard { dir: dir.to_path_buf(), id: dev_ino(&meta), read_only };
        Ok(DirBackend { guard: Arc::new(guard), lock, readers: Default::default() })
    }

    /// Whether this backend refuses every write.
    pub fn is_read_only(&self) -> bool {
        self.guard.read_only
    }

    fn path(&self, name: &str) -> PathBuf {
        self.guard.dir.join(name)
    }

    fn forget_reader(&self, name: &str) {
        self.readers.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    }

    /// The path of a file to be changed, once the directory is checked.
    fn writable(&self, name: &str) -> io::Result<PathBuf> {
        self.guard.check()?;
        Ok(self.path(name))
    }
}

/// A file of a [`DirBackend`]: every write and sync first checks the directory.
struct DirFile(File, Arc<DirGuard>);

impl Write for DirFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.1.check()?;
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.1.check()?;
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl WriteFile for DirFile {
    fn sync(&mut self) -> io::Result<()> {
        self.1.check()?;
        self.0.sync_data()
    }
    /// `posix_fadvise(POSIX_FADV_DONTNEED)`: on Linux it starts the range's writeback and
    /// returns (its pages stay cached while they are being written). Unlike
    /// `fdatasync`, it syncs neither the rest of the file nor the journal, and flushes
    /// no device cache.
    fn start_writeback(&mut self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        {
            let advice = rustix::fs::Advice::DontNeed;
            let _ = rustix::fs::fadvise(&self.0, offset, std::num::NonZeroU64::new(len), advice);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }
}

impl Backend for DirBackend {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.guard.dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                if name != LOCK_FILE {
                    names.push(name.to_string());
                }
            }
        }
        Ok(names)
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(self.path(name))?))
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        Ok(fs::metadata(self.path(name))?.len())
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        let file = File::create(self.writable(name)?)?;
        Ok(Box::new(DirFile(file, self.guard.clone())))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        let file = OpenOptions::new().write(true).open(self.writable(name)?)?;
        if file.metadata()?.len() != len {
            file.set_len(len)?;
            file.sync_all()?;
        }
        let mut file = DirFile(file, self.guard.clone());
        io::Seek::seek(&mut file.0, io::SeekFrom::Start(len))?;
        Ok(Box::new(file))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.forget_reader(from);
        self.forget_reader(to);
        fs::rename(self.writable(from)?, self.path(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.forget_reader(name);
        fs::remove_file(self.writable(name)?)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let file = {
            let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
            match readers.get(name) {
                Some(f) => f.clone(),
                None => {
                    let f = File::open(self.path(name))?;
                    // Reads here are of single records at random offsets: the kernel's
                    // readahead would fill the page cache (charged to a memory-limited
                    // process) with neighbours nobody asked for.
                    #[cfg(target_os = "linux")]
                    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random)?;
                    let f = Arc::new(f);
                    readers.insert(name.to_string(), f.clone());
                    f
                }
            }
        };
        file.read_exact_at(buf, offset)
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        OpenOptions::new().write(true).open(self.writable(name)?)?.set_len(len)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.guard.check()?;
        self.lock.sync_all()
    }
    fn describe(&self) -> String {
        self.guard.dir.display().to_string()
    }
}

/// Wraps a backend and fails mutating operations once a budget of them is spent.
///
/// Every `create`, `open_append`, `rename`, `remove`, `sync_dir`, file `write` and file
/// `sync` costs one unit. When the budget reaches zero the operation fails with an
/// injected error; a write that fails writes a prefix of its buffer first (half of it),
/// like a torn write. After the first failure every later mutating operation fails too,
/// as a dead disk would. Reads are never failed.
#[derive(Clone)]
pub struct FaultyBackend {
    inner: Arc<dyn Backend>,
    budget: Arc<AtomicI64>,
}

impl FaultyBackend {
    /// Fails the mutating operation after `ops` successful ones.
    pub fn new(inner: Arc<dyn Backend>, ops: u64) -> Self {
        FaultyBackend { inner, budget: Arc::new(AtomicI64::new(ops.min(i64::MAX as u64) as i64)) }
    }
    /// Whether a fault has been injected.
    pub fn tripped(&self) -> bool {
        self.budget.load(Ordering::SeqCst) < 0
    }
    fn spend(budget: &AtomicI64) -> io::Result<()> {
        if budget.fetch_sub(1, Ordering::SeqCst) <= 0 {
            budget.store(-1, Ordering::SeqCst);
            return Err(io::Error::other("injected I/O fault"));
        }
        Ok(())
    }
}

struct FaultyFile {
    inner: Box<dyn WriteFile>,
    budget: Arc<AtomicI64>,
}

impl Write for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Err(e) = FaultyBackend::spend(&self.budget) {
            let _ = self.inner.write_all(&buf[..buf.len() / 2]);
            return Err(e);
        }
        self.inner.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if let Err(e) = FaultyBackend::spend(&self.budget) {
            let _ = self.inner.write_all(&buf[..buf.len() / 2]);
            return Err(e);
        }
        self.inner.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl WriteFile for FaultyFile {
    fn sync(&mut self) -> io::Result<()> {
        FaultyBackend::spend(&self.budget)?;
        self.inner.sync()
    }
    fn start_writeback(&mut self, offset: u64, len: u64) {
        // A hint that cannot fail: it costs no budget.
        self.inner.start_writeback(offset, len)
    }
}

impl Backend for FaultyBackend {
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
        Self::spend(&self.budget)?;
        let inner = self.inner.create(name)?;
        Ok(Box::new(FaultyFile { inner, budget: self.budget.clone() }))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        Self::spend(&self.budget)?;
        let inner = self.inner.open_append(name, len)?;
        Ok(Box::new(FaultyFile { inner, budget: self.budget.clone() }))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Self::spend(&self.budget)?;
        self.inner.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        Self::spend(&self.budget)?;
        self.inner.remove(name)
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        Self::spend(&self.budget)?;
        self.inner.shrink(name, len)
    }
    fn sync_dir(&self) -> io::Result<()> {
        Self::spend(&self.budget)?;
        self.inner.sync_dir()
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(name, offset, buf)
    }
    fn describe(&self) -> String {
        format!("{} (fault injection)", self.inner.describe())
    }
}
