//! The syncer's books: keeping verified chunks and learning the truth from the first,
//! holding manifests against it, and the accounting of every request, reservation,
//! queue entry and source verdict.
//!
//! Invariants kept here: `status.buffered` is the sum over sources of `reserved` (request
//! limits in flight, bodies awaiting verification, parsed manifests); a banned or dropped
//! source holds nothing (its requests are cancelled and its manifest released); a chunk
//! is queued at most once and only while nothing else will bring it.

use std::time::Duration;

use bavl_core::{Hasher, RestoreError, VerifiedChunk};

use crate::error::{BanReason, DropReason, ManifestError, SyncError};
use crate::request::{RequestId, SourceId, Want};
use crate::source::{Health, ManifestState};
use crate::syncer::{Action, Flight, Slot, Syncer, Truth};

impl<H: Hasher> Syncer<H> {
    /// Marks a verified chunk done; learns the truth from the first one. A chunk that
    /// contradicts the truth (which only held chunks of another tree could have given) is
    /// refused, changing nothing.
    pub(crate) fn accept(&mut self, vc: &VerifiedChunk, len: u64) -> Result<(), RestoreError> {
        let index = vc.index;
        let keys = Some(vc.key_count);
        let truth = Truth { count: vc.chunk_count, capacity: vc.capacity, keys };
        let contradicts = |t: &Truth| {
            (t.count, t.capacity) != (truth.count, truth.capacity)
                || t.keys.is_some_and(|k| Some(k) != keys)
        };
        if self.truth.as_ref().is_some_and(contradicts) || vc.root != self.root {
            return Err(RestoreError::Inconsistent(
                "chunk count or capacity differs between chunks",
            ));
        }
        let first = match &mut self.truth {
            None => {
                self.learn(truth, Some(index));
                true
            }
            // The key count was unknown (only held chunks told the shape): learned now,
            // and every manifest is held against it below.
            Some(t) if t.keys.is_none() => {
                t.keys = keys;
                true
            }
            Some(_) => false,
        };
        let slot = &mut self.slots[index as usize];
        if slot.done {
            return Err(RestoreError::Duplicate(index));
        }
        slot.done = true;
        slot.size = len;
        self.complete += 1;
        if slot.failed {
            self.status.refetches += 1;
        }
        if first {
            // Every manifest can now be held against the truth, and every early `404`.
            for s in 0..self.sources.len() {
                let early_404 = std::mem::take(&mut self.sources[s].early_404);
                if early_404.iter().any(|&i| i < truth.count) {
                    self.drop_source(SourceId(s as u32), DropReason::NotFound(404));
                }
                self.check_manifest(SourceId(s as u32));
            }
        } else {
            // Manifests already agreed with every earlier chunk: only this one is new
            // (a scan of all slots per chunk would make the sync quadratic).
            for s in 0..self.sources.len() {
                let source = &self.sources[s];
                let Some(m) = source.manifest() else { continue };
                if !source.is_live() {
                    continue;
                }
                match m.chunk_sizes.get(index as usize) {
                    Some(&claimed) if claimed != len => {
                        let r = BanReason::SizeMismatch { index, len, claimed };
                        self.ban(SourceId(s as u32), r);
                    }
                    Some(_) => {}
                    // Not held against the truth yet: the full check does it.
                    None => self.check_manifest(SourceId(s as u32)),
                }
            }
        }
        Ok(())
    }

    /// The truth is known (from the first verified chunk, `index`, or from held chunks):
    /// every slot is made, every chunk neither held nor in flight is queued, and early
    /// requests past the end are cancelled.
    pub(crate) fn learn(&mut self, truth: Truth, index: Option<u64>) {
        self.truth = Some(truth);
        if self.slots.len() < truth.count as usize {
            self.slots.resize(truth.count as usize, Slot::default());
        }
        for i in 0..truth.count {
            let s = &mut self.slots[i as usize];
            if Some(i) != index && !s.done && !s.queued && s.copies == 0 && s.verifying == 0 {
                s.queued = true;
                self.pending.push_back(i);
            }
        }
        // Early requests past the end can bring nothing (honest sources say `404`).
        self.cancel_chunks(|i| i >= truth.count);
    }

    /// Bans the source if its manifest contradicts what verified chunks proved.
    pub(crate) fn check_manifest(&mut self, source: SourceId) {
        let (Some(t), Some(m)) = (self.truth, self.sources[source.0 as usize].manifest()) else {
            return;
        };
        if !self.sources[source.0 as usize].is_live() {
            return;
        }
        let reason = if m.chunk_count != t.count
            || m.capacity != t.capacity
            || t.keys.is_some_and(|k| m.key_count != k)
        {
            Some(BanReason::InvalidManifest(ManifestError::Contradicted(
                "chunk count, capacity or key count",
            )))
        } else {
            let wrong = self
                .slots
                .iter()
                .enumerate()
                .find(|(i, s)| s.done && s.size != 0 && m.chunk_sizes[*i] != s.size);
            wrong.map(|(i, s)| BanReason::SizeMismatch {
                index: i as u64,
                len: s.size,
                claimed: m.chunk_sizes[i],
            })
        };
        if let Some(r) = reason {
            self.ban(source, r);
        }
    }

