//! Building a paged store from chunks that arrive in any order (`docs/design.md` §8.8):
//! [`Ingest`], the writer behind a state sync into a store larger than memory.
//!
//! ```text
//! let mut ingest = Ingest::open(dir, root, version, IngestOptions::default())?;
//! for chunk in verified_chunks { ingest.add_verified(chunk)?; }  // any order
//! let (version, root) = ingest.finish()?;
//! let store = Store::open(dir, Options::paged(..))?;              // at `version`, `root`
//! ```
//!
//! Each chunk's body goes to the store's own chunk files as it arrives (gathered and
//! written 1 MiB at a time, as a paged store's evictions are); what stays in memory is its
//! skeleton entry (key-height, hash, entry count, location, first key: about 70 bytes and
//! the first key per chunk). [`Ingest::finish`] links the entries into a tree with
//! [`Tree::from_skeleton`], which checks the trusted root, and writes the skeleton of
//! `version`, `bavl.meta` and `HEAD` exactly as a paged checkpoint of that version would:
//! the store then opens at `version` with no replay and goes on as any paged store.
//!
//! Guarantees:
//! - **A directory holding an unfinished ingest never opens as a store**: its journal,
//!   `ingest.bavl`, is the first file written and the last removed (after the skeleton,
//!   `bavl.meta` and `HEAD` are in place and synced), and [`crate::Store::open`] refuses a
//!   directory holding it ([`StoreError::UnfinishedIngest`]).
//! - **Resumable after a kill at any moment**: a chunk's journal record is appended only
//!   after the chunk file bytes it names are `fdatasync`ed ([`Ingest::flush`], also called
//!   every [`IngestOptions::flush_bytes`] of bodies), and the journal is synced after it.
//!   Reopening with the same root and version reads the journal defensively (every frame's
//!   checksum and bounds; a torn tail is dropped, anything else damaged is `Corrupted`)
//!   and goes on: no chunk flushed is needed again ([`Ingest::missing`]).
//! - A failed write or sync (a full disk) is returned by the call that met it and ends
//!   this writer (every later call fails); what was flushed before stays resumable.
//!
//! A directory that already holds a store is refused (`InvalidOption`, "already holds"):
//! a caller resuming after a kill that may have come after `finish` tries
//! [`crate::Store::open`] first (which refuses an unfinished ingest, and opens a finished
//! one).
//!
//! The caller guarantees that every chunk given was verified against the root
//! ([`bavl_core::verify_chunk`] gives nothing else); the root check of `finish` catches a
//! chunk of another tree anyway, but only at the end.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use bavl_core::{Digest, SkeletonEntry, Snapshot, Tree, VerifiedChunk, MAX_HEIGHT, MAX_KEY_LEN};

use crate::backend::{Backend, DirBackend, WriteFile};
use crate::checkpoint::Header;
use crate::durable::{self, encode_entry, encode_header, END_MAGIC, SKEL_HEADER_LEN};
use crate::error::{IoContext, StoreError};
use crate::meta::{self, chunk_file_name, classify, skeleton_name, FileKind, TMP_SUFFIX};
use crate::pagefile::PageFile;
use crate::paging::{durable_id, durable_key, make_loc, split_loc};

/// The journal of an unfinished ingest (or import). Its presence makes a directory
/// refuse to open as a store.
pub const JOURNAL_FILE: &str = "ingest.bavl";

const JOURNAL_MAGIC: &[u8; 8] = b"BAVLING1";
/// Journal header: magic, mode, version, root, CRC-32.
pub(crate) const JOURNAL_HEADER_LEN: usize = 8 + 1 + 8 + 32 + 4;
/// An ingest of chunks of a known root: resumable.
const MODE_CHUNKS: u8 = 1;
/// A bulk import (`import.rs`): its root is known only at the end; not resumable.
pub(crate) const MODE_IMPORT: u8 = 2;
const FRAME_SHAPE: u8 = 1;
const FRAME_CHUNK: u8 = 2;
const SHAPE_LEN: usize = 1 + 8 + 4;
/// A chunk frame's payload before its first key.
const CHUNK_FIXED: usize = 1 + 8 + 1 + 32 + 4 + 8 + 4 + 2;
const MAX_FRAME: usize = CHUNK_FIXED + MAX_KEY_LEN;
/// Greatest chunk count a journal may claim (the limit of §1 for any count).
const MAX_CHUNKS: u64 = (1 << 48) - 1;
/// A chunk file is not written past this offset (a location holds 40 bits of offset).
const MAX_FILE_BYTES: u64 = (1 << 40) - 1;

