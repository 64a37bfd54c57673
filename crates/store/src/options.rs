//! How a store is opened ([`Options`]) and what it reports ([`CommitTiming`],
//! [`StoreStats`]), and where pruned versions are freed ([`Reclaim`]).

use std::thread::JoinHandle;
use std::time::Duration;

use bavl_core::{Digest, Snapshot};

use crate::pace::CheckpointPace;

/// The chunk bodies a store keeps in memory by default ([`Options::cache_bytes`]):
/// 256 MiB. A budget, not a size the state is expected to have: a state whose bodies fit
/// is held whole (nothing is evicted until they pass it), and one that does not runs in
/// this much plus its skeleton (about 4.4 bytes a key) instead of being killed. Large
/// enough to hold a block's chunks with room to spare (a 10k-operation Workload B block
/// at 30M keys touches about 75 MB of bodies), small enough to leave room under a 1 GiB
/// memory limit for the application, the skeleton and the allocator's slack
/// (`docs/design.md` §8.5).
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// When the store writes checkpoints by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckpointPolicy {
    /// Only when [`crate::Store::checkpoint`] is called.
    Manual,
    /// When the log written since the last checkpoint exceeds both `min_log_bytes` and
    /// `log_ratio` times the size of the last checkpoint. The log's disk use and the
    /// replay work on open stay proportional to the state's size.
    Auto { log_ratio: f64, min_log_bytes: u64 },
}

impl CheckpointPolicy {
    /// The default of an in-memory store: a checkpoint writes the whole state, and
    /// replaying the log costs little per byte (no reads), so the log may grow to the
    /// checkpoint's size (64 MiB at least) before the next one.
    pub const UNPAGED: CheckpointPolicy =
        CheckpointPolicy::Auto { log_ratio: 1.0, min_log_bytes: 64 << 20 };
    /// The default ([`Options::default`], [`Options::paged`]): a checkpoint writes only the
    /// bodies not yet on disk and a skeleton (about 67 bytes per chunk), while replaying
    /// the log on open reads a chunk from disk per operation, as applying it did. So the
    /// log is kept short: a checkpoint every 4 MiB of log (about 30k Workload B
    /// operations), which bounds a reopen's replay to about three 10k-operation blocks
    /// (0.8 s each at 30M keys under 2 GiB) and adds the skeleton's bytes, 1.2 KB per
    /// operation at 30M keys, to what the store writes (`docs/design.md` §8.5.1).
    pub const PAGED: CheckpointPolicy =
        CheckpointPolicy::Auto { log_ratio: 0.0, min_log_bytes: 4 << 20 };

    /// The policy a store that is `paged` or not runs with: [`CheckpointPolicy::PAGED`]
    /// (the default's) given to an in-memory store is [`CheckpointPolicy::UNPAGED`], since
    /// its checkpoints write the whole state (one every 4 MiB of log would rewrite it
    /// over and over); any other policy as given.
    pub fn resolve(self, paged: bool) -> CheckpointPolicy {
        match self {
            p if p == CheckpointPolicy::PAGED && !paged => CheckpointPolicy::UNPAGED,
            other => other,
        }
    }
}

