//! The files of chunk bodies a paged store reads and appends (`docs/design.md` §8.5.1):
//! durable chunk files of the store, appended through the [`crate::Backend`], and the
//! nameless scratch file of a read-only open; the 64-bit locations that name a record in
//! them; and [`PageSet`], the files by key, through which every body is read back.
//!
//! Guarantees: a record is read only within the bytes appended (or found on disk) so far,
//! every length checked before anything is allocated; a body read is not yet verified
//! (the core verifies it against its page when it is installed).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bavl_core::{Body, PageRef, Snapshot};

use crate::backend::{Backend, WriteFile};
use crate::error::IoContext;
use crate::{durable, StoreError};

/// A file of chunk bodies, shared by the writer (which appends) and the checkpoint
/// thread and readers (which read): a scratch page file, or a durable chunk file.
pub(crate) struct PageFile {
    kind: Kind,
    /// Bytes appended so far: no record may claim to reach beyond.
    end: AtomicU64,
    /// Entries (of all bodies) appended so far, or written before, as a skeleton says.
    entries: AtomicU64,
    name: String,
}

enum Kind {
    /// A nameless file (read-only opens: nothing is written into the store).
    Scratch(File),
    /// `chunks-<id>.bavl` of the store, appended through `writer` while it is open.
    Durable { backend: Arc<dyn Backend>, writer: Mutex<Option<Appender>> },
}

/// Appends to a chunk file gather here and go to the file [`FLUSH_BYTES`] at a time (and
/// when it is sealed). Written one record (about 7.5 KB) per `write`, every call had
/// ext4's delayed allocation zero the part of the page-cache folio it did not cover:
/// 13% of a paged store's CPU at 10M keys went to that `memset`, in the writer's
/// evictions and the checkpoint's appends alike. Nothing is durable before the seal's
/// sync anyway (a crash leaves at most an unnamed chunk file, which opening deletes).
struct Appender {
    file: Box<dyn WriteFile>,
    /// Bytes appended and not yet written to the file; they start at offset `at`.
    buf: Vec<u8>,
    at: u64,
    /// A write failed: part of `buf` may be in the file, so nothing more may be written
    /// (it would land at the wrong offset); what was appended still reads from `buf`.
    failed: bool,
}

/// Bytes gathered before a write to a chunk file.
const FLUSH_BYTES: usize = 1 << 20;

impl Appender {
    fn flush(&mut self) -> std::io::Result<()> {
        if self.failed {
            return Err(std::io::Error::other("an earlier write to this file failed"));
        }
        if !self.buf.is_empty() {
            self.failed = true;
            self.file.write_all(&self.buf)?;
            self.failed = false;
            // Handed to the disk now, not left dirty for the seal's sync: with ext4's
            // ordered data, a log sync meanwhile could wait behind all of it.
            self.file.start_writeback(self.at, self.buf.len() as u64);
            self.at += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Copies into `out` the bytes from offset `off` on that are still gathered here;
    /// returns how many leading bytes of `out` are in the file instead.
    fn read_gathered(&self, out: &mut [u8], off: u64) -> std::io::Result<usize> {
        let end = off + out.len() as u64;
        if end <= self.at {
            return Ok(out.len());
        }
        let from = off.max(self.at);
        let (src, dst) = ((from - self.at) as usize, (from - off) as usize);
        let gathered = self.buf.get(src..src + (end - from) as usize).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "past the bytes appended")
        })?;
        out[dst..].copy_from_slice(gathered);
        Ok(dst)
    }
}

impl PageFile {
    /// A nameless file in `dir`.
    pub(crate) fn create(dir: &Path) -> Result<Arc<PageFile>, StoreError> {
        let file =
            anonymous_file(dir).ctx(|| format!("creating a page file in {}", dir.display()))?;
        let name = format!("the page file in {}", dir.display());
        let (end, entries) = (AtomicU64::new(0), AtomicU64::new(0));
        Ok(Arc::new(PageFile { kind: Kind::Scratch(file), end, entries, name }))
    }

    /// A new chunk file `id` of the store, its header written (not synced: the checkpoint
    /// that names its records syncs it first).
    pub(crate) fn create_durable(
        backend: &Arc<dyn Backend>,
        id: u64,
    ) -> Result<Arc<PageFile>, StoreError> {
        let name = crate::meta::chunk_file_name(id);
        let file = backend.create(&name).ctx(|| format!("creating {name}"))?;
        let header = durable::chunk_file_header(id);
        let mut buf = Vec::with_capacity(FLUSH_BYTES + (16 << 10));
        buf.extend_from_slice(&header);
        let writer = Mutex::new(Some(Appender { file, buf, at: 0, failed: false }));
        let kind = Kind::Durable { backend: backend.clone(), writer };
        let (end, entries) = (AtomicU64::new(header.len() as u64), AtomicU64::new(0));
        Ok(Arc::new(PageFile { kind, end, entries, name }))
    }