/// How an [`Ingest`] writes.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// The capacity of the store when the root is that of an empty tree (which has no
    /// chunk to tell it); otherwise the chunks tell it (the root commits to it).
    pub empty_capacity: u32,
    /// [`Ingest::flush`] is called after this many bytes of bodies (64 MiB): what a kill
    /// can cost to fetch again.
    pub flush_bytes: u64,
    /// A chunk file is ended, and the next one started, before it would exceed this many
    /// bytes (at most, and by default, 1 TiB, the reach of a location).
    pub chunk_file_bytes: u64,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            empty_capacity: bavl_core::DEFAULT_CAPACITY,
            flush_bytes: 64 << 20,
            chunk_file_bytes: MAX_FILE_BYTES,
        }
    }
}

/// Builds a new paged store from verified chunks arriving in any order, keeping only
/// their skeleton in memory. See the module documentation.
pub struct Ingest {
    w: Writer,
    root: Digest,
    version: u64,
    empty_capacity: u32,
    /// Chunk count and capacity, from the first chunk (the root commits to both).
    shape: Option<(u64, u32)>,
    entries: Vec<Option<SkeletonEntry>>,
    received: u64,
    resumed: u64,
}

impl Ingest {
    /// Starts a store of version `version` whose root is `root` in `dir` (created if
    /// missing; it must be empty), or resumes the unfinished ingest of the same root and
    /// version that `dir` holds. The directory is locked as a store's is.
    pub fn open(
        dir: &Path,
        root: Digest,
        version: u64,
        opts: IngestOptions,
    ) -> Result<Ingest, StoreError> {
        let backend =
            DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        Ingest::open_backend(Arc::new(backend), root, version, opts)
    }

    /// [`Ingest::open`] on any backend.
    pub fn open_backend(
        backend: Arc<dyn Backend>,
        root: Digest,
        version: u64,
        opts: IngestOptions,
    ) -> Result<Ingest, StoreError> {
        let names = backend.list().ctx(|| format!("listing {}", backend.describe()))?;
        if !names.iter().any(|n| n == JOURNAL_FILE) {
            check_empty(&*backend, &names)?;
            let w = Writer::create(backend, MODE_CHUNKS, version, &root, &opts)?;
            let entries = Vec::new();
            let empty_capacity = opts.empty_capacity;
            let (shape, received, resumed) = (None, 0, 0);
            return Ok(Ingest {
                w,
                root,
                version,
                empty_capacity,
                shape,
                entries,
                received,
                resumed,
            });
        }
        let j = read_journal(&*backend)?;
        if j.mode != MODE_CHUNKS {
            return Err(StoreError::UnfinishedIngest(format!(
                "{} holds an interrupted bulk import, which cannot be resumed: delete the \
                 directory",
                backend.describe()
            )));
        }
        if j.root != root || j.version != version {
            return Err(StoreError::InvalidOption(format!(
                "{} holds an unfinished ingest of version {} with root {}, not version \
                 {version} with root {}: finish that one or delete the directory",
                backend.describe(),
                j.version,
                hex(&j.root),
                hex(&root)
            )));
        }
        let received = j.entries.iter().flatten().count() as u64;
        let w = Writer::resume(backend, &names, &j, &opts)?;
        let Journal { shape, entries, .. } = j;
        let empty_capacity = opts.empty_capacity;
        Ok(Ingest { w, root, version, empty_capacity, shape, entries, received, resumed: received })
    }

    /// The trusted root.
    pub fn root(&self) -> Digest {
        self.root
    }

    /// The version the store will open at.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The number of chunks of the state, once a chunk has been added (in this run or
    /// one resumed).
    pub fn chunk_count(&self) -> Option<u64> {
        self.shape.map(|(c, _)| c)
    }

    /// The chunk capacity of the state, once a chunk has been added (in this run or one
    /// resumed).
    pub fn capacity(&self) -> Option<u32> {
        self.shape.map(|(_, c)| c)
    }

    /// Chunks held (added and not lost: flushed ones survive a kill).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Chunks found in the journal when this ingest was resumed.
    pub fn resumed(&self) -> u64 {
        self.resumed
    }

