//! The background checkpoint of a [`Store`]: starting it (after rotating the log),
//! collecting it, and what a failure of it does (the store is poisoned).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::cleanup::delete_obsolete;
use crate::durable::{self, ChunkKeep};
use crate::error::IoContext;
use crate::meta::wal_name;
use crate::pace::Pacer;
use crate::{checkpoint, wal, CheckpointReport, Store, StoreError};

pub(crate) type Done = (CheckpointReport, bool, ChunkKeep, Moved, usize);
type Moved = std::collections::HashMap<u64, u64>;

pub(crate) struct Job {
    pub(crate) version: u64,
    pub(crate) stop: Arc<AtomicBool>,
    /// The report, whether the files before the checkpoint were deleted, and which chunk
    /// files the deletion keeps.
    pub(crate) handle: JoinHandle<Result<Option<Done>, StoreError>>,
}

impl Store {
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
        let pages = self.pager.as_ref().map(|p| p.files.clone());
        // A paged store's checkpoint completes the chunk file the writer appended to;
        // the writer goes on with the next one.
        let handed = match self.pager.as_mut().map(|p| p.rotate()).transpose() {
            Ok(h) => h.flatten(),
            Err(e) => {
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        };
        // Spread over as much log as was written since the last checkpoint (with the
        // `Auto` policy, what made this one due): it then ends well before the next.
        self.activity.urgent.store(false, Ordering::Relaxed);
        let pacer =
            Pacer::new(self.activity.clone(), self.opts.checkpoint_pace, self.log_since_checkpoint);
        let handle = std::thread::Builder::new()
            .name("bavl-checkpoint".into())
            .spawn(move || {
                background_priority();
                let (report, keep, moved, compacted) = match (handed, pages.as_ref()) {
                    (Some(file), Some(pages)) => {
                        let Some(w) = durable::write_checkpoint(
                            &*backend,
                            version,
                            snap,
                            &flag,
                            Some(&pacer),
                            pages,
                            file,
                        )?
                        else {
                            return Ok(None);
                        };
                        // The files it compacted stay until the next checkpoint: the
                        // versions taken before the writer relocates still name them.
                        let named = w.named.union(&w.compacted).copied().collect();
                        let n = w.compacted.len();
                        (w.report, ChunkKeep { named, below: w.file + 1 }, w.moved, n)
                    }
                    _ => {
                        let Some(report) = checkpoint::write_paged(
                            &*backend,
                            version,
                            snap,
                            &flag,
                            Some(&pacer),
                            pages.as_ref(),
                        )?
                        else {
                            return Ok(None);
                        };
                        (report, ChunkKeep::none(), Moved::new(), 0)
                    }
                };
                head_mark.advance(&*backend, head, true)?;
                let obsolete = activity.oldest() >= version;
                if obsolete {
                    delete_obsolete(&*backend, version, &keep, Some((&pacer, &flag)))?;
                }
                Ok(Some((report, obsolete, keep, moved, compacted)))
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

    pub(crate) fn poll_checkpoint(&mut self) -> Result<(), StoreError> {
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
            Ok(Some((report, cleaned, keep, moved, compacted))) => {
                self.pending_cleanup = (!cleaned).then_some(report.version);
                self.cleanup_keep = keep;
                if let Some(p) = &mut self.pager {
                    p.moved.extend(moved);
                    p.stats.compactions += compacted as u64;
                }
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

    pub(crate) fn rotate(&mut self) -> Result<(), StoreError> {
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
