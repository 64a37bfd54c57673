//! Pacing of background checkpoints: spreading a checkpoint's writes over the commits so
//! that it never competes with them for the disk or the CPU in bursts.
//!
//! A checkpoint writes the whole state (about 130 MB at 1M keys of Workload B). Written
//! as fast as possible, it sits in the page cache until its final `fsync`, and the log's
//! `fdatasync` of every commit made meanwhile waits behind that burst (measured: 3 ms
//! becomes 60 ms; `docs/results/store.json`). Paced, it goes to the disk in step with the
//! log: the file is written to the page cache as it is encoded, and after the log has
//! grown by a fraction of the bytes it grew between the last two checkpoints, the same
//! fraction of the file has been handed to the disk, a slice at a time
//! (`WriteFile::start_writeback`), so it never reaches the disk as one burst. A handed
//! slice is not waited for: on a disk slower than the pace, several can be in flight at
//! once. This is the idea of PostgreSQL's `checkpoint_completion_target` and its
//! flushing with `sync_file_range`. When the store is idle (no insert,
//! remove or commit for [`IDLE`]), or someone waits for the checkpoint, it runs at full
//! speed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// No activity for this long lets a paced checkpoint run at full speed.
pub const IDLE: Duration = Duration::from_millis(20);

/// Bytes of a paced checkpoint handed to the disk at a time.
pub const SLICE_BYTES: u64 = 1 << 20;

/// How fast a background checkpoint writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CheckpointPace {
    /// As fast as the disk takes it, synced once at its end.
    Unpaced,
    /// Spread over the commits: the checkpoint finishes by the time the log has grown by
    /// `fraction` of what it grew since the previous checkpoint (with the `Auto` policy,
    /// of the log that triggers the next one), handing [`SLICE_BYTES`] to the disk at a
    /// time.
    Spread { fraction: f64 },
}

impl Default for CheckpointPace {
    fn default() -> Self {
        CheckpointPace::Spread { fraction: 0.5 }
    }
}

/// What the writer does, as the pacer sees it: shared by the store and its checkpoint
/// thread.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Bytes appended to the log since the store opened.
    log_bytes: AtomicU64,
    /// Bumped by every insert, remove and commit.
    events: AtomicU64,
    /// Set while someone waits for the running checkpoint.
    pub urgent: AtomicBool,
    /// The store's oldest retained version: a checkpoint of version `c` is installed once
    /// this reaches `c` (see [`Pacer::wait_install`]).
    oldest: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            log_bytes: AtomicU64::new(0),
            events: AtomicU64::new(0),
            urgent: AtomicBool::new(false),
            oldest: AtomicU64::new(0),
        })
    }

    pub fn set_oldest(&self, version: u64) {
        self.oldest.store(version, Ordering::Release);
    }

    pub fn oldest(&self) -> u64 {
        self.oldest.load(Ordering::Acquire)
    }

    #[inline]
    pub fn touch(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    pub fn logged(&self, bytes: u64) {
        self.log_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.touch();
    }

    fn log_bytes(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed)
    }
}

/// Throttles one checkpoint's writer thread.
pub struct Pacer {
    activity: Arc<Activity>,
    /// The log's size when the checkpoint started.
    log_start: u64,
    /// Log bytes over which to spread the chunks (0: unpaced).
    budget: u64,
    idle: Duration,
}

impl Pacer {
    pub(crate) fn new(activity: Arc<Activity>, pace: CheckpointPace, interval_log: u64) -> Pacer {
        let budget = match pace {
            CheckpointPace::Unpaced => 0,
            CheckpointPace::Spread { fraction } => (interval_log as f64 * fraction) as u64,
        };
        Pacer { log_start: activity.log_bytes(), activity, budget, idle: IDLE }
    }

    /// Whether files go to the disk slice by slice (paced).
    pub fn sliced(&self) -> bool {
        self.budget > 0
    }

