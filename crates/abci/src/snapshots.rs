//! The snapshots a node serves: exported to files in `<home>/snapshots/` by a background
//! thread, listed again after a restart, and kept by heights and by time
//! (`docs/chain.md` §5).
//!
//! Guarantees: a snapshot is listed only once its file is complete and synced
//! ([`crate::snapfile::write`]); at most one export runs at a time (a snapshot height
//! reached while one runs is skipped, so exports never queue); what a node lists after a
//! restart is what it listed before, minus what the retention rule drops. The caller
//! guarantees that the exported version's chunks stay readable while its export runs:
//! for a paged store, the version is a checkpoint and no later checkpoint starts before
//! the export ends ([`Snapshots::exporting`], `crate::block`).
//!
//! **Retention.** A snapshot is kept while it is among the newest `keep`, or was taken
//! less than `keep_secs` ago, or served a chunk within [`SERVING_GRACE`] (a joiner is
//! restoring it: at most [`EXTRA_KEPT`] snapshots are kept for this reason alone, the
//! newest first). Applied after every new snapshot and at open; a dropped snapshot's
//! file is deleted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bavl_store::{Backend, DirBackend};

use crate::snapfile::{self, SnapFile, SnapFileError};
use crate::snapshot::Source;

/// The directory of snapshot files in the application's home.
pub const DIR: &str = "snapshots";
/// A snapshot that served a chunk this recently is kept beyond the rule's `keep` and
/// `keep_secs` (a joiner is still restoring it), up to [`EXTRA_KEPT`] more snapshots.
pub const SERVING_GRACE: Duration = Duration::from_secs(120);
/// How many snapshots the serving grace alone may keep (bounded disk even if peers keep
/// asking for old ones).
pub const EXTRA_KEPT: usize = 2;

/// Which snapshots are kept (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest this many are kept (at least 1).
    pub keep: usize,
    /// Those taken less than this many seconds ago are kept too (0: none by age).
    pub keep_secs: u64,
}

/// How a held snapshot is cut into ABCI chunks.
#[derive(Clone)]
pub(crate) enum Form {
    /// Format 1: bundles of bavl chunks, read from its file.
    File(Arc<SnapFile>),
    /// Format 2, the baseline: a compressed stream exported at the snapshot height and
    /// held in memory (a comparison rig; not kept across restarts).
    #[cfg(feature = "test-rigs")]
    Baseline(Arc<crate::baseline::Export>),
}

/// A snapshot this node serves.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) height: u64,
    /// When it was taken (Unix ms).
    pub(crate) taken_ms: u64,
    pub(crate) form: Form,
    /// When it last served a chunk.
    pub(crate) served: Arc<Mutex<Option<Instant>>>,
}

impl Held {
    pub(crate) fn new(height: u64, taken_ms: u64, form: Form) -> Held {
        Held { height, taken_ms, form, served: Default::default() }
    }

    fn serving(&self) -> bool {
        let last = *self.served.lock().unwrap_or_else(|p| p.into_inner());
        last.is_some_and(|t| t.elapsed() < SERVING_GRACE)
    }

    fn remove_file(&self) {
        #[cfg_attr(not(feature = "test-rigs"), allow(irrefutable_let_patterns))]
        if let Form::File(f) = &self.form {
            if let Err(e) = f.remove() {
                tracing::error!(height = self.height, "deleting a dropped snapshot: {e}");
            }
        }
    }
}

/// The export in progress.
struct Running {
    height: u64,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Option<SnapFile>, SnapFileError>>,
}

/// The snapshots a node serves, and the export in progress.
pub(crate) struct Snapshots {
    dir: Arc<DirBackend>,
    held: Vec<Held>,
    running: Option<Running>,
    rule: Retention,
}

