//! Which file to blame: damage found while opening is reported against the file that
//! holds it, not the one where it first shows (a forged capacity in `bavl.meta` shows in
//! a checkpoint's header, a missing checkpoint as a gap in the log, another store's
//! checkpoint as a wrong root on replay).

use bavl_core::Digest;

use crate::backend::Backend;
use crate::checkpoint;
use crate::error::StoreError;
use crate::meta::{self, checkpoint_name, wal_name, Meta};
use crate::open::Listing;
use crate::wal::{self, Next, SegmentReader};

/// Blames `bavl.meta` when it disagrees on the chunk capacity with every data file (the
/// newest checkpoint and every log segment whose header reads), which agree among
/// themselves: the one file that differs is the damaged one. Otherwise the files that
/// disagree with it are reported as they are read.
pub(crate) fn check_capacity(
    backend: &dyn Backend,
    l: &Listing,
    meta: &Meta,
) -> Result<(), StoreError> {
    let mut seen = Vec::new();
    if let Some(&v) = l.checkpoints.last() {
        if let Ok(h) = checkpoint::read_header(backend, &checkpoint_name(v)) {
            seen.push((checkpoint_name(v), h.capacity));
        }
    }
    for &first in &l.segments {
        let name = wal_name(first);
        // The header only (the reader would otherwise buffer a MiB of records).
        let header = wal::SEGMENT_HEADER_LEN;
        let Ok(len) = backend.file_len(&name) else { continue };
        let Ok(r) = backend.open_read(&name) else { continue };
        let r: Box<dyn std::io::Read + Send> = Box::new(std::io::Read::take(r, header));
        if let Ok(Some(seg)) = SegmentReader::open(r, &name, len.min(header)) {
            seen.push((name, seg.capacity));
        }
    }
    match seen.first() {
        Some((file, c)) if *c != meta.capacity && seen.iter().all(|(_, x)| x == c) => {
            Err(StoreError::corrupted(
                meta::META_FILE,
                13,
                format!(
                    "capacity {}, but {file} and every other data file were written with \
                     capacity {c}",
                    meta.capacity
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Reads `HEAD` (the version it names, if present) and fails if the log, which ends at
/// `head`, ends before it: versions acknowledged as committed were lost. The log is what
/// is damaged, so it is named: its newest segment (cut), or, when the state ends exactly
/// at a checkpoint (where a segment begins), the segment after it (deleted).
pub(crate) fn check_head(
    backend: &dyn Backend,
    l: &Listing,
    head: u64,
) -> Result<Option<u64>, StoreError> {
    let recorded = meta::read_head(backend, &l.names)?;
    let Some(durable) = recorded.filter(|&d| d > head) else { return Ok(recorded) };
    let file = match l.segments.last() {
        Some(&f) if !l.checkpoints.contains(&head) => wal_name(f),
        _ => wal_name(head + 1),
    };
    let offset = backend.file_len(&file).unwrap_or(0);
    Err(StoreError::corrupted(
        &file,
        offset,
        format!(
            "the log ends at version {head}, but HEAD records version {durable} as \
             committed: versions {}..={durable} were lost (the log was cut, or its newest \
             file deleted)",
            head + 1
        ),
    ))
}

/// The error for a log segment starting at `first` when the state reaches only `head`.
/// If nothing was replayed yet, the log continues from a checkpoint of `first - 1` that is
/// missing (segments begin where a checkpoint was taken); otherwise the segment before
/// (`prev`) ends early: cut at a record boundary, or a segment after it is missing.
pub(crate) fn gap(
    name: &str,
    first: u64,
    head: u64,
    base: u64,
    prev: Option<String>,
) -> StoreError {
    match prev {
        Some(prev) if head > base => StoreError::corrupted(
            &prev,
            0,
            format!(
                "ends at version {head}, but the next segment ({name}) starts at {first}: \
                 versions {}..={} were cut from it (or a segment between is missing)",
                head + 1,
                first - 1
            ),
        ),
        _ => {
            let from =
                if base == 0 { "the empty store".to_string() } else { checkpoint_name(base) };
            StoreError::corrupted(
                &checkpoint_name(first - 1),
                0,
                format!(
                    "missing: the log ({name}) continues from version {}, but the newest \
                     state on disk before it is {from} (versions {}..={} are in no file)",
                    first - 1,
                    head + 1,
                    first - 1
                ),
            )
        }
    }
}

/// The error when the first record after checkpoint `base` (in segment `name`) does not
/// lead from the checkpoint's state to its recorded root. Both files verify on their own
/// (the checkpoint against its root, the record by its checksums): they are of two
/// histories. When a later checkpoint is on disk (`through`), the log's record of that
/// version says which one belongs: a log that agrees with it is genuine and the base
/// checkpoint is another store's; otherwise the segment is. Without that witness the
/// checkpoint is named (the log is the file appended to by this store's every commit).
pub(crate) fn two_histories(
    backend: &dyn Backend,
    l: &Listing,
    base: u64,
    name: &str,
    offset: u64,
    through: &Option<(u64, Digest, String)>,
) -> StoreError {
    let log_agrees = match through {
        Some((n, want, _)) => log_root_at(backend, l, *n).map(|r| r == *want),
        None => None,
    };
    let ckpt = checkpoint_name(base);
    if log_agrees == Some(false) {
        return StoreError::corrupted(
            name,
            offset,
            format!(
                "does not continue {ckpt}, nor lead to the newer checkpoint's root: a log \
                 segment of another store or history"
            ),
        );
    }
    StoreError::corrupted(
        &ckpt,
        0,
        format!(
            "its state does not lead to the log's version {} ({name} at byte {offset}): a \
             checkpoint of another store or history",
            base + 1
        ),
    )
}

/// The root the log records for `version`, if a readable record of it is found.
fn log_root_at(backend: &dyn Backend, l: &Listing, version: u64) -> Option<Digest> {
    let first = *l.segments.iter().rev().find(|&&f| f <= version)?;
    let name = wal_name(first);
    let len = backend.file_len(&name).ok()?;
    let mut seg = SegmentReader::open(backend.open_read(&name).ok()?, &name, len).ok()??;
    loop {
        match seg.next_record().ok()? {
            Next::Record { version: v, body, .. } if v == version => {
                return body.get(..32)?.try_into().ok();
            }
            Next::Record { .. } => {}
            _ => return None,
        }
    }
}
