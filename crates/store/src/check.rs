//! `bavl check`: verifies a store without changing it.
//!
//! Every checkpoint file is read and each of its chunks verified against its root (a
//! paged store's skeleton against its root, and every body it names against the hash it
//! names); every
//! log segment is scanned and each record's checksums checked; then the state is rebuilt
//! as opening would (a checkpoint, then every later version replayed, each recorded
//! root compared; the replay is paged, with [`CHECK_CACHE_BYTES`] of bodies or the
//! budget given to [`check_within`], whether or not the store is paged on disk) and the
//! tree's invariants are checked at the newest version. Each problem names the file, the
//! byte offset and what is wrong. Memory: the skeleton and the budget, never the state (a
//! full checkpoint larger than a third of the budget is verified chunk by chunk into a
//! skeleton, as a paged open reads it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bavl_core::Digest;

use crate::backend::Backend;
use crate::error::{IoContext, StoreError};
use crate::meta::{self, checkpoint_name, wal_name, FileKind};
use crate::open::{list, recover};
use crate::paging::Pager;
use crate::wal::{Next, SegmentReader};
use crate::{checkpoint, durable, Options};

/// The chunk bodies [`check`] keeps in memory while it replays the log (the rest is read
/// back from the chunk files or a scratch file, verified, as needed):
/// [`crate::DEFAULT_CACHE_BYTES`].
pub const CHECK_CACHE_BYTES: u64 = crate::DEFAULT_CACHE_BYTES;

/// One problem found.
#[derive(Debug, Clone)]
pub struct Problem {
    pub file: String,
    pub offset: u64,
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}: {}", self.file, self.offset, self.what)
    }
}

/// What `check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub problems: Vec<Problem>,
    /// Harmless findings (a record cut short by a crash, left-over temporary files).
    pub notes: Vec<String>,
    pub checkpoints_checked: u64,
    pub records_checked: u64,
    pub versions_replayed: u64,
    /// The newest version and its root, when the state could be rebuilt.
    pub head: Option<(u64, Digest)>,
    pub keys: u64,
    pub chunks: u64,
    pub elapsed: Duration,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A store error as a problem of the file it names.
pub(crate) fn problem(e: StoreError) -> Problem {
    match e {
        StoreError::Corrupted { file, offset, what } => Problem { file, offset, what },
        other => Problem { file: String::new(), offset: 0, what: other.to_string() },
    }
}

/// Checks the store on `backend` (which should be locked against writers), keeping at
/// most [`CHECK_CACHE_BYTES`] of chunk bodies in memory.
pub fn check(backend: &Arc<dyn Backend>) -> Result<CheckReport, StoreError> {
    check_within(backend, CHECK_CACHE_BYTES)
}

