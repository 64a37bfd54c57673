//! Eviction (`docs/design.md` §8.5.1): after each commit, the working tree's resident
//! bodies are brought back within the budget (divided by the allocator's slack factor,
//! less what retained versions hold alone and what the commit loaded) by a clock sweep:
//! one walk from the hand picks clean bodies to drop (appending a changed one to the
//! current chunk file first), and only those are paged out.
//!
//! Within a block (a live writer's inserts, removes and reads, or a version replayed on
//! open) the same pass runs as soon as what was loaded and written since the last pass
//! may have taken the bodies past the budget ([`Pager::relieve`]): the bodies held never
//! depend on how large one block is.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use bavl_core::{SkeletonStats, Snapshot, Tree};

use crate::paging::{unpin_beside, Pager};
use crate::StoreError;

/// The least growth between two eviction passes within a block, so that a budget far
/// smaller than a chunk (tests run with 0) does not walk the tree at every operation.
pub(crate) const MIN_STEP: u64 = 256 << 10;
/// What an operation is counted to grow the bodies by beyond twice its key and value
/// (an entry, its level hash, a split's new chunk spread over the operations).
const OP_OVERHEAD: u64 = 128;
/// The most operations of a replayed version prefetched at once.
const MAX_SLICE: u64 = 4096;
/// The mean body assumed before any was loaded (a 64-entry chunk of 120-byte entries).
const ASSUMED_BODY: u64 = 8 << 10;

impl Pager {
    /// Counts an operation of `bytes` of key and value about to be applied towards the
    /// growth that triggers [`Pager::relieve`].
    pub(crate) fn note_op(&mut self, bytes: u64) {
        self.grown += 2 * bytes + OP_OVERHEAD;
    }

    /// The budget divided by the slack factor of the last pass (`crate::slack`).
    fn effective_budget(&self) -> u64 {
        let permille = self.stats.slack_permille.max(1000);
        (self.budget as u128 * 1000 / permille as u128) as u64
    }

    /// The mean heap bytes of a body loaded so far ([`ASSUMED_BODY`] before any).
    fn mean_body(&self) -> u64 {
        match self.stats.loads {
            0 => ASSUMED_BODY,
            n => (self.loaded_total / n).max(1),
        }
    }

    /// Whether the bodies loaded and written since the last pass may have taken the
    /// working tree's resident bodies past the budget.
    pub(crate) fn over_budget(&self) -> bool {
        let budget = self.effective_budget();
        self.grown >= MIN_STEP && self.stats.resident_bytes + self.grown > budget
    }

    /// Between two operations of a block (never a version, so nothing records this
    /// state): when [`Pager::over_budget`], hashes `tree`, evicts it to half the budget
    /// and makes the retained `versions` let go of the bodies on disk it no longer holds
    /// (beside `tree` as it stands), as a commit does. Changes no hash and no key.
    pub(crate) fn relieve(
        &mut self,
        tree: &mut Tree,
        versions: &mut BTreeMap<u64, Snapshot>,
    ) -> Result<(), StoreError> {
        if !self.over_budget() {
            return Ok(());
        }
        self.relieve_now(tree, versions)
    }

    /// [`Pager::relieve`] whether or not over budget (to make room for a prefetch).
    pub(crate) fn relieve_now(
        &mut self,
        tree: &mut Tree,
        versions: &mut BTreeMap<u64, Snapshot>,
    ) -> Result<(), StoreError> {
        tree.root_hash();
        self.stats.mid_evictions += 1;
        self.evict_to(tree, 2)?;
        // Hashed just above: O(1). Dropped at once; the versions share its nodes.
        let now = tree.snapshot();
        let pinned = unpin_beside(versions.values_mut().rev(), now);
        self.set_pinned(pinned);
        Ok(())
    }

    /// How many operations of a replayed version to prefetch at once: about a quarter of
    /// the budget of bodies (three chunks an operation at most: its own and the two
    /// neighbours a full one evens out over), between 1 and [`MAX_SLICE`].
    pub(crate) fn slice_ops(&self) -> usize {
        (self.effective_budget() / 4 / (3 * self.mean_body())).clamp(1, MAX_SLICE) as usize
    }

