//! [`MemBackend`]: the store's files in memory, for tests and fuzzing.

use std::io::{self, Read, Write};
use std::sync::Arc;

use crate::backend::{Backend, WriteFile};

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
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = self.file(name)?;
        let data = f.lock().unwrap_or_else(|e| e.into_inner());
        let at = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let src = at
            .checked_add(buf.len())
            .and_then(|end| data.get(at..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// A [`MemBackend`] that records, in order, every operation that changes a file (for the
/// unit tests that check an order of writes, syncs, renames and removals). Entries:
/// `create NAME`, `append NAME`, `write`, `sync`, `rename FROM TO`, `remove NAME`,
/// `shrink NAME MIB`, `sync_dir`.
#[cfg(test)]
pub(crate) struct Recorder {
    pub files: MemBackend,
    pub ops: Arc<std::sync::Mutex<Vec<String>>>,
}

#[cfg(test)]
impl Recorder {
    pub fn new() -> Self {
        Recorder { files: MemBackend::new(), ops: Arc::default() }
    }
    /// The operations recorded so far.
    pub fn ops(&self) -> Vec<String> {
        self.ops.lock().unwrap().clone()
    }
    fn log(&self, op: String) {
        self.ops.lock().unwrap().push(op);
    }
}

#[cfg(test)]
struct RecordedFile(Box<dyn WriteFile>, Arc<std::sync::Mutex<Vec<String>>>);

#[cfg(test)]
impl Write for RecordedFile {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.1.lock().unwrap().push("write".into());
        self.0.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
impl WriteFile for RecordedFile {
    fn sync(&mut self) -> io::Result<()> {
        self.1.lock().unwrap().push("sync".into());
        self.0.sync()
    }
}

#[cfg(test)]
impl Backend for Recorder {
    fn list(&self) -> io::Result<Vec<String>> {
        self.files.list()
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        self.files.open_read(name)
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        self.files.file_len(name)
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        self.log(format!("create {name}"));
        Ok(Box::new(RecordedFile(self.files.create(name)?, self.ops.clone())))
    }
    fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
        self.log(format!("append {name}"));
        Ok(Box::new(RecordedFile(self.files.open_append(name, len)?, self.ops.clone())))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.log(format!("rename {from} {to}"));
        self.files.rename(from, to)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.log(format!("remove {name}"));
        self.files.remove(name)
    }
    fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        self.log(format!("shrink {name} {}", len >> 20));
        self.files.shrink(name, len)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.log("sync_dir".into());
        self.files.sync_dir()
    }
    fn describe(&self) -> String {
        self.files.describe()
    }
}