impl Snapshots {
    /// Opens `<home>/snapshots` (created if missing, locked while open): deletes what an
    /// interrupted export left (`*.tmp`) and any file that fails its checks (logged), lists
    /// the rest, and applies the retention rule.
    pub(crate) fn open(home: &std::path::Path, rule: Retention) -> std::io::Result<Snapshots> {
        let path = home.join(DIR);
        std::fs::create_dir_all(&path)?;
        let dir = Arc::new(DirBackend::open(&path)?);
        let mut held = Vec::new();
        for name in dir.list()? {
            if name.ends_with(".tmp") {
                dir.remove(&name)?;
                continue;
            }
            if snapfile::parse_name(&name).is_none() {
                continue;
            }
            match SnapFile::open(dir.clone(), &name) {
                Ok(f) => held.push(Held::new(f.height, f.taken_ms, Form::File(Arc::new(f)))),
                Err(e) => {
                    tracing::error!(file = %name, "deleting a snapshot file that fails its checks: {e}");
                    dir.remove(&name)?;
                }
            }
        }
        held.sort_by_key(|h| h.height);
        let mut s = Snapshots { dir, held, running: None, rule };
        s.prune(snapfile::unix_ms());
        Ok(s)
    }

    /// The snapshots served, oldest first.
    pub(crate) fn held(&self) -> &[Held] {
        &self.held
    }

    /// The snapshot of `height`, if served.
    pub(crate) fn find(&self, height: u64) -> Option<Held> {
        self.held.iter().find(|h| h.height == height).cloned()
    }

    /// Whether an export runs (a paged store then starts no checkpoint).
    pub(crate) fn exporting(&self) -> bool {
        self.running.is_some()
    }

    /// Starts exporting `src` as the snapshot of `height`, unless an export still runs
    /// (then this height is skipped: false).
    pub(crate) fn start(&mut self, height: u64, src: Source, bundle_bytes: u64) -> bool {
        self.poll(false);
        if let Some(r) = &self.running {
            tracing::warn!(
                height,
                running = r.height,
                "snapshot skipped: the previous export still runs"
            );
            return false;
        }
        let (dir, stop) = (self.dir.clone(), Arc::new(AtomicBool::new(false)));
        let flag = stop.clone();
        let taken = snapfile::unix_ms();
        let spawned = std::thread::Builder::new().name("bavl-snapshot".into()).spawn(move || {
            let start = Instant::now();
            let src = src.without_located_bodies();
            let r = snapfile::write(&dir, height, taken, &src, bundle_bytes, &flag);
            if r.is_err() {
                let _ = dir.remove(&format!("{}.tmp", snapfile::file_name(height)));
            }
            if let Ok(Some(f)) = &r {
                // The fields scripts/localnet.sh reads; micros: the export's, in the
                // background (the committing thread only started it).
                let (format, bundles) = (crate::snapshot::FORMAT, f.bundles());
                let micros = start.elapsed().as_micros() as u64;
                tracing::info!(height, format, bundles, micros, "snapshot taken");
            }
            r
        });
        match spawned {
            Ok(handle) => {
                self.running = Some(Running { height, stop, handle });
                true
            }
            Err(e) => {
                tracing::error!(height, "no snapshot: starting its export: {e}");
                false
            }
        }
    }

    /// Collects a finished export (waiting for a running one if `wait`), lists it and
    /// applies the retention rule.
    pub(crate) fn poll(&mut self, wait: bool) {
        if !self.running.as_ref().is_some_and(|r| wait || r.handle.is_finished()) {
            return;
        }
        let r = self.running.take().expect("checked above");
        match r.handle.join() {
            Ok(Ok(Some(f))) => self.add(Held::new(f.height, f.taken_ms, Form::File(Arc::new(f)))),
            Ok(Ok(None)) => tracing::info!(height = r.height, "no snapshot of an empty state"),
            Ok(Err(e)) => tracing::error!(height = r.height, "no snapshot: {e}"),
            Err(_) => tracing::error!(height = r.height, "no snapshot: its export panicked"),
        }
    }

    /// Lists a new snapshot (replacing one of the same height) and applies the rule.
    pub(crate) fn add(&mut self, h: Held) {
        self.held.retain(|o| o.height != h.height);
        let at = self.held.partition_point(|o| o.height < h.height);
        self.held.insert(at, h);
        self.prune(snapfile::unix_ms());
    }

    /// Drops (and deletes) the snapshots the retention rule no longer keeps at `now_ms`.
    pub(crate) fn prune(&mut self, now_ms: u64) {
        let keep = kept(&self.held, self.rule, now_ms, Held::serving);
        let mut k = keep.iter();
        let (kept, dropped): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(|_| *k.next().expect("one each"));
        for h in dropped {
            tracing::info!(height = h.height, "snapshot dropped");
            h.remove_file();
        }
        self.held = kept;
    }
}

