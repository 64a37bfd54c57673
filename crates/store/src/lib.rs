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
//! cut short by a crash, and reports any other damage as [`StoreError::Corrupted`]. The
//! live state and the retained versions are held in memory. Formats and reasons:
//! `docs/design.md` §7.
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
//! assert_eq!(old.get(b"alice"), Some(&b"10"[..]));
//! let proof = old.prove_membership(b"alice").unwrap();
//! bavl_core::verify_membership::<bavl_core::Sha256>(&root1, b"alice", b"10", &proof).unwrap();
//! drop(store);
//! let store = Store::open(&dir, Options::default())?; // the same versions come back
//! assert_eq!(store.get(b"alice"), Some(&b"7"[..]));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), bavl_store::StoreError>(())
//! ```
#![forbid(unsafe_code)]

pub mod backend;
pub mod check;
pub mod checkpoint;
mod error;
pub mod meta;
mod open;
pub mod pace;
pub mod wal;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use backend::{Backend, DirBackend, FaultyBackend, MemBackend, WriteFile};
use bavl_core::{Digest, Snapshot, Tree};
pub use checkpoint::CheckpointReport;
use error::IoContext;
pub use error::StoreError;
use meta::{checkpoint_name, classify, wal_name, FileKind, TMP_SUFFIX};
pub use open::Recovery;
pub use pace::CheckpointPace;
use pace::{Activity, Pacer};

/// When the store writes checkpoints by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckpointPolicy {
    /// Only when [`Store::checkpoint`] is called.
    Manual,
    /// When the log written since the last checkpoint exceeds both `min_log_bytes` and
    /// `log_ratio` times the size of the last checkpoint. The log's disk use and the
    /// replay work on open stay proportional to the state's size.
    Auto { log_ratio: f64, min_log_bytes: u64 },
}

/// Which thread frees the memory of pruned versions (the chunks only they held: about as
/// many as a block touches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// The writer's, inside [`Store::commit`] or [`Store::prune`]. The default: it costs a
    /// few milliseconds per commit and works well on any allocator. Freeing on another
    /// thread halves throughput on glibc's `malloc` (its arenas are locked per free from a
    /// foreign thread): 47k against 24-33k ops/s on Workload B, while on mimalloc the two
    /// are within the noise (95k vs 97k; `docs/design.md` §8.5).
    #[default]
    Inline,
    /// A thread of the store's own: commits never pay for freeing, at the price of the
    /// cross-thread frees. Worth it only with an allocator that frees across threads
    /// cheaply (mimalloc, jemalloc) and a latency budget that counts milliseconds.
    Background,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct Options {
    /// Chunk capacity of a new store (`None`: the default). An existing store keeps its
    /// own; asking for another is an error.
    pub capacity: Option<u32>,
    /// How many of the newest versions stay readable (at least 1).
    pub keep_recent: u64,
    pub checkpoint: CheckpointPolicy,
    /// How fast background checkpoints write (by default spread over the commits, so they
    /// never slow them down in bursts; see [`pace`]).
    pub checkpoint_pace: CheckpointPace,
    /// Where pruned versions are freed (see [`Reclaim`]).
    pub reclaim: Reclaim,
    /// How often a commit also records its version in `HEAD` (`None`: only at
    /// checkpoints and `close`; `Some(ZERO)`: at every commit). A log later found to end
    /// before `HEAD`'s version is reported as damaged, so a cut log can silently lose
    /// only the versions committed since the last update: at most this long of commits
    /// (the last ones before the writer stopped, if it stops without `close`). The
    /// default, 1 s, costs one small atomic file write per second (`docs/design.md` §8.2).
    pub head_interval: Option<Duration>,
    /// Open without changing anything on disk, under a shared lock (any number of
    /// readers, no writer): for checking or reading a backup, a snapshot or a read-only
    /// mount. Every write (`insert`, `remove`, `commit`, `checkpoint`) is refused with
    /// [`StoreError::ReadOnly`]; a record cut short at the end of the log is skipped, not
    /// discarded, and left-over temporary files stay.
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            capacity: None,
            keep_recent: 4,
            checkpoint: CheckpointPolicy::Auto { log_ratio: 1.0, min_log_bytes: 64 << 20 },
            checkpoint_pace: CheckpointPace::default(),
            reclaim: Reclaim::default(),
            head_interval: Some(Duration::from_secs(1)),
            read_only: false,
        }
    }
}

