//! A directory backend for the `bavl-paced` kind of the checkpoint experiment: a file
//! written through it is handed to the disk in slices as it is written
//! (`sync_file_range`), waiting for the slice before the last, so that no more than two
//! slices are ever dirty or in flight, optionally at a bounded rate. Writing a checkpoint
//! through it (with `bavl_store::checkpoint::write`) shows what a store whose checkpoint
//! writer paced itself this way would give, without changing the store: with the plain
//! writer, the whole checkpoint sits in the page cache until its final `fsync`, and the
//! log's `fdatasync` of the blocks committed meanwhile waits behind that burst.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bavl_store::{Backend, WriteFile};

/// A directory (no lock: used by one thread of the benchmark).
pub struct PacedDir {
    dir: PathBuf,
    /// Bytes per slice handed to the disk.
    slice: u64,
    /// Bytes per second at most (0: no bound).
    rate: f64,
}

impl PacedDir {
    pub fn new(dir: PathBuf, slice: u64, rate: f64) -> io::Result<Self> {
        fs::create_dir_all(&dir)?;
        Ok(PacedDir { dir, slice: slice.max(4096), rate })
    }
}

struct PacedFile {
    file: File,
    slice: u64,
    rate: f64,
    written: u64,
    /// Bytes already handed to the disk.
    queued: u64,
    start: Instant,
}

fn sync_range(file: &File, offset: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: plain system call on an open file descriptor.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Write for PacedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        while self.written - self.queued >= self.slice {
            sync_range(&self.file, self.queued, self.slice, libc::SYNC_FILE_RANGE_WRITE)?;
            if self.queued >= self.slice {
                sync_range(
                    &self.file,
                    self.queued - self.slice,
                    self.slice,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                )?;
            }
            self.queued += self.slice;
        }
        if self.rate > 0.0 {
            let due = Duration::from_secs_f64(self.written as f64 / self.rate);
            if let Some(ahead) = due.checked_sub(self.start.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl WriteFile for PacedFile {
    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

impl Backend for PacedDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(self.dir.join(name))?))
    }
    fn file_len(&self, name: &str) -> io::Result<u64> {
        Ok(fs::metadata(self.dir.join(name))?.len())
    }
    fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
        Ok(Box::new(PacedFile {
            file: File::create(self.dir.join(name))?,
            slice: self.slice,
            rate: self.rate,
            written: 0,
            queued: 0,
            start: Instant::now(),
        }))
    }
    fn open_append(&self, name: &str, _len: u64) -> io::Result<Box<dyn WriteFile>> {
        // Checkpoints are only ever created whole.
        Err(io::Error::new(io::ErrorKind::Unsupported, format!("{name}: appending is not paced")))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.dir.join(from), self.dir.join(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.dir.join(name))
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
    fn describe(&self) -> String {
        format!("{} (paced)", self.dir.display())
    }
}