/// [`check`] keeping at most `cache_bytes` of chunk bodies in memory.
pub fn check_within(
    backend: &Arc<dyn Backend>,
    cache_bytes: u64,
) -> Result<CheckReport, StoreError> {
    let shared = backend.clone();
    let backend = &**backend;
    let start = Instant::now();
    let mut report = CheckReport::default();
    let l = list(backend)?;
    for name in &l.unknown {
        report.notes.push(format!("{name}: not a store file (ignored)"));
    }
    for name in &l.temporary {
        report.notes.push(format!(
            "{name}: left over by an interrupted write (deleted by a writable open)"
        ));
    }
    if let Err(e) = crate::open::existing_meta(backend, &l) {
        report.problems.push(problem(e));
        report.elapsed = start.elapsed();
        return Ok(report);
    }
    let mut named = std::collections::BTreeSet::new();
    for &v in &l.checkpoints {
        if l.skeletons.contains(&v) {
            check_skeleton(backend, &l, v, &mut named, &mut report);
            continue;
        }
        let name = checkpoint_name(v);
        // Whole if it fits the budget three times over, else into a skeleton (memory: the
        // skeleton), verified chunk by chunk against its root either way.
        let whole = crate::open::WHOLE;
        let fits = backend.file_len(&name).is_ok_and(|n| n.saturating_mul(whole) <= cache_bytes);
        let read = match fits {
            true => checkpoint::read(backend, &name),
            false => crate::reopen::read_skeleton(backend, &name, None),
        };
        match read {
            Ok((header, tree)) => {
                report.checkpoints_checked += 1;
                if header.version != v {
                    report.problems.push(Problem {
                        file: name.clone(),
                        offset: 8,
                        what: format!("header says version {}", header.version),
                    });
                }
                if let Err(what) = tree.check() {
                    report.problems.push(Problem { file: name, offset: 0, what });
                }
            }
            Err(e) => report.problems.push(problem(e)),
        }
    }
    for &id in l.chunk_files.keys().filter(|id| !named.contains(id)) {
        report.notes.push(format!(
            "{}: named by no checkpoint (written after the newest, or left by a crash; \
             deleted by a writable open)",
            meta::chunk_file_name(id)
        ));
    }
    for (i, &first) in l.segments.iter().enumerate() {
        let name = wal_name(first);
        let len = backend.file_len(&name).ctx(|| format!("reading {name}"))?;
        let r = backend.open_read(&name).ctx(|| format!("opening {name}"))?;
        let mut seg = match SegmentReader::open(r, &name, len) {
            Ok(Some(seg)) => seg,
            Ok(None) => {
                report.notes.push(format!("{name}: shorter than its header (cut short)"));
                continue;
            }
            Err(e) => {
                report.problems.push(problem(e));
                continue;
            }
        };
        loop {
            match seg.next_record() {
                Ok(Next::Record { .. }) => report.records_checked += 1,
                Ok(Next::End) => break,
                Ok(Next::Torn { offset }) => {
                    // Not "never committed": a crash during a commit leaves this, but so
                    // does a cut of the file; only versions up to HEAD's are known.
                    let what = format!(
                        "{} bytes of an incomplete record (a commit cut short by a crash, \
                         not acknowledged; or a cut of the file: the log is checked against \
                         HEAD below)",
                        len - offset
                    );
                    if i + 1 == l.segments.len() {
                        report.notes.push(format!("{name} at byte {offset}: {what}"));
                    } else {
                        report.problems.push(Problem { file: name.clone(), offset, what });
                    }
                    break;
                }
                Err(e) => {
                    report.problems.push(problem(e));
                    break;
                }
            }
        }
    }
    // The whole chain, as opening would rebuild it, unless a file is already known bad.
    if report.problems.is_empty() {
        // Replayed paged, with a bounded cache and a scratch page file, whether or not
        // the store is paged on disk: its state is never read into memory whole.
        let opts = Options { keep_recent: 1, ..Options::paged(cache_bytes) };
        let mut pager = Pager::for_options(&opts)?;
        if let Some(p) = pager.as_mut() {
            p.backend = Some(shared);
        }
        // A store of full checkpoints is also rebuilt from the checkpoint before the newest
        // when its log reaches the newest, as an unpaged open does, to verify that chain.
        let older = l.skeletons.is_empty();
        match recover(backend, &opts, true, pager.as_mut(), older) {
            Ok(mut o) => {
                report.problems.extend(o.recovery.older_checkpoint_damage.clone());
                if o.recovery.older_checkpoint_damage.is_none() {
                    older_files(&l, o.recovery.checkpoint, &mut report);
                }
                if o.recovery.head_file.is_none() && (o.head > 0 || !l.checkpoints.is_empty()) {
                    report.notes.push(format!(
                        "{}: missing, so the log cannot be checked for a cut end (a crash \
                         before its first write leaves this; otherwise it was deleted)",
                        meta::HEAD_FILE
                    ));
                }
                report.versions_replayed = o.recovery.replayed;
                report.head = Some((o.head, o.head_root));
                report.keys = o.tree.len();
                report.chunks = o.tree.chunk_count();
                if let Err(what) = o.tree.check() {
                    report.problems.push(Problem {
                        file: wal_name(o.wal_first),
                        offset: 0,
                        what: format!("invariants at version {}: {what}", o.head),
                    });
                }
                debug_assert_eq!(o.tree.root_hash(), o.head_root);
            }
            Err(e) => report.problems.push(problem(e)),
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Checks skeleton `v`: its checksums, its root recomputed from its chunk hashes, and
/// every body it names read back and verified against its hash (one at a time).
fn check_skeleton(
    backend: &dyn Backend,
    l: &crate::open::Listing,
    v: u64,
    named: &mut std::collections::BTreeSet<u64>,
    report: &mut CheckReport,
) {
    let name = meta::skeleton_name(v);
    let (header, mut tree, skel) = match durable::load(backend, &name, &l.chunk_files) {
        Ok(loaded) => loaded,
        Err(e) => return report.problems.push(problem(e)),
    };
    named.extend(skel.named());
    report.checkpoints_checked += 1;
    if header.version != v {
        let what = format!("header says version {}", header.version);
        report.problems.push(Problem { file: name.clone(), offset: 8, what });
    }
    // Every damaged body is reported (up to a hundred per skeleton), not only the first.
    let mut damaged = 0;
    for i in 0..skel.entries.len() {
        if let Err(e) = durable::load_body(backend, &mut tree, &skel, i, &l.chunk_files, false) {
            report.problems.push(problem(e));
            damaged += 1;
            if damaged == 100 {
                break;
            }
        }
    }
}

/// Files older than the checkpoint the state was rebuilt from (`base`), which opening did
/// not need: a complete older chain (a checkpoint and the log from it) is what a crash
/// between a checkpoint's install and its cleanup leaves, and so are files of a cleanup
/// cut short (their renamed `*.tmp` siblings show it). Anything else is damage: an older
/// checkpoint whose log is gone, or log segments whose checkpoint is gone.
fn older_files(l: &crate::open::Listing, base: Option<u64>, report: &mut CheckReport) {
    let Some(base) = base else { return };
    let cleanup_cut = l.temporary.iter().any(|t| {
        let stem = t.strip_suffix(meta::TMP_SUFFIX).unwrap_or(t);
        matches!(
            meta::classify(stem),
            FileKind::Checkpoint(_)
                | FileKind::Skeleton(_)
                | FileKind::Wal(_)
                | FileKind::Chunks(_)
        )
    });
    let mut found = Vec::new();
    for &c in l.checkpoints.iter().filter(|&&c| c < base) {
        if !l.segments.contains(&(c + 1)) {
            found.push(Problem {
                file: wal_name(c + 1),
                offset: 0,
                what: format!(
                    "missing: the log after {} (which is still there), so the versions \
                     between it and {} cannot be rebuilt",
                    checkpoint_name(c),
                    checkpoint_name(base)
                ),
            });
        }
    }
    let ends = |i: usize| l.segments.get(i + 1).map(|n| n - 1);
    if let Some(&first) = l.segments.first() {
        let orphan = ends(0).is_some_and(|end| end <= base);
        if orphan && first > 1 && !l.checkpoints.contains(&(first - 1)) {
            found.push(Problem {
                file: checkpoint_name(first - 1),
                offset: 0,
                what: format!(
                    "missing: {} holds versions {first}.. that continue it (kept to \
                     rebuild older versions, which are now lost)",
                    wal_name(first)
                ),
            });
        }
    }
    for p in found {
        if cleanup_cut {
            report.notes.push(format!("{p} (a cleanup cut short; opening finishes it)"));
        } else {
            report.problems.push(p);
        }
    }
}