/// Timing of the last commit.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitTiming {
    /// Operations in the version.
    pub ops: u32,
    /// Rehashing the changed part of the tree.
    pub hash: Duration,
    /// Appending the log record and syncing it.
    pub persist: Duration,
    /// Bytes appended to the log.
    pub log_bytes: u64,
}

/// Counters and sizes, for `bavl stats` and the benchmarks.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub head: u64,
    pub head_root: Digest,
    pub oldest_retained: u64,
    pub retained: u64,
    pub keys: u64,
    pub chunks: u64,
    pub capacity: u32,
    pub space_efficiency: f64,
    /// Bytes appended to the log since open.
    pub log_bytes_written: u64,
    /// Bytes of checkpoints written since open.
    pub checkpoint_bytes_written: u64,
    pub checkpoints_written: u64,
    /// Operations committed since open.
    pub ops_committed: u64,
    /// The store's files and their sizes.
    pub files: Vec<(String, u64)>,
    pub disk_bytes: u64,
    /// The newest finished checkpoint's version.
    pub last_checkpoint: Option<u64>,
    pub checkpoint_running: Option<u64>,
}

/// Frees pruned versions: inline, or on a thread of its own ([`Reclaim`]) so releasing the
/// chunks a version alone held never lengthens a commit. The channel is bounded: a commit
/// waits rather than let unreleased versions pile up.
struct Reclaimer {
    tx: Option<std::sync::mpsc::SyncSender<Snapshot>>,
    handle: Option<JoinHandle<()>>,
}

