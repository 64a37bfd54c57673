//! Loading a block's chunks before it is applied (`docs/design.md` §8.5.1): the chunks
//! holding the keys a block (or a logged version, replayed on open) will touch are read
//! on several threads, each body decoded and hashed there, so that the writer's thread
//! only verifies by comparing and installs them.

use bavl_core::{Body, PageRef, Tree};

use crate::paging::{split_loc, Pager};
use crate::{Store, StoreError};

/// Threads of one prefetch: reads of chunk files wait on the disk far more than they
/// compute (one read, a decode and a hash per chunk), so more threads than cores keep
/// more reads in flight, as NOMT's io_uring queue does.
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
        let threads = PREFETCH_THREADS.min(pages.len().div_ceil(MIN_PER_THREAD)).max(1);
        let files = &self.files;
        type Read<'a> = Vec<(&'a PageRef, Result<Body, StoreError>)>;
        let read: Read<'_> = std::thread::scope(|s| {
            let parts = pages.chunks(pages.len().div_ceil(threads).max(1));
            let handles: Vec<_> = parts
                .map(|part| {
                    s.spawn(move || -> Read<'_> {
                        // Decoded and hashed here: the writer's thread only compares.
                        let read = |pg| {
                            files.read(pg).map(|mut b: Body| {
                                b.prehash::<bavl_core::Sha256>();
                                b
                            })
                        };
                        part.iter().map(|pg| (pg, read(pg))).collect()
                    })
                })
                .collect();
            // A reading thread that panicked loads nothing: its chunks load on demand.
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        });
        let mut installed = Vec::with_capacity(read.len());
        let mut failed = None;
        for (pg, body) in read {
            let r = body.and_then(|b| {
                tree.page_in(pg.index, b).map_err(|e| {
                    StoreError::corrupted(
                        &files.name_of(pg.loc),
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
}

impl Store {
    /// Loads, on up to [`PREFETCH_THREADS`] threads, the paged-out chunks holding `keys`
    /// (what a block about to be applied will touch), then the neighbours an insert of a
    /// new key into a full one needs; anything else an operation needs (a neighbour after
    /// the block's own splits, a remove's) it loads itself. Returns how many chunks were
    /// loaded; a no-op without paging. Each body is verified as on any load.
    pub fn prefetch<K: AsRef<[u8]>>(&mut self, keys: &[K]) -> Result<usize, StoreError> {
        match &mut self.pager {
            Some(p) => p.prefetch(&mut self.tree, keys.iter().map(|k| k.as_ref())),
            None => Ok(0),
        }
    }
}
