//! Loading a block's chunks before it is applied (`docs/design.md` §8.5.1): the chunks
//! holding the keys a block (or a logged version, replayed on open) will touch are read
//! on several threads, each body decoded and hashed there, so that the writer's thread
//! only verifies by comparing and installs them.

use bavl_core::{Body, PageRef, Tree};

use crate::paging::{split_loc, Pager};
use crate::readpool::{Job, ReadPool};
use crate::{Store, StoreError};

/// Threads a paged store reads on (its pool, `readpool`). More threads than cores keep
/// reads in flight while others decode and hash, as NOMT's io_uring queue does. At 30M
/// keys a block's loads keep both cores of this machine busy, and 4, 8, 16 and 48 threads
/// gave the same ops/s within noise (`docs/results/archive/paged-30m-anatomy.json`).
pub const PREFETCH_THREADS: usize = 16;
/// A prefetch starts no thread for fewer chunks than this.
const MIN_PER_THREAD: usize = 8;

impl Pager {
    /// Makes resident in `tree` the absent chunks holding `keys`, read on up to
    /// [`PREFETCH_THREADS`] threads. Returns how many were loaded. Each body is verified
    /// as on any load: a damaged one is [`StoreError::Corrupted`] (bodies before it in the
    /// same call may have been installed; none is wrong).
    pub(crate) fn prefetch<'k>(
        &mut self,
        tree: &mut Tree,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<usize, StoreError> {
        if !tree.is_paged() {
            return Ok(0);
        }
        let keys: Vec<&[u8]> = keys.into_iter().collect();
        // First the chunks holding the keys; then, with those resident (so each knows
        // whether its key is new and whether it is full), the neighbours an insert of a
        // new key into a full chunk evens out or splits over (`absent_for_insert`), which
        // the block would otherwise load one at a time as it meets them.
        let mut loaded =
            self.load_parallel(tree, keys.iter().filter_map(|k| tree.try_get(k).err()).collect())?;
        let neighbours: Vec<PageRef> =
            keys.iter().flat_map(|k| tree.absent_for_insert(k)).collect();
        loaded += self.load_parallel(tree, neighbours)?;
        Ok(loaded)
    }

    /// Reads `pages` on up to [`PREFETCH_THREADS`] threads and installs them in `tree`.
    fn load_parallel(
        &mut self,
        tree: &mut Tree,
        mut pages: Vec<PageRef>,
    ) -> Result<usize, StoreError> {
        pages.sort_unstable_by_key(|p| p.index);
        pages.dedup_by_key(|p| p.index);
        let read = self.read_pages(pages);
        let mut installed = Vec::with_capacity(read.len());
        let mut failed = None;
        for (pg, body) in read {
            let r = body.and_then(|b| {
                tree.page_in(pg.index, b).map_err(|e| {
                    StoreError::corrupted(
                        &self.files.name_of(pg.loc),
                        split_loc(pg.loc).1,
                        e.to_string(),
                    )
                })
            });
            match r {
                Ok(()) => installed.push(pg.index),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        for &i in &installed {
            self.loaded(tree, i);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(installed.len()),
        }
    }

    /// Reads and decodes `pages` on up to [`PREFETCH_THREADS`] threads of the pager's
    /// pool (`readpool`, started at the first call), each body hashed on its reading
    /// thread; in the order of `pages`. A reading job that panicked reads nothing: its
    /// chunks load on demand.
    fn read_pages(&mut self, pages: Vec<PageRef>) -> Vec<(PageRef, Result<Body, StoreError>)> {
        if self.pool.is_none() {
            self.pool = ReadPool::start(PREFETCH_THREADS);
        }
        let threads = PREFETCH_THREADS.min(pages.len().div_ceil(MIN_PER_THREAD)).max(1);
        let per = pages.len().div_ceil(threads).max(1);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut pages = pages.into_iter();
        for part in 0.. {
            let chunk: Vec<PageRef> = pages.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            let (tx, files) = (tx.clone(), self.files.clone());
            let job: Job = Box::new(move || {
                // Decoded and hashed here: the writer's thread only compares.
                let read = chunk.into_iter().map(|pg| {
                    let body = files.read(&pg).map(|mut b: Body| {
                        b.prehash::<bavl_core::Sha256>();
                        b
                    });
                    (pg, body)
                });
                let _ = tx.send((part, read.collect::<Vec<_>>()));
            });
            // No thread to take it (none could be started): read here.
            let refused = match &self.pool {
                Some(pool) => pool.run(job).err(),
                None => Some(job),
            };
            if let Some(job) = refused {
                job();
            }
        }
        drop(tx);
        let mut parts: Vec<_> = rx.iter().collect();
        parts.sort_unstable_by_key(|(part, _)| *part);
        parts.into_iter().flat_map(|(_, read)| read).collect()
    }
}

impl Store {
    /// Loads, on up to [`PREFETCH_THREADS`] threads, the paged-out chunks holding `keys`
    /// (what a block about to be applied will touch), then the neighbours an insert of a
    /// new key into a full one needs; anything else an operation needs (a neighbour after
    /// the block's own splits, a remove's) it loads itself. Returns how many chunks were
    /// loaded; a no-op without paging. Each body is verified as on any load.
    ///
    /// Within the budget: the keys are prefetched in slices, in order, while the bodies
    /// a slice may load (three chunks a key, of the mean size loaded so far) fit beside
    /// those held; the chunks of the keys after that load as the operations meet them
    /// (`docs/design.md` §8.5.1).
    pub fn prefetch<K: AsRef<[u8]>>(&mut self, keys: &[K]) -> Result<usize, StoreError> {
        let Some(p) = &mut self.pager else { return Ok(0) };
        p.relieve(&mut self.tree, &mut self.versions)?;
        let mut loaded = 0;
        for slice in keys.chunks(p.slice_ops()) {
            if !p.prefetch_fits(slice.len()) {
                break;
            }
            loaded += p.prefetch(&mut self.tree, slice.iter().map(|k| k.as_ref()))?;
        }
        Ok(loaded)
    }
}
