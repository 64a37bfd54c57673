//! # bavl-store
//!
//! The durable, versioned bavl store: a [`bavl_core::Tree`] whose every `commit()` is a
//! durable, immutable version. Retained versions are [`Snapshot`]s sharing unchanged
//! chunks (copy-on-write), so reading, proving and exporting any of them from other
//! threads costs O(1) to start and never pauses commits.
//!
//! On disk (a [`Backend`], by default a directory):
//! - a **write-ahead log** with one record per version — that version's operations and
//!   its root — appended and `fdatasync`ed before `commit()` returns, so a random update
//!   writes about the size of the key and value, not whole chunks;
//! - **checkpoints**: the newest version written whole, as its self-verifiable chunks, by
//!   a background thread from an O(1) snapshot while blocks keep committing. Once no
//!   retained version is older, a finished checkpoint lets the files before it be deleted.
//!
//! Opening reads the newest checkpoint, or the one before it if its log still reaches the
//! newest one and so rebuilds more of the retained versions (verifying every chunk against
//! its root), replays the log after it (checking every recorded root), discards a record
//! cut short by a crash, and reports any other damage as [`StoreError::Corrupted`] (a
//! required file missing or cut short too, named). Memory is bounded by default: the
//! tree's skeleton (about 4.4 bytes a key) and at most [`Options::cache_bytes`] of chunk
//! bodies ([`DEFAULT_CACHE_BYTES`], 256 MiB), the rest paged out to the store's chunk
//! files and read back, verified, as operations need them; the budget holds within a
//! block and within a version replayed on open, not only after a commit, so neither the
//! state's size nor one block's can grow the process. A paged store's checkpoints are
//! incremental (the new bodies and a skeleton of the version) and opening reads the
//! skeleton, not the state (`docs/design.md` §8.5.1). [`Options::in_memory`] opts out:
//! the whole state in memory, whole checkpoints. The directory itself is
//! locked: exclusively by a writer, which stops writing if the path stops naming it,
//! shared by [`Options::read_only`] readers, which change nothing on disk. Only an empty
//! directory becomes a new store. Formats and reasons: `docs/design.md` §8.
//!
//! A new paged store can also be built from outside without holding the state: [`Ingest`]
//! from verified chunks in any order (a state sync; resumable after a kill), and
//! [`import`] from a stream of key-value pairs, sorted or not (§8.8, §8.9).
//!
//! ```
//! use bavl_store::{Options, Store};
//! let dir = std::env::temp_dir().join(format!("bavl-doc-{}", std::process::id()));
//! let mut store = Store::open(&dir, Options::default())?;
//! store.insert(b"alice", b"10")?;
//! let (v1, root1) = store.commit()?;
//! store.insert(b"alice", b"7")?;
//! store.commit()?;
//! // Version 1 is still readable, and provable against its root.
//! let old = store.snapshot(v1)?;
//! assert_eq!(old.get(b"alice"), Ok(Some(&b"10"[..])));
//! let proof = old.prove_membership(b"alice").unwrap();
//! bavl_core::verify_membership::<bavl_core::Sha256>(&root1, b"alice", b"10", &proof).unwrap();
//! drop(store);
//! let mut store = Store::open(&dir, Options::default())?; // the same versions come back
//! assert_eq!(store.get(b"alice")?, Some(&b"7"[..]));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), bavl_store::StoreError>(())
//! ```
#![forbid(unsafe_code)]

pub mod backend;
mod blame;
pub mod check;
pub mod checkpoint;
mod cleanup;
mod compact;
mod create;
mod durable;
mod error;
mod evict;
pub mod import;
mod ingest;
mod job;
mod listing;
mod memory;
pub mod meta;
mod open;
mod options;
pub mod pace;
mod pagefile;
mod paging;
mod prefetch;
mod readpool;
mod reopen;
mod skel_write;
mod slack;
pub mod wal;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub use backend::{Backend, DirBackend, FaultyBackend, WriteFile};
use bavl_core::{Digest, Snapshot, Tree};
pub use checkpoint::CheckpointReport;
use cleanup::delete_obsolete;
use error::IoContext;
pub use error::StoreError;
pub use ingest::{Ingest, IngestOptions, JOURNAL_FILE};
use job::Job;
pub use memory::MemBackend;
pub use meta::write_file_atomic;
pub use open::Recovery;
use options::Reclaimer;
pub use options::{
    CheckpointPolicy, CommitTiming, Options, Reclaim, StoreStats, DEFAULT_CACHE_BYTES,
};
use pace::Activity;
pub use pace::CheckpointPace;
use paging::Pager;
pub use paging::{OwnedEntry, PageLoader, PagingStats};
pub use prefetch::PREFETCH_THREADS;
pub use slack::MAX_FACTOR as MAX_SLACK_FACTOR;

