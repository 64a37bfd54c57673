//! Where the store's files live.
//!
//! The store writes only a few kinds of files — a metadata file, write-ahead log
//! segments it appends to, checkpoint files written once and renamed into place, and a
//! small `HEAD` marker — so the [`Backend`] trait is a tiny file-system interface.
//! [`DirBackend`] is a directory on the local file system (the default, chosen by
//! measurement: `docs/design.md` §7). [`FaultyBackend`] wraps another backend and fails
//! every mutating operation after a budget of them, for fault tests.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

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
    /// Where the files are, for messages.
    fn describe(&self) -> String;
}

/// A directory on the local file system, locked against a second process.
pub struct DirBackend {
    dir: PathBuf,
    /// Held for the lifetime of the backend: an exclusive advisory lock on `LOCK`.
    _lock: File,
}

/// The name of the lock file inside a store directory.
pub const LOCK_FILE: &str = "LOCK";

impl DirBackend {
    /// Opens (creating it if needed) the directory and takes its exclusive lock.
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(LOCK_FILE))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is in use by another process", dir.display()),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        Ok(DirBackend { dir: dir.to_path_buf(), _lock: lock })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

struct DirFile(File);

impl Write for DirFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl WriteFile for DirFile {
    fn sync(&mut self) -> io::Result<()> {
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
        for entry in fs::read_dir(&self.dir)? {
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
        Ok(Box::new(DirFile(File::create(self.path(name))?)))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        let file = OpenOptions::new().write(true).open(self.path(name))?;
        if file.metadata()?.len() != len {
            file.set_len(len)?;
            file.sync_all()?;
        }
        let mut file = DirFile(file);
        io::Seek::seek(&mut file.0, io::SeekFrom::Start(len))?;
        Ok(Box::new(file))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name))
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        OpenOptions::new().write(true).open(self.path(name))?.set_len(len)
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
    fn describe(&self) -> String {
        self.dir.display().to_string()
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
    fn describe(&self) -> String {
        format!("{} (fault injection)", self.inner.describe())
    }
}

type MemFiles = std::collections::BTreeMap<String, Arc<std::sync::Mutex<Vec<u8>>>>;

/// Files in memory: for tests and fuzzing (nothing is durable, `sync` does nothing).
#[derive(Clone, Default)]
pub struct MemBackend {
    files: Arc<std::sync::Mutex<MemFiles>>,
}

impl MemBackend {
    pub fn new() -> Self {
        Self::default()
    }
    /// Puts a file with the given contents (replacing any).
    pub fn put(&self, name: &str, bytes: Vec<u8>) {
        self.lock().insert(name.to_string(), Arc::new(std::sync::Mutex::new(bytes)));
    }
    /// The contents of a file.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.lock().get(name).map(|f| f.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, MemFiles> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn file(&self, name: &str) -> io::Result<Arc<std::sync::Mutex<Vec<u8>>>> {
        self.lock()
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file")))
    }
}

struct MemFile(Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for MemFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl WriteFile for MemFile {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Backend for MemBackend {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.lock().keys().cloned().collect())
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        let bytes = self.file(name)?.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(Box::new(io::Cursor::new(bytes)))
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        Ok(self.file(name)?.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        let f = Arc::new(std::sync::Mutex::new(Vec::new()));
        self.lock().insert(name.to_string(), f.clone());
        Ok(Box::new(MemFile(f)))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        let f = self.file(name)?;
        f.lock().unwrap_or_else(|e| e.into_inner()).truncate(len as usize);
        Ok(Box::new(MemFile(f)))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut files = self.lock();
        let f = files.remove(from).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{from}: no such file"))
        })?;
        files.insert(to.to_string(), f);
        Ok(())
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.lock()
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file")))
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        let f = self.file(name)?;
        f.lock().unwrap_or_else(|e| e.into_inner()).truncate(len as usize);
        Ok(())
    }
    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}