    /// Waits until the bytes after the first `done` of `total` may be written, or `stop`
    /// is set, and says why it went on.
    pub fn wait(&self, done: u64, total: u64, stop: &AtomicBool) -> Go {
        if self.budget == 0 {
            return Go::Unpaced;
        }
        // One slice may always run ahead, so the first starts at once.
        let head_start = SLICE_BYTES;
        let mut idle = IdleWatch::new(&self.activity);
        loop {
            if self.hurried(stop) {
                return Go::Urgent;
            }
            let grown = self.activity.log_bytes().saturating_sub(self.log_start);
            let allowed = (total as u128 * grown as u128 / self.budget as u128) as u64;
            if done < allowed.saturating_add(head_start) {
                return Go::InStep;
            }
            if idle.for_at_least(self.idle) {
                return Go::Idle;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the next commit (the log grows), or until the store is idle for
    /// [`IDLE`], someone waits for the checkpoint, or `stop` is set.
    pub fn wait_commit(&self, stop: &AtomicBool) {
        let log = self.activity.log_bytes();
        let mut idle = IdleWatch::new(&self.activity);
        while self.activity.log_bytes() == log && !self.hurried(stop) {
            if idle.for_at_least(self.idle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until the checkpoint of `version`, written, may replace the files before it:
    /// when no retained version is older than `version` (each is then rebuilt from it and
    /// the log), or someone waits for the checkpoint, or `stop` is set. Only in the first
    /// case may the files before it be deleted ([`Activity::oldest`] says).
    ///
    /// A checkpoint is of the newest version when it starts, which the store retains for
    /// `keep_recent - 1` more commits; a paced checkpoint takes many more, so this rarely
    /// waits.
    pub fn wait_install(&self, version: u64, stop: &AtomicBool) {
        while self.activity.oldest() < version && !self.hurried(stop) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether the checkpoint is being abandoned or waited for.
    fn hurried(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed) || self.activity.urgent.load(Ordering::Relaxed)
    }
}

/// Notices when the store last did something (an insert, remove or commit).
struct IdleWatch<'a> {
    activity: &'a Activity,
    events: u64,
    since: Instant,
}

impl<'a> IdleWatch<'a> {
    fn new(activity: &'a Activity) -> Self {
        IdleWatch {
            activity,
            events: activity.events.load(Ordering::Relaxed),
            since: Instant::now(),
        }
    }

    /// Whether nothing happened for `idle` (since this watch began, or the last event).
    fn for_at_least(&mut self, idle: Duration) -> bool {
        let events = self.activity.events.load(Ordering::Relaxed);
        if events != self.events {
            (self.events, self.since) = (events, Instant::now());
            return false;
        }
        self.since.elapsed() >= idle
    }
}

/// Why [`Pacer::wait`] let the writer go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    Unpaced,
    /// The log has grown enough for this chunk.
    InStep,
    /// The store was idle for [`IDLE`] (nothing inserted, removed or committed).
    Idle,
    /// Someone waits for the checkpoint, or it is being abandoned.
    Urgent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpaced_never_waits_and_spread_follows_the_log() {
        let a = Activity::new();
        let stop = AtomicBool::new(false);
        let p = Pacer::new(a.clone(), CheckpointPace::Unpaced, 1000);
        assert_eq!(p.wait(1_000_000, 1, &stop), Go::Unpaced);
        assert!(!p.sliced());

        let p = Pacer::new(a.clone(), CheckpointPace::Spread { fraction: 0.5 }, 2000);
        assert!(p.sliced());
        // A budget of 1000 log bytes for 1000 slices: after 500 log bytes, writes that
        // start below 500 slices plus the head start of one may go.
        let total = 1000 * SLICE_BYTES;
        a.logged(500);
        assert_eq!(p.wait(501 * SLICE_BYTES - 1, total, &stop), Go::InStep);
        // Beyond that, with no activity, it waits for the idle time, then goes.
        let t = Instant::now();
        assert_eq!(p.wait(501 * SLICE_BYTES, total, &stop), Go::Idle);
        assert!(t.elapsed() >= IDLE);
        stop.store(true, Ordering::Relaxed);
        assert_eq!(p.wait(total - 1, total, &stop), Go::Urgent);
    }

    #[test]
    fn activity_keeps_it_waiting_until_the_log_grows() {
        let a = Activity::new();
        let stop = AtomicBool::new(false);
        let mut p = Pacer::new(a.clone(), CheckpointPace::Spread { fraction: 1.0 }, 1000);
        // Long enough that a loaded machine's scheduling gaps are not taken for idleness.
        p.idle = Duration::from_secs(2);
        let writer = {
            let a = a.clone();
            std::thread::spawn(move || {
                // Busy (an event every millisecond, nothing logged), then 600 log bytes.
                for _ in 0..100 {
                    a.touch();
                    std::thread::sleep(Duration::from_millis(1));
                }
                a.logged(600);
            })
        };
        // Slice 600 of 1000 needs 600 - 1 (the head start) log bytes: it goes when they
        // are logged, not earlier for idleness.
        let total = 1000 * SLICE_BYTES;
        assert_eq!(p.wait(600 * SLICE_BYTES, total, &stop), Go::InStep);
        writer.join().unwrap();
        a.urgent.store(true, Ordering::Relaxed);
        assert_eq!(p.wait(total - 1, total, &stop), Go::Urgent);
    }

    #[test]
    fn installing_waits_for_the_oldest_retained_version_or_a_waiter() {
        let a = Activity::new();
        let stop = AtomicBool::new(false);
        let p = Pacer::new(a.clone(), CheckpointPace::default(), 1000);
        a.set_oldest(7);
        let t = Instant::now();
        p.wait_install(7, &stop);
        assert!(t.elapsed() < Duration::from_secs(1), "waited with nothing older");
        let writer = {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                a.set_oldest(9);
            })
        };
        let t = Instant::now();
        p.wait_install(9, &stop);
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert_eq!(a.oldest(), 9);
        writer.join().unwrap();
        // Someone waits, or it is abandoned: it goes, with version 9 still retained (the
        // files before it must then stay).
        a.urgent.store(true, Ordering::Relaxed);
        p.wait_install(12, &stop);
        a.urgent.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        p.wait_install(12, &stop);
        assert!(a.oldest() < 12);
    }

    #[test]
    fn a_paced_deletion_step_waits_for_a_commit_or_idleness() {
        let a = Activity::new();
        let stop = AtomicBool::new(false);
        let mut p = Pacer::new(a.clone(), CheckpointPace::default(), 1000);
        p.idle = Duration::from_secs(5);
        let writer = {
            let a = a.clone();
            std::thread::spawn(move || {
                for _ in 0..40 {
                    a.touch();
                    std::thread::sleep(Duration::from_millis(1));
                }
                a.logged(100);
            })
        };
        let t = Instant::now();
        p.wait_commit(&stop);
        assert!(t.elapsed() >= Duration::from_millis(40), "went on before the commit");
        assert!(t.elapsed() < Duration::from_secs(5), "waited for idleness, not the commit");
        writer.join().unwrap();
        p.idle = IDLE;
        let t = Instant::now();
        p.wait_commit(&stop);
        assert!(t.elapsed() >= IDLE);
    }
}