    /// The existing chunk file `id`, cut to its first `len` bytes (what a record names
    /// as durable; anything after is an unnamed tail) and reopened for appending after
    /// them, `entries` entries written to it so far (an ingest resumed, `ingest.rs`).
    pub(crate) fn reopen_durable(
        backend: &Arc<dyn Backend>,
        id: u64,
        len: u64,
        entries: u64,
    ) -> Result<Arc<PageFile>, StoreError> {
        let name = crate::meta::chunk_file_name(id);
        let file = backend.open_append(&name, len).ctx(|| format!("reopening {name}"))?;
        let buf = Vec::with_capacity(FLUSH_BYTES + (16 << 10));
        let writer = Mutex::new(Some(Appender { file, buf, at: len, failed: false }));
        let kind = Kind::Durable { backend: backend.clone(), writer };
        let (end, entries) = (AtomicU64::new(len), AtomicU64::new(entries));
        Ok(Arc::new(PageFile { kind, end, entries, name }))
    }

    /// The existing chunk file `id`, `len` bytes long, for reading.
    pub(crate) fn open_durable(backend: &Arc<dyn Backend>, id: u64, len: u64) -> Arc<PageFile> {
        let kind = Kind::Durable { backend: backend.clone(), writer: Mutex::new(None) };
        let name = crate::meta::chunk_file_name(id);
        Arc::new(PageFile { kind, end: AtomicU64::new(len), entries: AtomicU64::new(0), name })
    }

    pub(crate) fn name(&self) -> String {
        self.name.clone()
    }

    /// Appends a record; returns its offset.
    pub(crate) fn append(&self, body: &[u8]) -> Result<u64, StoreError> {
        let len = (body.len() as u32).to_le_bytes();
        let at = match &self.kind {
            Kind::Scratch(file) => {
                use std::os::unix::fs::FileExt;
                let mut rec = Vec::with_capacity(body.len() + 4);
                rec.extend_from_slice(&len);
                rec.extend_from_slice(body);
                let at = self.end.load(Ordering::Acquire);
                file.write_all_at(&rec, at).ctx(|| format!("writing {}", self.name))?;
                at
            }
            Kind::Durable { writer, .. } => {
                let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
                let at = self.end.load(Ordering::Acquire);
                let Some(a) = w.as_mut().filter(|a| !a.failed) else {
                    return Err(StoreError::Poisoned(format!("{} is sealed or failed", self.name)));
                };
                a.buf.extend_from_slice(&len);
                a.buf.extend_from_slice(body);
                if a.buf.len() >= FLUSH_BYTES {
                    a.flush().ctx(|| format!("writing {}", self.name))?;
                }
                at
            }
        };
        self.end.store(at + 4 + body.len() as u64, Ordering::Release);
        self.entries.fetch_add(leading_varint(body), Ordering::Relaxed);
        Ok(at)
    }

    /// Makes every record appended so far durable and closes the file for appending.
    pub(crate) fn seal(&self) -> Result<(), StoreError> {
        if let Kind::Durable { writer, .. } = &self.kind {
            let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = w.as_mut() {
                a.flush().ctx(|| format!("writing {}", self.name))?;
                a.file.sync().ctx(|| format!("syncing {}", self.name))?;
            }
            *w = None;
        }
        Ok(())
    }

    /// Makes every record appended so far durable (`fdatasync`), keeping the file open
    /// for appending. A failed write ends the file for appending, as in `append`.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        if let Kind::Durable { writer, .. } = &self.kind {
            let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
            let Some(a) = w.as_mut() else {
                return Err(StoreError::Poisoned(format!("{} is sealed", self.name)));
            };
            a.flush().ctx(|| format!("writing {}", self.name))?;
            // After a failed sync the page cache no longer says what is on disk.
            a.failed = true;
            a.file.sync().ctx(|| format!("syncing {}", self.name))?;
            a.failed = false;
        }
        Ok(())
    }

    /// The scratch file itself (tests damage it).
    #[cfg(test)]
    pub(crate) fn scratch(&self) -> &File {
        match &self.kind {
            Kind::Scratch(f) => f,
            Kind::Durable { .. } => panic!("not a scratch file"),
        }
    }

    /// Entries written to the file (a compaction's measure of how much of it is dead).
    pub(crate) fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Records that `n` entries were written to the file before it was opened.
    pub(crate) fn set_entries(&self, n: u64) {
        self.entries.fetch_max(n, Ordering::Relaxed);
    }

    /// Bytes appended so far.
    pub(crate) fn len(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// Reads the body of the record at `at`, bounds checked against the file.
    pub(crate) fn read_raw(&self, at: u64) -> Result<Vec<u8>, StoreError> {
        let end = self.end.load(Ordering::Acquire);
        match &self.kind {
            Kind::Scratch(file) => {
                use std::os::unix::fs::FileExt;
                durable::read_record(&self.name, end, at, |buf, off| file.read_exact_at(buf, off))
            }
            Kind::Durable { backend, writer } => {
                let name = &self.name;
                durable::read_record(name, end, at, |buf, off| {
                    // The bytes still gathered for appending are read from memory; those
                    // below them are in the file (a flush only moves that boundary up).
                    let w = writer.lock().unwrap_or_else(|p| p.into_inner());
                    let in_file = match w.as_ref() {
                        Some(a) => a.read_gathered(buf, off)?,
                        None => buf.len(),
                    };
                    drop(w);
                    match in_file {
                        0 => Ok(()),
                        n => backend.read_at(name, off, &mut buf[..n]),
                    }
                })
            }
        }
    }
}