/// Which thread frees the memory of pruned versions (the chunks only they held: about as
/// many as a block touches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// The writer's, inside [`crate::Store::commit`] or [`crate::Store::prune`]. The default: it costs a
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
    /// When checkpoints are written (by default [`CheckpointPolicy::PAGED`], taken as
    /// [`CheckpointPolicy::UNPAGED`] by an in-memory store: [`CheckpointPolicy::resolve`]).
    pub checkpoint: CheckpointPolicy,
    /// How fast background checkpoints write (by default spread over the commits, so they
    /// never slow them down in bursts; see [`CheckpointPace`]).
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
    /// [`crate::StoreError::ReadOnly`]; a record cut short at the end of the log is skipped, not
    /// discarded, and left-over temporary files stay.
    pub read_only: bool,
    /// The memory budget of chunk bodies (`docs/design.md` §8.5.1); by default
    /// `Some(`[`DEFAULT_CACHE_BYTES`]`)`: no store's memory grows with its state. The
    /// working tree's chunk bodies beyond this many heap bytes are evicted (appended to the
    /// store's current chunk file first if they have never been written) and read back,
    /// verified, when an operation needs them: after every commit, and within a block or
    /// a replayed version as soon as what was loaded and written since the last eviction
    /// may pass the budget (so one large block never holds more). Checkpoints are then
    /// incremental: the bodies not yet in a chunk file and a skeleton of the version;
    /// opening reads the skeleton, not the state. A state smaller than the budget is held
    /// whole and never evicted. Retained versions keep only the bodies that were never
    /// written (copies made since the last eviction or checkpoint), which shrink the
    /// working tree's share. [`crate::Store::get`] loads what it needs; a read of a
    /// snapshot that meets an absent chunk is an error naming it (never a wrong answer),
    /// and [`crate::Store::resident_for`] loads what such a read needs.
    ///
    /// `None`: the in-memory store ([`Options::in_memory`]): everything stays in memory,
    /// checkpoints are whole, and memory grows with the state; for states known to fit,
    /// where it saves the skeleton's checks and writes.
    pub cache_bytes: Option<u64>,
    /// With paging, count the allocator's slack against `cache_bytes` (the default): after
    /// each commit the store compares the memory the process gained since it opened
    /// (anonymous resident memory, Linux) with the heap bytes of bodies and skeleton it
    /// counts, and evicts to the budget divided by that ratio (smoothed, between 1 and
    /// [`crate::MAX_SLACK_FACTOR`]), so that the budget bounds what the bodies cost in
    /// memory, not only their bytes. Off: the budget counts heap bytes alone (the cache
    /// holds more bodies; the process uses more memory than the budget says). Memory the
    /// process gains for other reasons counts as slack too, so the cache can shrink to
    /// half the budget; a store whose bodies never fill half the budget is never
    /// affected (`docs/design.md` §8.5.1).
    pub cache_counts_slack: bool,
    /// Where the scratch page file of a read-only paged open goes (`None`: the system's
    /// temporary directory; with [`crate::Store::open`] of a writable store, its
    /// directory). A writable paged store evicts into its own chunk files instead.
    pub page_dir: Option<std::path::PathBuf>,
}

impl Options {
    /// A paged store keeping at most `cache_bytes` of chunk bodies in memory, with the
    /// checkpoint policy that suits paging ([`CheckpointPolicy::PAGED`]); everything else
    /// as [`Options::default`] (which is paged too, with [`DEFAULT_CACHE_BYTES`]).
    pub fn paged(cache_bytes: u64) -> Options {
        Options {
            cache_bytes: Some(cache_bytes),
            checkpoint: CheckpointPolicy::PAGED,
            ..Options::default()
        }
    }

    /// The in-memory store, the explicit opt-out of paging: the whole state in memory,
    /// whole checkpoints ([`CheckpointPolicy::UNPAGED`]); everything else as
    /// [`Options::default`]. Its memory grows with the state.
    pub fn in_memory() -> Options {
        Options { cache_bytes: None, checkpoint: CheckpointPolicy::UNPAGED, ..Options::default() }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            capacity: None,
            keep_recent: 4,
            checkpoint: CheckpointPolicy::PAGED,
            checkpoint_pace: CheckpointPace::default(),
            reclaim: Reclaim::default(),
            head_interval: Some(Duration::from_secs(1)),
            read_only: false,
            cache_bytes: Some(DEFAULT_CACHE_BYTES),
            cache_counts_slack: true,
            page_dir: None,
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
    /// The pager's counters, when paging is on ([`Options::cache_bytes`]).
    pub paging: Option<crate::PagingStats>,
}

/// Frees pruned versions: inline, or on a thread of its own ([`Reclaim`]) so releasing the
/// chunks a version alone held never lengthens a commit. The channel is bounded: a commit
/// waits rather than let unreleased versions pile up.
pub(crate) struct Reclaimer {
    tx: Option<std::sync::mpsc::SyncSender<Snapshot>>,
    handle: Option<JoinHandle<()>>,
}

impl Reclaimer {
    pub(crate) fn start(mode: Reclaim) -> Reclaimer {
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

    pub(crate) fn release(&self, snap: Snapshot) {
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