    /// Whether chunk `index` is held.
    pub fn have(&self, index: u64) -> bool {
        usize::try_from(index).ok().and_then(|i| self.entries.get(i)).is_some_and(Option::is_some)
    }

    /// The chunks not held yet, in index order (none known before the first chunk).
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().enumerate().filter(|(_, e)| e.is_none()).map(|(i, _)| i as u64)
    }

    /// Whether every chunk is held.
    pub fn is_complete(&self) -> bool {
        self.shape.is_some_and(|(c, _)| c == self.received)
    }

    /// Appends `chunk`'s body to the chunk file and keeps its skeleton entry. Returns
    /// false, changing nothing, for a chunk already held. A chunk verified against
    /// another root, or whose chunk count or capacity differs from the first one's, is
    /// refused (`InvalidOption`) and changes nothing.
    pub fn add_verified(&mut self, chunk: VerifiedChunk) -> Result<bool, StoreError> {
        self.w.usable()?;
        if chunk.root != self.root {
            return Err(StoreError::InvalidOption(format!(
                "chunk {} was verified against another root",
                chunk.index
            )));
        }
        let (count, capacity) = (chunk.chunk_count, chunk.capacity);
        match self.shape {
            Some(s) if s != (count, capacity) => {
                return Err(StoreError::InvalidOption(format!(
                    "chunk {} belongs to a tree of {count} chunks of capacity {capacity}, \
                     not {} of {}",
                    chunk.index, s.0, s.1
                )))
            }
            Some(_) => {}
            None => {
                let mut entries = Vec::new();
                entries.try_reserve_exact(count as usize).map_err(|_| {
                    StoreError::Exhausted(format!("no memory for the skeleton of {count} chunks"))
                })?;
                entries.resize(count as usize, None);
                self.entries = entries;
                self.shape = Some((count, capacity));
                self.w.pending.extend_from_slice(&shape_frame(count, capacity));
            }
        }
        if self.have(chunk.index) {
            return Ok(false);
        }
        let index = chunk.index;
        let (mut entry, body) = chunk.into_skeleton::<bavl_core::Sha256>();
        entry.loc = self.w.append(&body, entry.len)?;
        self.w.pending.extend_from_slice(&chunk_frame(index, &entry, body.len()));
        self.entries[index as usize] = Some(entry);
        self.received += 1;
        self.w.maybe_flush()?;
        Ok(true)
    }

    /// Makes every chunk added so far durable, so that a resumed ingest has it: the chunk
    /// file is synced, then their journal records are appended and synced.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.w.flush()
    }

    /// Checks that every chunk is held, links the skeleton (its root must be the trusted
    /// root) and installs the store: `bavl.meta`, the skeleton of the version, `HEAD`,
    /// and last the journal is removed. Returns the version and root the store opens at.
    pub fn finish(mut self) -> Result<(u64, Digest), StoreError> {
        self.w.flush()?;
        let (count, capacity) = self.shape.unwrap_or((0, self.empty_capacity));
        if self.received != count {
            let first = self.missing().next().unwrap_or(0);
            return Err(StoreError::IngestIncomplete {
                missing: count - self.received,
                count,
                first,
            });
        }
        if self.shape.is_none() {
            let empty = Tree::with_capacity(capacity).map(|mut t| t.root_hash());
            if empty.ok() != Some(self.root) {
                return Err(StoreError::InvalidOption(format!(
                    "no chunk was added, and the root is not that of an empty tree of \
                     capacity {capacity} (IngestOptions::empty_capacity)"
                )));
            }
        }
        let entries = std::mem::take(&mut self.entries).into_iter().flatten();
        let tree = Tree::from_skeleton(capacity, self.root, entries).map_err(|e| {
            StoreError::corrupted(JOURNAL_FILE, 0, format!("the chunks do not give the root: {e}"))
        })?;
        self.w.install(self.version, tree)?;
        Ok((self.version, self.root))
    }
}

/// Refuses a directory that holds anything but an ingest's own temporaries.
pub(crate) fn check_empty(backend: &dyn Backend, names: &[String]) -> Result<(), StoreError> {
    if names.iter().any(|n| n == JOURNAL_FILE) {
        return Err(refusal(backend));
    }
    let theirs: Vec<&String> = names
        .iter()
        .filter(|n| !is_ingest_temporary(n) && *n != crate::backend::LOCK_FILE)
        .collect();
    if theirs.is_empty() {
        return Ok(());
    }
    let store = theirs.iter().any(|n| !matches!(classify(n), FileKind::Unknown));
    Err(StoreError::InvalidOption(format!(
        "{} {}: refusing to build a store there",
        backend.describe(),
        if store { "already holds (part of) a store" } else { "is not empty" }
    )))
}