/// The entry count a body starts with (0 if it does not decode).
fn leading_varint(body: &[u8]) -> u64 {
    let mut n = 0u64;
    for (i, b) in body.iter().take(10).enumerate() {
        n |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return n;
        }
    }
    0
}

/// The bits of a location that hold its offset (plus one).
const OFFSET_BITS: u32 = 40;
/// The key of a durable chunk file: this bit, or its number (scratch files are below).
pub(crate) const DURABLE_KEY: u32 = 1 << 23;

/// Splits a location into its file key and offset.
pub(crate) fn split_loc(loc: u64) -> (u32, u64) {
    ((loc >> OFFSET_BITS) as u32, (loc & ((1 << OFFSET_BITS) - 1)).saturating_sub(1))
}

/// The location of offset `at` in the file of key `key`.
pub(crate) fn make_loc(key: u32, at: u64) -> u64 {
    (key as u64) << OFFSET_BITS | (at + 1)
}

/// The key of chunk file `id`.
pub(crate) fn durable_key(id: u64) -> u32 {
    DURABLE_KEY | (id as u32 & (DURABLE_KEY - 1))
}

/// The chunk file a location names, if it names one.
pub(crate) fn durable_id(loc: u64) -> Option<u64> {
    let key = split_loc(loc).0;
    (key & DURABLE_KEY != 0 && key < 2 * DURABLE_KEY).then_some((key & (DURABLE_KEY - 1)) as u64)
}

/// The page files by key: what a reader needs to find any page a version names.
#[derive(Clone, Default)]
pub(crate) struct PageSet(pub(crate) std::collections::BTreeMap<u32, Arc<PageFile>>);

impl PageSet {
    fn file(&self, loc: u64) -> Result<(&PageFile, u64), StoreError> {
        let (key, at) = split_loc(loc);
        match self.0.get(&key) {
            Some(f) => Ok((f, at)),
            None => Err(StoreError::corrupted(
                "the page files",
                at,
                format!("no page file of key {key} (retired: was the version pruned?)"),
            )),
        }
    }

    /// Reads and decodes the body of `page` (verified by the core when it is installed).
    pub(crate) fn read(&self, page: &PageRef) -> Result<Body, StoreError> {
        let (f, at) = self.file(page.loc)?;
        let body = f.read_raw(at)?;
        Body::decode(&body).map_err(|e| {
            StoreError::corrupted(&f.name(), at, format!("undecodable chunk body: {e}"))
        })
    }

    /// The name of the file `loc` is in, for messages.
    pub(crate) fn name_of(&self, loc: u64) -> String {
        self.file(loc).map_or_else(|_| "the page files".into(), |(f, _)| f.name())
    }

    /// `snap` with the bodies of `pages` resident, each verified against its page.
    pub(crate) fn materialize(
        &self,
        snap: &Snapshot,
        pages: &[PageRef],
    ) -> Result<Snapshot, StoreError> {
        let mut bodies = Vec::with_capacity(pages.len());
        for p in pages {
            bodies.push((p.index, self.read(p)?));
        }
        snap.with_bodies(bodies).map_err(|e| {
            let index = match &e {
                bavl_core::PageError::NotAbsent { index }
                | bavl_core::PageError::Mismatch { index, .. } => *index,
            };
            match pages.iter().find(|p| p.index == index) {
                Some(p) => {
                    StoreError::corrupted(&self.name_of(p.loc), split_loc(p.loc).1, e.to_string())
                }
                None => StoreError::corrupted("the page files", 0, e.to_string()),
            }
        })
    }
}

#[cfg(target_os = "linux")]
fn anonymous_file(dir: &Path) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    Ok(File::from(fd))
}

#[cfg(not(target_os = "linux"))]
fn anonymous_file(dir: &Path) -> std::io::Result<File> {
    let path =
        dir.join(format!(".bavl-pages-{}-{:?}", std::process::id(), std::thread::current().id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}