/// A durable, versioned key-value store. See the crate documentation.
pub struct Store {
    backend: Arc<dyn Backend>,
    opts: Options,
    tree: Tree,
    head: u64,
    head_root: Digest,
    versions: BTreeMap<u64, Snapshot>,
    record: wal::RecordBuf,
    wal: Box<dyn WriteFile>,
    wal_first: u64,
    log_since_checkpoint: u64,
    last_checkpoint: Option<(u64, u64)>,
    last_report: Option<CheckpointReport>,
    job: Option<Job>,
    /// A checkpoint whose older files are still on disk: deleted at the first commit at
    /// which no retained version is older than it.
    pending_cleanup: Option<u64>,
    /// The chunk files that cleanup keeps.
    cleanup_keep: durable::ChunkKeep,
    poisoned: Option<String>,
    /// `HEAD`, shared with the checkpoint thread, and when this thread last moved it.
    head_mark: Arc<meta::HeadMark>,
    head_written_at: Instant,
    timing: CommitTiming,
    stats: StoreStats,
    recovery: Recovery,
    reclaimer: Reclaimer,
    activity: Arc<Activity>,
    /// The page file and cache budget, when paging is on.
    pager: Option<Pager>,
}

impl Store {
    /// Opens the store in directory `dir`, creating it if it does not exist (unless
    /// [`Options::read_only`]). Only an empty directory becomes a new store: one holding
    /// other files is refused untouched.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store, StoreError> {
        let dir = dir.as_ref();
        let backend =
            if opts.read_only { DirBackend::open_read_only(dir) } else { DirBackend::open(dir) };
        let backend = backend.ctx(|| format!("opening the store at {}", dir.display()))?;
        let mut opts = opts;
        // A read-only open writes nothing into the store's directory, not even there.
        if opts.cache_bytes.is_some() && opts.page_dir.is_none() && !opts.read_only {
            opts.page_dir = Some(dir.to_path_buf());
        }
        Self::open_backend(Arc::new(backend), opts)
    }

    /// Opens a store on any backend (for example a [`FaultyBackend`]).
    pub fn open_backend(backend: Arc<dyn Backend>, opts: Options) -> Result<Store, StoreError> {
        let mut opts = opts;
        opts.checkpoint = opts.checkpoint.resolve(opts.cache_bytes.is_some());
        if opts.keep_recent == 0 {
            return Err(StoreError::InvalidOption("keep_recent must be at least 1".into()));
        }
        let mut pager = Pager::for_options(&opts)?;
        if let Some(p) = &mut pager {
            p.backend = Some(backend.clone());
        }
        let older = pager.is_none();
        let o = open::recover(&*backend, &opts, opts.read_only, pager.as_mut(), older)?;
        let wal = o.wal.unwrap_or_else(|| Box::new(ReadOnlyFile));
        let temporary = o.temporary;
        let mut store = Store {
            backend,
            tree: o.tree,
            head: o.head,
            head_root: o.head_root,
            versions: o.versions,
            record: wal::RecordBuf::default(),
            wal,
            wal_first: o.wal_first,
            log_since_checkpoint: o.log_since_checkpoint,
            last_checkpoint: o.last_checkpoint,
            last_report: None,
            job: None,
            pending_cleanup: o.last_checkpoint.map(|(v, _)| v),
            cleanup_keep: o.chunk_keep.clone(),
            poisoned: None,
            head_mark: Arc::new(meta::HeadMark::new(o.recovery.head_file.unwrap_or(0))),
            head_written_at: Instant::now(),
            timing: CommitTiming::default(),
            stats: StoreStats::default(),
            recovery: o.recovery,
            reclaimer: Reclaimer::start(opts.reclaim),
            activity: Activity::new(),
            opts,
            pager,
        };
        store.retain();
        if let Some(p) = &mut store.pager {
            store.tree.root_hash();
            p.evict(&mut store.tree)?;
        }
        if !store.opts.read_only {
            // What a crash left of a cleanup goes now, while its renamed files still show
            // that it was one (`bavl check` reports such files as damage otherwise): the
            // files older than the checkpoint the state came from, then those the newest
            // checkpoint replaces if no retained version needs them; then the
            // temporaries, the store's own only.
            if let Some(base) = store.recovery.checkpoint {
                delete_obsolete(&*store.backend, base, &store.cleanup_keep, None)?;
            }
            store.clean_up()?;
            for name in &temporary {
                match store.backend.remove(name) {
                    // Replaced since the listing (`bavl.meta.tmp` by a new store's metadata).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    r => r.ctx(|| format!("deleting the left-over {name}"))?,
                }
            }
        }
        Ok(store)
    }

    /// What opening found and did.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The last committed version (0 for a new store).
    pub fn version(&self) -> u64 {
        self.head
    }

    /// The root of the last committed version.
    pub fn root(&self) -> Digest {
        self.head_root
    }

    /// The chunk capacity of the store.
    pub fn capacity(&self) -> u32 {
        self.tree.capacity()
    }

    /// The working state, read-only (for iteration; on a paged store a range that meets
    /// a chunk not in memory is an error naming it, and [`Store::seek`] loads).
    pub fn working(&self) -> &Tree {
        &self.tree
    }

    /// Rehashes what changed since the last commit and returns the working state's root:
    /// the root the next [`Store::commit`] will record if nothing else changes (a
    /// CometBFT application returns it from `FinalizeBlock`, before `Commit` makes it
    /// durable). The hashes stay cached, so the commit does not hash them again.
    pub fn working_root(&mut self) -> Digest {
        self.tree.root_hash()
    }

    /// Inserts or replaces `key`; true if the key is new. Durable at the next commit.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        self.writable()?;
        self.record.check_room(key, value.len())?;
        if let Some(p) = &mut self.pager {
            // Bounded within the block too, not only after the commit (design §8.5.1).
            p.relieve(&mut self.tree, &mut self.versions)?;
            if self.tree.is_paged() {
                let needs = self.tree.absent_for_insert(key);
                p.load(&mut self.tree, needs)?;
            }
            p.note_op((key.len() + value.len()) as u64);
        }
        let new = self.tree.insert(key, value)?;
        self.record.put(key, value);
        self.activity.touch();
        Ok(new)
    }

    /// Removes `key`, returning its value. Durable at the next commit.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.writable()?;
        self.record.check_room(key, 0)?;
        if let Some(p) = &mut self.pager {
            p.relieve(&mut self.tree, &mut self.versions)?;
            if self.tree.is_paged() {
                let needs = self.tree.absent_for_remove(key);
                p.load(&mut self.tree, needs)?;
            }
            p.note_op(key.len() as u64);
        }
        let old = self.tree.try_remove(key)?;
        if old.is_some() {
            self.record.delete(key);
        }
        self.activity.touch();
        Ok(old)
    }

    /// Makes the changes since the last commit a new, durable, immutable version and
    /// returns its number and root. When this returns, the version survives a crash.
    pub fn commit(&mut self) -> Result<(u64, Digest), StoreError> {
        self.writable()?;
        self.poll_checkpoint()?;
        let version = self.head + 1;
        let t0 = Instant::now();
        let root = self.tree.root_hash();
        let t1 = Instant::now();
        let ops = self.record.ops();
        let bytes = self.record.seal(version, &root);
        let log_bytes = bytes.len() as u64;
        if let Err(e) = self.wal.write_all(bytes).and_then(|()| self.wal.sync()) {
            let err = StoreError::io(format!("appending version {version} to the log"), e);
            self.poisoned = Some(err.to_string());
            return Err(err);
        }
        self.mark_head(version)?;
        self.timing = CommitTiming { ops, hash: t1 - t0, persist: t1.elapsed(), log_bytes };
        self.record.clear();
        self.stats.log_bytes_written += log_bytes;
        self.stats.ops_committed += ops as u64;
        self.log_since_checkpoint += log_bytes;
        self.activity.logged(log_bytes);
        self.head = version;
        self.head_root = root;
        let paged = self.page_out(version);
        let snap = self.tree.snapshot();
        if let Some(p) = &mut self.pager {
            p.relocate(&mut self.tree, &snap);
        }
        self.versions.insert(version, snap);
        paged?;
        self.retain();
        self.unpin_retained();
        self.clean_up()?;
        if let CheckpointPolicy::Auto { log_ratio, min_log_bytes } = self.opts.checkpoint {
            let last = self.last_checkpoint.map_or(0, |(_, bytes)| bytes);
            let due = (log_ratio * last as f64) as u64;
            if self.job.is_none() && self.log_since_checkpoint >= due.max(min_log_bytes) {
                self.checkpoint()?;
            }
        }
        Ok((version, root))
    }

    /// Records `version`, just made durable, in `HEAD` when [`Options::head_interval`]
    /// has passed since the last time (skipped if the checkpoint thread is writing it).
    fn mark_head(&mut self, version: u64) -> Result<(), StoreError> {
        let Some(every) = self.opts.head_interval else { return Ok(()) };
        if self.head_written_at.elapsed() < every {
            return Ok(());
        }
        match self.head_mark.advance(&*self.backend, version, false) {
            Ok(true) => self.head_written_at = Instant::now(),
            Ok(false) => {}
            Err(e) => {
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Timing of the last commit.
    pub fn last_commit_timing(&self) -> CommitTiming {
        self.timing
    }

    /// The retained version `version`: an O(1) snapshot that other threads may read,
    /// prove and export while commits go on.
    pub fn snapshot(&self, version: u64) -> Result<Snapshot, StoreError> {
        self.versions.get(&version).cloned().ok_or_else(|| StoreError::UnknownVersion {
            version,
            oldest: self.oldest_retained(),
            newest: self.head,
        })
    }

    /// The last committed version as a snapshot.
    pub fn latest(&self) -> Snapshot {
        self.versions[&self.head].clone()
    }

    /// The retained versions, oldest first.
    pub fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        self.versions.keys().copied()
    }

    fn oldest_retained(&self) -> u64 {
        self.versions.keys().next().copied().unwrap_or(self.head)
    }

    /// Drops every retained version older than `version` (never the newest). Their
    /// memory is released, on a background thread, when no snapshot of them is held
    /// elsewhere; their log records are deleted once a later checkpoint finishes.
    pub fn prune(&mut self, version: u64) {
        let keep = version.min(self.head);
        while let Some(entry) = self.versions.first_entry() {
            if *entry.key() >= keep {
                break;
            }
            self.reclaimer.release(entry.remove());
        }
        let oldest = self.oldest_retained();
        if let Some(p) = &mut self.pager {
            p.retire(oldest);
        }
        self.activity.set_oldest(oldest);
    }

    fn retain(&mut self) {
        let floor = self.head.saturating_sub(self.opts.keep_recent - 1);
        self.prune(floor);
    }

    /// Deletes the files a finished checkpoint made obsolete, once no retained version
    /// needs them (normally its thread did; this is for one installed before, when
    /// someone waited for it, and for what a crash or an earlier open left).
    fn clean_up(&mut self) -> Result<(), StoreError> {
        let Some(version) = self.pending_cleanup else { return Ok(()) };
        if self.oldest_retained() < version || self.job.is_some() {
            return Ok(());
        }
        self.pending_cleanup = None;
        delete_obsolete(&*self.backend, version, &self.cleanup_keep, None).inspect_err(|e| {
            self.poisoned = Some(e.to_string());
        })
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.opts.read_only {
            return Err(StoreError::ReadOnly(self.backend.describe()));
        }
        match &self.poisoned {
            Some(why) => Err(StoreError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether the store was opened read-only ([`Options::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// Counters, sizes and the files on disk.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut s = self.stats.clone();
        let tree = self.tree.stats();
        s.head = self.head;
        s.head_root = self.head_root;
        s.oldest_retained = self.oldest_retained();
        s.retained = self.versions.len() as u64;
        s.keys = self.versions[&self.head].len();
        s.chunks = self.versions[&self.head].chunk_count();
        s.capacity = self.tree.capacity();
        s.space_efficiency = tree.space_efficiency();
        s.last_checkpoint = self.last_checkpoint.map(|(v, _)| v);
        s.checkpoint_running = self.job.as_ref().map(|j| j.version);
        s.paging = self.pager.as_ref().map(|p| p.stats);
        let mut names = self.backend.list().ctx(|| "listing the store".into())?;
        names.sort();
        for name in names {
            // A running checkpoint renames and deletes files: one listed a moment ago may
            // be gone (`HEAD.tmp` renamed, an obsolete segment deleted). Not an error.
            let len = match self.backend.file_len(&name) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                r => r.ctx(|| format!("reading {name}"))?,
            };
            s.disk_bytes += len;
            s.files.push((name, len));
        }
        Ok(s)
    }

    /// Waits for a running checkpoint, records the durable head and closes the store.
    /// Dropping the store instead abandons a running checkpoint (which is safe).
    pub fn close(mut self) -> Result<(), StoreError> {
        self.wait_checkpoint()?;
        if self.poisoned.is_none() && !self.opts.read_only {
            self.head_mark.advance(&*self.backend, self.head, true)?;
        }
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            job.stop.store(true, Ordering::Relaxed);
            let _ = job.handle.join();
        }
    }
}

/// The log "file" of a read-only store: every write fails (none is attempted, since
/// [`Store::writable`] refuses first).
struct ReadOnlyFile;

impl std::io::Write for ReadOnlyFile {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::ReadOnlyFilesystem.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl WriteFile for ReadOnlyFile {
    fn sync(&mut self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::ReadOnlyFilesystem.into())
    }
}