/// A temporary file an interrupted ingest may leave: its journal's or the files of an
/// interrupted install.
fn is_ingest_temporary(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX).is_some_and(|s| s == JOURNAL_FILE)
}

/// The chunk files and journal of an ingest or an import: bodies appended, journal
/// frames pending until the bytes they name are synced, and the install at the end.
pub(crate) struct Writer {
    backend: Arc<dyn Backend>,
    file_id: u64,
    file: Arc<PageFile>,
    file_limit: u64,
    /// Entries written to each chunk file.
    files: BTreeMap<u64, u64>,
    /// A chunk file was created since the last flush: the directory is synced first.
    new_file: bool,
    journal: Box<dyn WriteFile>,
    /// Journal frames whose bodies are not yet synced.
    pub(crate) pending: Vec<u8>,
    unflushed: u64,
    flush_bytes: u64,
    /// Why this writer refuses to go on (a write or sync failed).
    failed: Option<String>,
}

impl Writer {
    /// A new journal (written atomically) and the first chunk file.
    pub(crate) fn create(
        backend: Arc<dyn Backend>,
        mode: u8,
        version: u64,
        root: &Digest,
        opts: &IngestOptions,
    ) -> Result<Writer, StoreError> {
        meta::write_atomic(&*backend, JOURNAL_FILE, &journal_header(mode, version, root))?;
        let journal = backend
            .open_append(JOURNAL_FILE, JOURNAL_HEADER_LEN as u64)
            .ctx(|| format!("opening {JOURNAL_FILE}"))?;
        let file = PageFile::create_durable(&backend, 0)?;
        Ok(Writer {
            backend,
            file_id: 0,
            file,
            file_limit: opts.chunk_file_bytes.clamp(1 << 20, MAX_FILE_BYTES),
            files: BTreeMap::from([(0, 0)]),
            new_file: true,
            journal,
            pending: Vec::new(),
            unflushed: 0,
            flush_bytes: opts.flush_bytes.max(1),
            failed: None,
        })
    }

    /// The writer of a journal read back: the journal cut to its valid frames, the
    /// newest chunk file it names cut to the records named (a tail never named is
    /// garbage) and reopened for appending, the chunk files it does not name deleted.
    fn resume(
        backend: Arc<dyn Backend>,
        names: &[String],
        j: &Journal,
        opts: &IngestOptions,
    ) -> Result<Writer, StoreError> {
        let mut unnamed = Vec::new();
        for name in names {
            match classify(name) {
                FileKind::Chunks(id) if !j.file_ends.contains_key(&id) => unnamed.push(name),
                FileKind::Chunks(_) => {}
                FileKind::Temporary if is_ingest_temporary(name) => unnamed.push(name),
                _ => {}
            }
        }
        let files: durable::ChunkFiles = j
            .file_ends
            .keys()
            .map(|&id| {
                let name = chunk_file_name(id);
                backend.file_len(&name).ctx(|| format!("reading {name}")).map(|l| (id, l))
            })
            .collect::<Result<_, _>>()?;
        for (id, &end) in &j.file_ends {
            if files[id] < end {
                return Err(StoreError::corrupted(
                    &chunk_file_name(*id),
                    files[id],
                    format!("shorter than the {end} bytes the journal names as synced"),
                ));
            }
        }
        durable::check_chunk_headers(&*backend, &files)?;
        let journal = backend
            .open_append(JOURNAL_FILE, j.valid_len)
            .ctx(|| format!("opening {JOURNAL_FILE}"))?;
        for name in unnamed {
            backend.remove(name).ctx(|| format!("deleting the unnamed {name}"))?;
        }
        let file_limit = opts.chunk_file_bytes.clamp(1 << 20, MAX_FILE_BYTES);
        let (file_id, file, new_file) = match j.file_ends.last_key_value() {
            Some((&id, &end)) => {
                let written = j.file_entries.get(&id).copied().unwrap_or(0);
                (id, PageFile::reopen_durable(&backend, id, end, written)?, false)
            }
            None => (0, PageFile::create_durable(&backend, 0)?, true),
        };
        let mut files = j.file_entries.clone();
        files.entry(file_id).or_insert(0);
        Ok(Writer {
            backend,
            file_id,
            file,
            file_limit,
            files,
            new_file,
            journal,
            pending: Vec::new(),
            unflushed: 0,
            flush_bytes: opts.flush_bytes.max(1),
            failed: None,
        })
    }