    /// Whether a prefetch of `ops` more operations fits beside what is held: in the
    /// budget, or in [`MIN_STEP`] if the budget is smaller (what [`Pager::relieve`] lets
    /// the bodies grow by anyway).
    pub(crate) fn prefetch_fits(&self, ops: usize) -> bool {
        let room = self.effective_budget().max(MIN_STEP);
        self.stats.resident_bytes + self.grown + 3 * self.mean_body() * ops as u64 <= room
    }

    /// Evicts chunks of the (fully hashed) `tree`, sweeping from the clock hand, until its
    /// resident bodies fit the budget; a body with no location is appended to the page
    /// file first. Bodies shared with retained versions are freed when those are pruned.
    ///
    /// Retained versions drop every body that is on disk and not in the working tree
    /// ([`Store::unpin_retained`]); what they still hold (the originals of chunks copied
    /// on write before their body was ever written) shrinks the working tree's share of
    /// the budget (to a quarter of it at least), so that all bodies together stay near the
    /// budget rather than `keep_recent` times it.
    ///
    /// With the allocator's slack counted (`crate::slack`), the budget is first divided
    /// by the memory the process gained per byte counted.
    pub(crate) fn evict(&mut self, tree: &mut Tree) -> Result<(), StoreError> {
        self.evict_to(tree, 1)
    }

    /// [`Pager::evict`] to at most the budget (divided by the slack factor) over
    /// `fraction` of resident bodies.
    fn evict_to(&mut self, tree: &mut Tree, fraction: u64) -> Result<(), StoreError> {
        let s = tree.skeleton_stats();
        let mut resident = s.resident_bytes;
        self.stats.peak_resident_bytes = self.stats.peak_resident_bytes.max(resident);
        self.grown = 0;
        let factor = self.slack.factor(resident + self.pinned, s.skeleton_bytes, self.budget);
        self.stats.slack_permille = self.slack.permille();
        let budget = (self.budget as f64 / factor) as u64;
        let room = self.pinned + std::mem::take(&mut self.loaded_bytes);
        let target = budget.saturating_sub(room).max(budget / 4).min(budget / fraction);
        let mut skeleton = s.skeleton_bytes;
        if resident > target {
            // Pick in one walk from the hand (wrapping once), then page out: a descent
            // from the root per index swept cost 80 ms a commit at 30M keys.
            let picked = self.sweep(tree, resident - target)?;
            for (i, page) in picked {
                if let Some(freed) = tree.page_out(i) {
                    resident = resident.saturating_sub(freed as u64 + 16);
                    skeleton += page;
                    self.stats.evictions += 1;
                }
            }
        }
        self.stats.resident_bytes = resident;
        self.stats.skeleton_bytes = skeleton;
        Ok(())
    }

    /// The chunks to evict to free `need` bytes, in order from the clock hand (wrapping
    /// once), which it advances past the last chunk looked at, each with the skeleton
    /// bytes it will take once absent; a resident body with no location is appended to
    /// the current chunk file first, so that it can be.
    fn sweep(&mut self, tree: &Tree, need: u64) -> Result<Vec<(u64, u64)>, StoreError> {
        let n = tree.chunk_count();
        let start = if self.hand >= n { 0 } else { self.hand };
        let (mut picked, mut freed, mut failed) = (Vec::new(), 0u64, None);
        let mut last = start;
        for (from, to) in [(start, n), (0, start)] {
            tree.for_each_chunk_from(from, |c| {
                if c.index >= to || freed >= need {
                    return ControlFlow::Break(());
                }
                last = c.index;
                if c.body_id().is_some() && c.location().is_none() {
                    let mut buf = std::mem::take(&mut self.buf);
                    buf.clear();
                    if c.encode_body(&mut buf) {
                        match self.append(&buf) {
                            Ok(loc) => {
                                c.set_location(loc);
                            }
                            Err(e) => failed = Some(e),
                        }
                    }
                    self.buf = buf;
                }
                if failed.is_some() {
                    return ControlFlow::Break(());
                }
                if c.is_evictable() {
                    picked.push((c.index, SkeletonStats::page_bytes(c.first_key().len())));
                    freed += c.heap_bytes() as u64 + 16;
                }
                ControlFlow::Continue(())
            });
            if freed >= need || failed.is_some() {
                break;
            }
        }
        self.hand = last + 1;
        match failed {
            Some(e) => Err(e),
            None => Ok(picked),
        }
    }
}