impl Drop for Snapshots {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop.store(true, Ordering::Relaxed);
            let _ = r.handle.join();
        }
    }
}

/// Which of `held` (oldest first) `rule` keeps at `now_ms`, given which are `serving`.
pub(crate) fn kept<T: HasAge>(
    held: &[T],
    rule: Retention,
    now_ms: u64,
    serving: impl Fn(&T) -> bool,
) -> Vec<bool> {
    let n = held.len();
    let newest = n.saturating_sub(rule.keep.max(1));
    let young = |h: &T| now_ms.saturating_sub(h.taken_ms()) < rule.keep_secs.saturating_mul(1000);
    let mut keep: Vec<bool> =
        held.iter().enumerate().map(|(i, h)| i >= newest || young(h)).collect();
    let mut extra = 0;
    for i in (0..n).rev() {
        if !keep[i] && extra < EXTRA_KEPT && serving(&held[i]) {
            keep[i] = true;
            extra += 1;
        }
    }
    keep
}

/// When a snapshot was taken.
pub(crate) trait HasAge {
    fn taken_ms(&self) -> u64;
}

impl HasAge for Held {
    fn taken_ms(&self) -> u64 {
        self.taken_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (height, taken_ms, serving)
    struct S(u64, u64, bool);
    impl HasAge for S {
        fn taken_ms(&self) -> u64 {
            self.1
        }
    }

    fn run(held: &[S], keep: usize, keep_secs: u64, now: u64) -> Vec<u64> {
        let k = kept(held, Retention { keep, keep_secs }, now, |s| s.2);
        held.iter().zip(k).filter(|(_, k)| *k).map(|(s, _)| s.0).collect()
    }

    #[test]
    fn kept_by_count_by_age_and_while_served_within_bounds() {
        let h = [S(10, 0, false), S(20, 5_000, false), S(30, 9_000, false), S(40, 9_500, false)];
        // By count alone.
        assert_eq!(run(&h, 2, 0, 10_000), vec![30, 40]);
        assert_eq!(run(&h, 9, 0, 10_000), vec![10, 20, 30, 40]);
        assert_eq!(run(&h, 0, 0, 10_000), vec![40], "at least the newest");
        // By age: younger than 6 s at t = 10 s (20 was taken 5 s ago, 10 ten).
        assert_eq!(run(&h, 1, 6, 10_000), vec![20, 30, 40]);
        assert_eq!(run(&h, 1, 6, 16_000), vec![40], "aged out");
        assert_eq!(run(&h, 1, 5, 10_000), vec![30, 40], "exactly 5 s old is not younger");
        // Served: kept beyond both, at most EXTRA_KEPT of them, the newest first.
        let s = [S(10, 0, true), S(20, 0, true), S(30, 0, true), S(40, 0, false)];
        assert_eq!(run(&s, 1, 0, 10_000), vec![20, 30, 40]);
        assert_eq!(EXTRA_KEPT, 2);
    }

    #[test]
    fn a_snapshot_being_restored_outlives_keep_within_bounds() {
        // The sequence of a node taking snapshots while a joiner restores old ones.
        let mut h: Vec<S> = vec![S(10, 0, false), S(20, 0, false), S(30, 0, false)];
        let prune = |h: &mut Vec<S>| {
            let k = kept(h, Retention { keep: 2, keep_secs: 0 }, 0, |s| s.2);
            let mut k = k.into_iter();
            h.retain(|_| k.next().unwrap());
        };
        let heights = |h: &Vec<S>| h.iter().map(|s| s.0).collect::<Vec<_>>();
        prune(&mut h);
        assert_eq!(heights(&h), vec![20, 30]);
        h[0].2 = true; // 20 is being served
        h.push(S(40, 0, false));
        prune(&mut h);
        assert_eq!(heights(&h), vec![20, 30, 40]);
        h.push(S(50, 0, true));
        prune(&mut h);
        assert_eq!(heights(&h), vec![20, 40, 50]);
        for x in [60, 70, 80] {
            h.push(S(x, 0, true));
            prune(&mut h);
        }
        assert_eq!(heights(&h), vec![50, 60, 70, 80]);
    }
}