    pub(crate) fn usable(&self) -> Result<(), StoreError> {
        match &self.failed {
            Some(why) => Err(StoreError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Records the failure of `r` (this writer is then unusable) and returns it.
    fn check<T>(&mut self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            self.failed.get_or_insert_with(|| e.to_string());
        }
        r
    }

    /// Appends a body of `entries` entries; returns its location. The next chunk file is
    /// started first if this one would grow past its limit.
    pub(crate) fn append(&mut self, body: &[u8], entries: u32) -> Result<u64, StoreError> {
        self.usable()?;
        let r = self.append_inner(body, entries);
        self.check(r)
    }

    fn append_inner(&mut self, body: &[u8], entries: u32) -> Result<u64, StoreError> {
        let end = self.file.len() + 4 + body.len() as u64;
        if end > self.file_limit && self.file.len() > durable::CHUNK_HEADER_LEN {
            // The bodies of the old file are synced before any frame naming them is
            // written, and it is never appended to again.
            self.file.seal()?;
            let id = self.file_id + 1;
            if id >= u64::from(crate::pagefile::DURABLE_KEY) {
                return Err(StoreError::Exhausted(format!("chunk file {id}")));
            }
            self.file = PageFile::create_durable(&self.backend, id)?;
            self.file_id = id;
            self.files.insert(id, 0);
            self.new_file = true;
        }
        let at = self.file.append(body)?;
        *self.files.entry(self.file_id).or_default() += u64::from(entries);
        self.unflushed += body.len() as u64 + 4;
        Ok(make_loc(durable_key(self.file_id), at))
    }

    fn maybe_flush(&mut self) -> Result<(), StoreError> {
        if self.unflushed >= self.flush_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Syncs the chunk file (and the directory, after a new one), then appends the
    /// pending journal frames and syncs the journal.
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        self.usable()?;
        let r = self.flush_inner();
        self.check(r)
    }

    fn flush_inner(&mut self) -> Result<(), StoreError> {
        self.file.sync()?;
        if self.new_file {
            self.backend.sync_dir().ctx(|| "syncing the directory of the chunk files".into())?;
            self.new_file = false;
        }
        self.unflushed = 0;
        if self.pending.is_empty() {
            return Ok(());
        }
        self.journal.write_all(&self.pending).ctx(|| format!("writing {JOURNAL_FILE}"))?;
        self.journal.sync().ctx(|| format!("syncing {JOURNAL_FILE}"))?;
        self.pending.clear();
        Ok(())
    }

    /// Installs `tree` (every chunk absent, located in these chunk files) as the store's
    /// only version, `version`: `bavl.meta`, the skeleton (written from the tree, synced,
    /// renamed into place), `HEAD`, then the journal removed and the directory synced.
    pub(crate) fn install(&mut self, version: u64, mut tree: Tree) -> Result<(), StoreError> {
        self.usable()?;
        let r = self.install_inner(version, &mut tree);
        self.check(r)
    }

    fn install_inner(&mut self, version: u64, tree: &mut Tree) -> Result<(), StoreError> {
        self.file.seal()?;
        let b = &*self.backend;
        meta::write_meta(b, meta::Meta { capacity: tree.capacity() })?;
        let snap = tree.snapshot();
        let name = skeleton_name(version);
        let tmp = format!("{name}{TMP_SUFFIX}");
        write_skeleton(b, &tmp, version, &snap, &self.files)?;
        drop(snap);
        b.rename(&tmp, &name).ctx(|| format!("renaming {tmp} to {name}"))?;
        b.sync_dir().ctx(|| format!("syncing the directory after writing {name}"))?;
        meta::write_head(b, version)?;
        b.remove(JOURNAL_FILE).ctx(|| format!("deleting {JOURNAL_FILE}"))?;
        b.sync_dir().ctx(|| format!("syncing the directory after deleting {JOURNAL_FILE}"))
    }

    /// Deletes every file this writer made (an import that failed or was given up): the
    /// chunk files, what an install wrote, and last the journal.
    pub(crate) fn remove_all(&self) -> Result<(), StoreError> {
        let b = &*self.backend;
        let names = b.list().ctx(|| format!("listing {}", b.describe()))?;
        for name in names {
            let ours = match classify(&name) {
                FileKind::Chunks(_) | FileKind::Meta | FileKind::Head | FileKind::Skeleton(_) => {
                    true
                }
                _ => is_ingest_temporary(&name) || meta::is_own_temporary(&name),
            };
            if ours {
                b.remove(&name).ctx(|| format!("deleting {name}"))?;
            }
        }
        b.sync_dir().ctx(|| format!("syncing {}", b.describe()))?;
        b.remove(JOURNAL_FILE).ctx(|| format!("deleting {JOURNAL_FILE}"))?;
        b.sync_dir().ctx(|| format!("syncing {}", b.describe()))
    }
}

/// Writes the skeleton of `snap` (every chunk located in a chunk file) to `tmp` in the
/// format of `durable.rs`, streaming its entries, and syncs it.
fn write_skeleton(
    b: &dyn Backend,
    tmp: &str,
    version: u64,
    snap: &Snapshot,
    files: &BTreeMap<u64, u64>,
) -> Result<(), StoreError> {
    let header = Header {
        version,
        root: snap.root_hash(),
        capacity: snap.capacity(),
        keys: snap.len(),
        chunks: snap.chunk_count(),
    };
    let mut out = b.create(tmp).ctx(|| format!("creating {tmp}"))?;
    let mut buf = encode_header(&header);
    debug_assert_eq!(buf.len(), SKEL_HEADER_LEN);
    let mut crc = crc32fast::Hasher::new();
    let mut err = None;
    snap.for_each_chunk(|c| {
        if err.is_some() {
            return;
        }
        let start = buf.len();
        let Some(loc) = c.location() else {
            err = Some(StoreError::corrupted(tmp, 0, "a chunk without a location"));
            return;
        };
        encode_entry(&mut buf, &c.skeleton_entry(loc));
        crc.update(&buf[start..]);
        if buf.len() >= 1 << 20 {
            if let Err(e) = out.write_all(&buf) {
                err = Some(StoreError::io(format!("writing {tmp}"), e));
            }
            buf.clear();
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    let start = buf.len();
    buf.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for (&id, &n) in files {
        buf.extend_from_slice(&id.to_le_bytes());
        buf.extend_from_slice(&n.to_le_bytes());
    }
    crc.update(&buf[start..]);
    let t = buf.len();
    buf.extend_from_slice(END_MAGIC);
    buf.extend_from_slice(&header.chunks.to_le_bytes());
    buf.extend_from_slice(&crc.finalize().to_le_bytes());
    let tc = crc32fast::hash(&buf[t..]);
    buf.extend_from_slice(&tc.to_le_bytes());
    out.write_all(&buf).ctx(|| format!("writing {tmp}"))?;
    out.sync().ctx(|| format!("syncing {tmp}"))
}

fn journal_header(mode: u8, version: u64, root: &Digest) -> Vec<u8> {
    let mut h = JOURNAL_MAGIC.to_vec();
    h.push(mode);
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(root);
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(payload);
    let crc = crc32fast::hash(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f
}

fn shape_frame(count: u64, capacity: u32) -> Vec<u8> {
    let mut p = vec![FRAME_SHAPE];
    p.extend_from_slice(&count.to_le_bytes());
    p.extend_from_slice(&capacity.to_le_bytes());
    frame(&p)
}

fn chunk_frame(index: u64, e: &SkeletonEntry, body_len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(CHUNK_FIXED + e.first_key.len());
    p.push(FRAME_CHUNK);
    p.extend_from_slice(&index.to_le_bytes());
    p.push(e.key_height);
    p.extend_from_slice(&e.hash);
    p.extend_from_slice(&e.len.to_le_bytes());
    p.extend_from_slice(&e.loc.to_le_bytes());
    p.extend_from_slice(&(4 + body_len as u32).to_le_bytes());
    p.extend_from_slice(&(e.first_key.len() as u16).to_le_bytes());
    p.extend_from_slice(&e.first_key);
    frame(&p)
}

/// A journal read back.
pub(crate) struct Journal {
    pub mode: u8,
    pub version: u64,
    pub root: Digest,
    shape: Option<(u64, u32)>,
    entries: Vec<Option<SkeletonEntry>>,
    /// Per chunk file named: the end of the last record named.
    file_ends: BTreeMap<u64, u64>,
    /// Per chunk file named: the entries of the records named.
    file_entries: BTreeMap<u64, u64>,
    /// Bytes of the header and the valid frames; a torn tail after them is dropped.
    valid_len: u64,
}

/// Reads just the journal's header (for [`crate::Store::open`]'s refusal, which names
/// what the directory holds).
pub(crate) fn journal_mode(backend: &dyn Backend) -> Result<(u8, u64), StoreError> {
    let mut h = [0u8; JOURNAL_HEADER_LEN];
    let mut r = backend.open_read(JOURNAL_FILE).ctx(|| format!("opening {JOURNAL_FILE}"))?;
    r.read_exact(&mut h).map_err(|_| StoreError::corrupted(JOURNAL_FILE, 0, "no header"))?;
    let (mode, version, _) = decode_journal_header(&h)?;
    Ok((mode, version))
}

fn decode_journal_header(h: &[u8]) -> Result<(u8, u64, Digest), StoreError> {
    let n = JOURNAL_HEADER_LEN;
    if h.len() < n
        || &h[..8] != JOURNAL_MAGIC
        || crc32fast::hash(&h[..n - 4]).to_le_bytes() != h[n - 4..n]
    {
        return Err(StoreError::corrupted(JOURNAL_FILE, 0, "not an ingest journal's header"));
    }
    if !matches!(h[8], MODE_CHUNKS | MODE_IMPORT) {
        return Err(StoreError::corrupted(JOURNAL_FILE, 8, format!("unknown mode {}", h[8])));
    }
    let version = u64::from_le_bytes(h[9..17].try_into().expect("8"));
    Ok((h[8], version, h[17..49].try_into().expect("32")))
}

/// Reads the journal frame by frame (streaming: it is never held whole), checking every
/// checksum and bound. A frame cut short by the end of the file, or failing its checksum
/// where it is the last frame or the rest of the file is zeros, is a torn tail: it and
/// what follows are dropped. Any other damage is `Corrupted`.
fn read_journal(backend: &dyn Backend) -> Result<Journal, StoreError> {
    let len = backend.file_len(JOURNAL_FILE).ctx(|| format!("reading {JOURNAL_FILE}"))?;
    let r = backend.open_read(JOURNAL_FILE).ctx(|| format!("opening {JOURNAL_FILE}"))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, r.take(len));
    let bad = |at: u64, what: String| StoreError::corrupted(JOURNAL_FILE, at, what);
    let mut h = [0u8; JOURNAL_HEADER_LEN];
    if len < JOURNAL_HEADER_LEN as u64 || r.read_exact(&mut h).is_err() {
        return Err(bad(0, "shorter than its header".into()));
    }
    let (mode, version, root) = decode_journal_header(&h)?;
    let mut j = Journal {
        mode,
        version,
        root,
        shape: None,
        entries: Vec::new(),
        file_ends: BTreeMap::new(),
        file_entries: BTreeMap::new(),
        valid_len: JOURNAL_HEADER_LEN as u64,
    };
    let mut frame = Vec::with_capacity(MAX_FRAME + 8);
    loop {
        let at = j.valid_len;
        let left = len - at;
        if left == 0 {
            break;
        }
        let mut lb = [0u8; 4];
        if left < 8 {
            break; // torn
        }
        r.read_exact(&mut lb).ctx(|| format!("reading {JOURNAL_FILE}"))?;
        let flen = u32::from_le_bytes(lb) as u64;
        let whole = 4 + flen + 4;
        if flen == 0 || flen > MAX_FRAME as u64 || whole > left {
            if whole > left && flen <= MAX_FRAME as u64 {
                break; // cut short by the end of the file: torn
            }
            if rest_is_zero(&mut r, &lb)? {
                break;
            }
            return Err(bad(at, format!("a frame length of {flen}")));
        }
        frame.clear();
        frame.extend_from_slice(&lb);
        frame.resize(whole as usize, 0);
        r.read_exact(&mut frame[4..]).ctx(|| format!("reading {JOURNAL_FILE}"))?;
        let (body, crc) = frame.split_at(whole as usize - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            if whole == left || rest_is_zero(&mut r, &frame)? {
                break;
            }
            return Err(bad(at, "a frame's checksum fails".into()));
        }
        j.apply(&body[4..]).map_err(|what| bad(at, what))?;
        j.valid_len += whole;
    }
    Ok(j)
}

/// Whether `seen` and everything left in `r` are zero bytes.
fn rest_is_zero(r: &mut impl Read, seen: &[u8]) -> Result<bool, StoreError> {
    if seen.iter().any(|&b| b != 0) {
        return Ok(false);
    }
    let mut buf = [0u8; 8192];
    loop {
        let n = r.read(&mut buf).ctx(|| format!("reading {JOURNAL_FILE}"))?;
        if n == 0 {
            return Ok(true);
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
}

impl Journal {
    /// Applies one frame's payload (its checksum checked), every field bounded.
    fn apply(&mut self, p: &[u8]) -> Result<(), String> {
        match (p.first(), self.shape) {
            (Some(&FRAME_SHAPE), None) if p.len() == SHAPE_LEN && self.mode == MODE_CHUNKS => {
                let count = u64::from_le_bytes(p[1..9].try_into().expect("8"));
                let capacity = u32::from_le_bytes(p[9..13].try_into().expect("4"));
                if !(1..=MAX_CHUNKS).contains(&count)
                    || !(bavl_core::MIN_CAPACITY..=bavl_core::MAX_CAPACITY).contains(&capacity)
                {
                    return Err(format!("a shape of {count} chunks of capacity {capacity}"));
                }
                let mut entries = Vec::new();
                entries
                    .try_reserve_exact(count as usize)
                    .map_err(|_| format!("no memory for the skeleton of {count} chunks"))?;
                entries.resize(count as usize, None);
                self.entries = entries;
                self.shape = Some((count, capacity));
                Ok(())
            }
            (Some(&FRAME_CHUNK), Some((count, capacity))) if p.len() >= CHUNK_FIXED => {
                self.chunk(p, count, capacity)
            }
            (Some(k), _) => Err(format!("an unexpected frame of kind {k}")),
            (None, _) => Err("an empty frame".into()),
        }
    }

    fn chunk(&mut self, p: &[u8], count: u64, capacity: u32) -> Result<(), String> {
        let u32_at = |o: usize| u32::from_le_bytes(p[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().expect("8"));
        let index = u64_at(1);
        let key_height = p[9];
        let hash: Digest = p[10..42].try_into().expect("32");
        let len = u32_at(42);
        let loc = u64_at(46);
        let rec = u64::from(u32_at(54));
        let klen = u16::from_le_bytes([p[58], p[59]]) as usize;
        let first_key = &p[CHUNK_FIXED..];
        if index >= count {
            return Err(format!("chunk {index} of {count}"));
        }
        if self.entries[index as usize].is_some() {
            return Err(format!("chunk {index} twice"));
        }
        if !(1..=capacity).contains(&len) || key_height > MAX_HEIGHT {
            return Err(format!("chunk {index}: {len} entries at key-height {key_height}"));
        }
        if klen != first_key.len() || !(1..=MAX_KEY_LEN).contains(&klen) {
            return Err(format!("chunk {index}: a first key of {klen} bytes"));
        }
        let (id, at) = (durable_id(loc), split_loc(loc).1);
        let id = id.filter(|&id| make_loc(durable_key(id), at) == loc && loc != 0);
        let end = at.checked_add(rec).filter(|&e| e <= MAX_FILE_BYTES);
        let (Some(id), Some(end)) = (id, end) else {
            return Err(format!("chunk {index}: location {loc:#x}"));
        };
        if at < durable::CHUNK_HEADER_LEN || rec < 5 {
            return Err(format!("chunk {index}: a record of {rec} bytes at {at}"));
        }
        let e = self.file_ends.entry(id).or_default();
        *e = (*e).max(end);
        *self.file_entries.entry(id).or_default() += u64::from(len);
        let first_key = first_key.into();
        self.entries[index as usize] =
            Some(SkeletonEntry { key_height, hash, len, loc, first_key });
        Ok(())
    }
}

fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The error of an open of a directory holding an ingest's journal, naming what it is.
pub(crate) fn refusal(backend: &dyn Backend) -> StoreError {
    let what = match journal_mode(backend) {
        Ok((MODE_IMPORT, v)) => {
            format!("an interrupted bulk import of version {v} (delete the directory)")
        }
        Ok((_, v)) => {
            format!("an unfinished ingest of version {v} (resume it, or delete the directory)")
        }
        Err(e) => {
            format!("an unfinished ingest whose journal is unreadable ({e}; delete the directory)")
        }
    };
    StoreError::UnfinishedIngest(format!("{} is not a store: it holds {what}", backend.describe()))
}