    /// Removes a request from the books: its reservation, its source's and slot's counts.
    pub(crate) fn end_flight(&mut self, id: RequestId) -> Option<Flight> {
        let f = self.flights.remove(&id)?;
        self.status.buffered -= f.reserved;
        let src = &mut self.sources[f.source.0 as usize];
        src.in_flight -= 1;
        src.reserved -= f.reserved;
        if let Want::Chunk(i) = f.want {
            self.slots[i as usize].copies -= 1;
        }
        Some(f)
    }

    pub(crate) fn requeue_want(&mut self, want: Want) {
        if let Want::Chunk(i) = want {
            self.slots[i as usize].failed = true;
            self.requeue(i);
        }
    }

    /// Queues the index again, first, if nothing else will bring it. Before the count is
    /// known only indices of the early range are queued (the others are once it is);
    /// none past the end.
    pub(crate) fn requeue(&mut self, index: u64) {
        match self.truth {
            Some(t) if index >= t.count => return,
            None if index >= self.early_end => return,
            _ => {}
        }
        let Some(slot) = self.slots.get_mut(index as usize) else { return };
        if !slot.done && !slot.queued && slot.copies == 0 && slot.verifying == 0 {
            slot.queued = true;
            self.pending.push_front(index);
        }
    }

    /// Chunk `index`, asked of the winner at `sent`, verified: its other copies are
    /// cancelled, and each source that had been asked for it earlier was outrun (what the
    /// report at completion holds against a source that delivered nothing; dropping one
    /// during the sync takes more patience: `drop_outrun`).
    pub(crate) fn cancel_copies(&mut self, index: u64, sent: Duration) {
        let outrun = |f: &&Flight| f.want == Want::Chunk(index) && f.sent < sent;
        for f in self.flights.values().filter(outrun) {
            self.sources[f.source.0 as usize].outrun += 1;
        }
        self.cancel_chunks(|i| i == index);
    }

    /// Cancels the chunk requests in flight whose index matches.
    pub(crate) fn cancel_chunks(&mut self, which: impl Fn(u64) -> bool) {
        let ids: Vec<RequestId> = self
            .flights
            .iter()
            .filter(|(_, f)| matches!(f.want, Want::Chunk(i) if which(i)))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.end_flight(id);
            self.actions.push_back(Action::Cancel(id));
        }
    }

    fn cancel_source(&mut self, source: SourceId) {
        let ids: Vec<RequestId> =
            self.flights.iter().filter(|(_, f)| f.source == source).map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(f) = self.end_flight(id) {
                self.actions.push_back(Action::Cancel(id));
                self.requeue_want(f.want);
            }
        }
    }

    pub(crate) fn ban(&mut self, source: SourceId, reason: BanReason) {
        let src = &mut self.sources[source.0 as usize];
        if !src.is_live() {
            return;
        }
        src.health = Health::Banned(reason.clone());
        self.actions.push_back(Action::Banned { source, reason });
        self.cancel_source(source);
        self.release_manifest(source);
    }

    pub(crate) fn drop_source(&mut self, source: SourceId, reason: DropReason) {
        let src = &mut self.sources[source.0 as usize];
        if !src.is_live() {
            return;
        }
        src.health = Health::Dropped(reason.clone());
        self.actions.push_back(Action::Dropped { source, reason });
        self.cancel_source(source);
        self.release_manifest(source);
    }

    /// Frees the parsed manifest of a source that is no longer asked.
    fn release_manifest(&mut self, source: SourceId) {
        let src = &mut self.sources[source.0 as usize];
        let held = std::mem::take(&mut src.manifest_held);
        src.reserved -= held;
        src.manifest = ManifestState::Needed;
        self.status.buffered -= held;
    }

    /// Whether `source` may be charged `bytes` more: within the budget and, for a source
    /// that has not proved itself, within its share of the half of the budget that
    /// unproven sources may hold together.
    pub(crate) fn can_hold(&self, source: SourceId, bytes: u64) -> bool {
        let src = &self.sources[source.0 as usize];
        self.fits(bytes) && (src.proven() || src.reserved + bytes <= self.unproven_share())
    }

    /// An unproven source's share of the budget: half of it, split evenly among the live
    /// unproven sources.
    pub(crate) fn unproven_share(&self) -> u64 {
        self.crowd().share
    }

    pub(crate) fn fits(&self, bytes: u64) -> bool {
        self.status.buffered + bytes <= self.opts.max_buffered_bytes
    }

    pub(crate) fn fail(&mut self, e: SyncError) {
        if !self.finished {
            self.finished = true;
            self.actions.push_back(Action::Failed(e));
        }
    }
}
