//! Eviction (`docs/design.md` §8.5.1): after each commit, the working tree's resident
//! bodies are brought back within the budget (divided by the allocator's slack factor,
//! less what retained versions hold alone and what the commit loaded) by a clock sweep:
//! one walk from the hand picks clean bodies to drop (appending a changed one to the
//! current chunk file first), and only those are paged out.

use std::ops::ControlFlow;

use bavl_core::{SkeletonStats, Tree};

use crate::paging::Pager;
use crate::StoreError;

impl Pager {
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
        let s = tree.skeleton_stats();
        let mut resident = s.resident_bytes;
        let factor = self.slack.factor(resident + self.pinned, s.skeleton_bytes, self.budget);
        self.stats.slack_permille = self.slack.permille();
        let budget = (self.budget as f64 / factor) as u64;
        let room = self.pinned + std::mem::take(&mut self.loaded_bytes);
        let target = budget.saturating_sub(room).max(budget / 4);
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