impl Reclaimer {
    fn start(mode: Reclaim) -> Reclaimer {
        if mode == Reclaim::Inline {
            return Reclaimer { tx: None, handle: None };
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<Snapshot>(2);
        let spawned = std::thread::Builder::new()
            .name("bavl-reclaim".into())
            .spawn(move || rx.into_iter().for_each(drop));
        match spawned {
            Ok(handle) => Reclaimer { tx: Some(tx), handle: Some(handle) },
            // No thread: versions are freed inline, as a plain drop would.
            Err(_) => Reclaimer { tx: None, handle: None },
        }
    }

    fn release(&self, snap: Snapshot) {
        if let Some(tx) = &self.tx {
            // A send fails only if the thread is gone; the snapshot then drops here.
            let _ = tx.send(snap);
        }
        // Inline: `snap` drops here.
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct Job {
    version: u64,
    stop: Arc<AtomicBool>,
    /// The report, and whether the files before the checkpoint were deleted.
    handle: JoinHandle<Result<Option<(CheckpointReport, bool)>, StoreError>>,
}

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
    poisoned: Option<String>,
    /// `HEAD`, shared with the checkpoint thread, and when this thread last moved it.
    head_mark: Arc<meta::HeadMark>,
    head_written_at: Instant,
    timing: CommitTiming,
    stats: StoreStats,
    recovery: Recovery,
    reclaimer: Reclaimer,
    activity: Arc<Activity>,
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
        Self::open_backend(Arc::new(backend), opts)
    }

    /// Opens a store on any backend (for example a [`FaultyBackend`]).
    pub fn open_backend(backend: Arc<dyn Backend>, opts: Options) -> Result<Store, StoreError> {
        if opts.keep_recent == 0 {
            return Err(StoreError::InvalidOption("keep_recent must be at least 1".into()));
        }
        let o = open::recover(&*backend, &opts, opts.read_only)?;
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
            poisoned: None,
            head_mark: Arc::new(meta::HeadMark::new(o.recovery.head_file.unwrap_or(0))),
            head_written_at: Instant::now(),
            timing: CommitTiming::default(),
            stats: StoreStats::default(),
            recovery: o.recovery,
            reclaimer: Reclaimer::start(opts.reclaim),
            activity: Activity::new(),
            opts,
        };
        store.retain();
        if !store.opts.read_only {
            // What a crash left of a cleanup goes now, while its renamed files still show
            // that it was one (`bavl check` reports such files as damage otherwise): the
            // files older than the checkpoint the state came from, then those the newest
            // checkpoint replaces if no retained version needs them; then the
            // temporaries, the store's own only.
            if let Some(base) = store.recovery.checkpoint {
                delete_obsolete(&*store.backend, base, None)?;
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

    /// Writes `tree` as a new store at `dir` whose only version is `version` (a state
    /// synced from peers, for example): the metadata, a checkpoint of the tree at
    /// `version` and `HEAD`, each synced, in the formats `Store::open` reads. The store
    /// then opens at `version` with the tree's root, and commits continue at
    /// `version + 1`. `dir` must not hold a store (it may be missing or empty); on error,
    /// what was written is left for the caller to remove (write into a fresh directory
    /// and rename it into place for an atomic result).
    pub fn create_from_tree(
        dir: impl AsRef<Path>,
        tree: &mut Tree,
        version: u64,
    ) -> Result<(), StoreError> {
        let dir = dir.as_ref();
        let backend =
            DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        ensure_no_store(&backend, dir)?;
        meta::write_meta(&backend, meta::Meta { capacity: tree.capacity() })?;
        let never = AtomicBool::new(false);
        checkpoint::write(&backend, version, tree.snapshot(), &never, None)?;
        meta::write_head(&backend, version)
    }

    /// Makes a new store at `dir` whose only version is `version`, from a complete
    /// checkpoint file written elsewhere (by `bavl sync`, which fills one as chunks arrive
    /// and verify, in arrival order): writes the metadata, moves `file` into `dir` as the
    /// checkpoint of `version` (a rename, or a copy across file systems), then `HEAD`,
    /// each synced. Only the file's header is read here (it must be a checkpoint of
    /// `version`); the caller vouches for the chunks, and `Store::open` verifies every one
    /// against the header's root anyway. `dir` must not hold a store; on error, what was
    /// written is left for the caller to remove.
    pub fn adopt_checkpoint(
        dir: impl AsRef<Path>,
        file: impl AsRef<Path>,
        version: u64,
    ) -> Result<(), StoreError> {
        let (dir, file) = (dir.as_ref(), file.as_ref());
        let backend =
            DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        ensure_no_store(&backend, dir)?;
        let header = checkpoint::read_header_file(file)?;
        if header.version != version {
            return Err(StoreError::corrupted(
                &file.display().to_string(),
                8,
                format!("a checkpoint of version {}, not {version}", header.version),
            ));
        }
        meta::write_meta(&backend, meta::Meta { capacity: header.capacity })?;
        let target = dir.join(meta::checkpoint_name(version));
        if let Err(e) = std::fs::rename(file, &target) {
            if e.kind() != std::io::ErrorKind::CrossesDevices {
                return Err(StoreError::io(format!("moving {} into the store", file.display()), e));
            }
            // Another file system: copy, sync, then remove the original.
            std::fs::copy(file, &target)
                .and_then(|_| std::fs::File::open(&target)?.sync_all())
                .and_then(|()| std::fs::remove_file(file))
                .ctx(|| format!("copying {} into the store", file.display()))?;
        }
        backend.sync_dir().ctx(|| format!("syncing {}", dir.display()))?;
        meta::write_head(&backend, version)
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

    /// Reads the working state (committed versions plus uncommitted changes).
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.tree.get(key)
    }

    /// The working state, read-only (for iteration).
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
        let new = self.tree.insert(key, value)?;
        self.record.put(key, value);
        self.activity.touch();
        Ok(new)
    }

    /// Removes `key`, returning its value. Durable at the next commit.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.writable()?;
        self.record.check_room(key, 0)?;
        let old = self.tree.remove(key);
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
        self.versions.insert(version, self.tree.snapshot());
        self.retain();
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
        self.activity.set_oldest(self.oldest_retained());
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
        delete_obsolete(&*self.backend, version, None).inspect_err(|e| {
            self.poisoned = Some(e.to_string());
        })
    }

    /// Starts writing a checkpoint of the newest version in the background, unless one
    /// is running. Returns the version being checkpointed, or `None`.
    ///
    /// The newest version, because the store retains it for `keep_recent - 1` more
    /// commits anyway: the checkpoint's snapshot, held while it is encoded, then keeps
    /// nothing alive (`docs/design.md` §8.7). The checkpoint replaces the files before it
    /// (it is renamed into place, and older checkpoints and log segments are deleted)
    /// once no retained version is older, so every retained version can always be
    /// rebuilt from the files; [`Store::wait_checkpoint`] installs it at once, and the
    /// old files then go at the first commit that prunes the last older version.
    pub fn checkpoint(&mut self) -> Result<Option<u64>, StoreError> {
        self.writable()?;
        self.poll_checkpoint()?;
        if self.job.is_some() {
            return Ok(None);
        }
        let version = self.head;
        let snap = self.versions[&version].clone();
        // Later versions go to a new segment, so the old ones can be deleted once the
        // checkpoint is durable.
        if self.wal_first != self.head + 1 {
            if let Err(e) = self.rotate() {
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        let head = self.head;
        let stop = Arc::new(AtomicBool::new(false));
        let backend = self.backend.clone();
        let flag = stop.clone();
        let activity = self.activity.clone();
        let head_mark = self.head_mark.clone();
        // Spread over as much log as was written since the last checkpoint (with the
        // `Auto` policy, what made this one due): it then ends well before the next.
        self.activity.urgent.store(false, Ordering::Relaxed);
        let pacer =
            Pacer::new(self.activity.clone(), self.opts.checkpoint_pace, self.log_since_checkpoint);
        let handle = std::thread::Builder::new()
            .name("bavl-checkpoint".into())
            .spawn(move || {
                background_priority();
                let Some(report) =
                    checkpoint::write(&*backend, version, snap, &flag, Some(&pacer))?
                else {
                    return Ok(None);
                };
                head_mark.advance(&*backend, head, true)?;
                let obsolete = activity.oldest() >= version;
                if obsolete {
                    delete_obsolete(&*backend, version, Some((&pacer, &flag)))?;
                }
                Ok(Some((report, obsolete)))
            })
            .map_err(|e| StoreError::io("starting the checkpoint thread", e))?;
        self.log_since_checkpoint = 0;
        self.job = Some(Job { version, stop, handle });
        Ok(Some(version))
    }

    /// The version being checkpointed in the background, if any (cheap; a finished
    /// checkpoint is collected at the next `commit`, `checkpoint` or `wait_checkpoint`).
    pub fn checkpoint_running(&self) -> Option<u64> {
        self.job.as_ref().map(|j| j.version)
    }

    /// The report of the last checkpoint this store finished since it was opened.
    pub fn last_checkpoint_report(&self) -> Option<&CheckpointReport> {
        self.last_report.as_ref()
    }

    /// Waits for the running checkpoint, if any, and returns its report. A paced
    /// checkpoint runs at full speed from this call on.
    pub fn wait_checkpoint(&mut self) -> Result<Option<CheckpointReport>, StoreError> {
        let Some(job) = self.job.take() else { return Ok(None) };
        self.activity.urgent.store(true, Ordering::Relaxed);
        self.finish_job(job)
    }

    fn poll_checkpoint(&mut self) -> Result<(), StoreError> {
        if self.job.as_ref().is_some_and(|j| j.handle.is_finished()) {
            self.wait_checkpoint()?;
        }
        Ok(())
    }

    fn finish_job(&mut self, job: Job) -> Result<Option<CheckpointReport>, StoreError> {
        let result = job.handle.join().unwrap_or_else(|_| {
            Err(StoreError::Poisoned(format!("the checkpoint of version {} panicked", job.version)))
        });
        match result {
            Ok(Some((report, cleaned))) => {
                self.pending_cleanup = (!cleaned).then_some(report.version);
                self.last_checkpoint = Some((report.version, report.bytes));
                self.stats.checkpoint_bytes_written += report.bytes;
                self.stats.checkpoints_written += 1;
                self.last_report = Some(report.clone());
                Ok(Some(report))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                // What the failed write left on disk is uncertain (fsync failure
                // semantics): refuse writes until reopened.
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn rotate(&mut self) -> Result<(), StoreError> {
        let first = self.head + 1;
        let name = wal_name(first);
        let mut f = self.backend.create(&name).ctx(|| format!("creating {name}"))?;
        f.write_all(&wal::segment_header(first, self.tree.capacity()))
            .and_then(|()| f.sync())
            .ctx(|| format!("writing {name}"))?;
        self.backend.sync_dir().ctx(|| format!("syncing the directory after creating {name}"))?;
        self.wal = f;
        self.wal_first = first;
        Ok(())
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

/// Lowers the calling thread's CPU priority (nice 10), so that a checkpoint's encoding
/// takes only CPU time the writer and its commit's hashing leave idle. On a machine with
/// few cores it otherwise competes with the hashing of the commits it overlaps (measured:
/// `docs/design.md` §8.7). Best effort: raising one's own niceness cannot fail on Linux,
/// and elsewhere this does nothing.
fn background_priority() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10);
    }
}

/// Bytes a paced deletion frees per commit: about 2.5 ms of a journal commit on ext4
/// here. Unlinking a 1M-key store's old checkpoint and log (320 MB) at once held the
/// next `fdatasync` of the log for about 100 ms (`docs/design.md` §8.7).
const SHRINK_STEP: u64 = 8 << 20;

/// Deletes checkpoints older than `version` and log segments holding only versions up
/// to `version`, once the checkpoint of `version` is durable. They are first renamed to
/// `*.tmp` (which opening deletes, so a crash midway leaves nothing that could pass for
/// state); with a `pacer`, each is then shrunk by [`SHRINK_STEP`] per commit before it is
/// unlinked.
fn delete_obsolete(
    backend: &dyn Backend,
    version: u64,
    pacer: Option<(&Pacer, &AtomicBool)>,
) -> Result<(), StoreError> {
    let names = backend.list().ctx(|| "listing the store".into())?;
    let mut segments: Vec<u64> = Vec::new();
    let mut doomed = Vec::new();
    for name in names {
        match classify(&name) {
            FileKind::Checkpoint(v) if v < version => doomed.push(name),
            FileKind::Wal(first) => segments.push(first),
            _ => {}
        }
    }
    segments.sort_unstable();
    for pair in segments.windows(2) {
        // A segment ends where the next begins.
        if pair[1] - 1 <= version {
            doomed.push(wal_name(pair[0]));
        }
    }
    if doomed.is_empty() {
        return Ok(());
    }
    debug_assert!(!doomed.contains(&checkpoint_name(version)));
    let mut hidden = Vec::with_capacity(doomed.len());
    for name in &doomed {
        let tmp = format!("{name}{TMP_SUFFIX}");
        backend.rename(name, &tmp).ctx(|| format!("renaming {name} to {tmp}"))?;
        hidden.push(tmp);
    }
    backend.sync_dir().ctx(|| "syncing the directory after retiring old files".into())?;
    for name in &hidden {
        if let Some((pacer, stop)) = pacer {
            let mut len = backend.file_len(name).ctx(|| format!("reading {name}"))?;
            while len > SHRINK_STEP {
                pacer.wait_commit(stop);
                len -= SHRINK_STEP;
                backend.shrink(name, len).ctx(|| format!("shrinking {name}"))?;
            }
        }
        backend.remove(name).ctx(|| format!("deleting {name}"))?;
    }
    Ok(())
}

/// Refuses a directory that already holds (part of) a store.
fn ensure_no_store(backend: &DirBackend, dir: &Path) -> Result<(), StoreError> {
    let l = open::list(backend)?;
    if l.names.iter().any(|n| n == meta::META_FILE || n == meta::HEAD_FILE)
        || !l.checkpoints.is_empty()
        || !l.segments.is_empty()
    {
        return Err(StoreError::InvalidOption(format!("{} already holds a store", dir.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read};
    use std::sync::Mutex;

    use super::*;
    use crate::backend::{MemBackend, WriteFile};

    /// A [`MemBackend`] that records the operations that change files.
    struct Recorder(MemBackend, Mutex<Vec<String>>);

    impl Recorder {
        fn log(&self, op: String) {
            self.1.lock().unwrap().push(op);
        }
    }

    impl Backend for Recorder {
        fn list(&self) -> io::Result<Vec<String>> {
            self.0.list()
        }
        fn open_read(&self, name: &str) -> io::Result<Box<dyn Read + Send>> {
            self.0.open_read(name)
        }
        fn file_len(&self, name: &str) -> io::Result<u64> {
            self.0.file_len(name)
        }
        fn create(&self, name: &str) -> io::Result<Box<dyn WriteFile>> {
            self.0.create(name)
        }
        fn open_append(&self, name: &str, len: u64) -> io::Result<Box<dyn WriteFile>> {
            self.0.open_append(name, len)
        }
        fn rename(&self, from: &str, to: &str) -> io::Result<()> {
            self.log(format!("rename {from}"));
            self.0.rename(from, to)
        }
        fn remove(&self, name: &str) -> io::Result<()> {
            self.log(format!("remove {name}"));
            self.0.remove(name)
        }
        fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
            self.log(format!("shrink {name} {}", len >> 20));
            self.0.shrink(name, len)
        }
        fn sync_dir(&self) -> io::Result<()> {
            self.log("sync".into());
            self.0.sync_dir()
        }
        fn describe(&self) -> String {
            self.0.describe()
        }
    }

    #[test]
    fn obsolete_files_are_hidden_first_then_shrunk_step_by_step() {
        let b = Recorder(MemBackend::new(), Mutex::new(Vec::new()));
        let (old, new) = (checkpoint_name(1), checkpoint_name(9));
        b.0.put(&old, vec![0; 20 << 20]);
        b.0.put(&new, vec![0; 10]);
        for first in [2, 6, 10] {
            b.0.put(&wal_name(first), vec![0; 10]);
        }
        let activity = Activity::new();
        let pacer = Pacer::new(activity, CheckpointPace::default(), 1000);
        let stop = AtomicBool::new(false);
        delete_obsolete(&b, 9, Some((&pacer, &stop))).unwrap();
        let mut left = b.list().unwrap();
        left.sort();
        assert_eq!(left, [new, wal_name(10)]);
        let hidden = |n: &str| format!("{n}{TMP_SUFFIX}");
        let ops = b.1.lock().unwrap().clone();
        let want = [
            format!("rename {old}"),
            format!("rename {}", wal_name(2)),
            format!("rename {}", wal_name(6)),
            "sync".into(),
            format!("shrink {} 12", hidden(&old)),
            format!("shrink {} 4", hidden(&old)),
            format!("remove {}", hidden(&old)),
            format!("remove {}", hidden(&wal_name(2))),
            format!("remove {}", hidden(&wal_name(6))),
        ];
        assert_eq!(ops, want);
    }
}
