//! Deleting the files a durable checkpoint made obsolete: hidden first (renamed to
//! `*.tmp`, which opening deletes), then shrunk step by step in pace with the commits,
//! then unlinked, so that freeing their blocks never holds up a commit's sync.

use std::sync::atomic::AtomicBool;

use crate::backend::Backend;
use crate::durable::ChunkKeep;
use crate::error::{IoContext, StoreError};
use crate::meta::{checkpoint_name, classify, wal_name, FileKind, TMP_SUFFIX};
use crate::pace::Pacer;

/// Bytes a paced deletion frees per commit: about 2.5 ms of a journal commit on ext4
/// here. Unlinking a 1M-key store's old checkpoint and log (320 MB) at once held the
/// next `fdatasync` of the log for about 100 ms (`docs/design.md` §8.7).
pub(crate) const SHRINK_STEP: u64 = 8 << 20;

/// Deletes checkpoints and skeletons older than `version`, log segments holding only
/// versions up to `version`, and the chunk files `keep` calls obsolete, once the
/// checkpoint of `version` is durable. They are first renamed to
/// `*.tmp` (which opening deletes, so a crash midway leaves nothing that could pass for
/// state); with a `pacer`, each is then shrunk by [`SHRINK_STEP`] per commit before it is
/// unlinked.
pub(crate) fn delete_obsolete(
    backend: &dyn Backend,
    version: u64,
    keep: &ChunkKeep,
    pacer: Option<(&Pacer, &AtomicBool)>,
) -> Result<(), StoreError> {
    let names = backend.list().ctx(|| "listing the store".into())?;
    let mut segments: Vec<u64> = Vec::new();
    let mut doomed = Vec::new();
    let mut chunk_files = Vec::new();
    for name in names {
        match classify(&name) {
            FileKind::Checkpoint(v) | FileKind::Skeleton(v) if v < version => doomed.push(name),
            FileKind::Chunks(id) if keep.obsolete(id) => chunk_files.push(name),
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
    // Chunk files last: a skeleton is hidden before any file it names (a crash between
    // leaves unnamed chunk files, which opening deletes, never a skeleton naming a
    // missing one).
    chunk_files.sort_unstable();
    doomed.extend(chunk_files);
    if doomed.is_empty() {
        return Ok(());
    }
    debug_assert!(!doomed.contains(&checkpoint_name(version)));
    let mut hidden = Vec::with_capacity(doomed.len());
    for name in &doomed {
        let tmp = format!("{name}{TMP_SUFFIX}");
        match backend.rename(name, &tmp) {
            // A chunk file the writer deleted itself since the listing (`Pager::retire`).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            r => r.ctx(|| format!("renaming {name} to {tmp}"))?,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Recorder;
    use crate::pace::{Activity, CheckpointPace};

    #[test]
    fn obsolete_files_are_hidden_first_then_shrunk_step_by_step() {
        let b = Recorder::new();
        let (old, new) = (checkpoint_name(1), checkpoint_name(9));
        b.files.put(&old, vec![0; 20 << 20]);
        b.files.put(&new, vec![0; 10]);
        for first in [2, 6, 10] {
            b.files.put(&wal_name(first), vec![0; 10]);
        }
        let activity = Activity::new();
        let pacer = Pacer::new(activity, CheckpointPace::default(), 1000);
        let stop = AtomicBool::new(false);
        delete_obsolete(&b, 9, &ChunkKeep::none(), Some((&pacer, &stop))).unwrap();
        let mut left = b.list().unwrap();
        left.sort();
        assert_eq!(left, [new, wal_name(10)]);
        let hidden = |n: &str| format!("{n}{TMP_SUFFIX}");
        let ops = b.ops();
        let want = [
            format!("rename {old} {}", hidden(&old)),
            format!("rename {} {}", wal_name(2), hidden(&wal_name(2))),
            format!("rename {} {}", wal_name(6), hidden(&wal_name(6))),
            "sync_dir".into(),
            format!("shrink {} 12", hidden(&old)),
            format!("shrink {} 4", hidden(&old)),
            format!("remove {}", hidden(&old)),
            format!("remove {}", hidden(&wal_name(2))),
            format!("remove {}", hidden(&wal_name(6))),
        ];
        assert_eq!(ops, want);
    }
}
