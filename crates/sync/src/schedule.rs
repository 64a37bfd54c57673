//! Handing out work: which source is asked for what, within the memory budget.
//!
//! After every event the syncer "pumps": every live source without a manifest is asked
//! for one; then queued chunks go, first in the queue first, each to the source with room
//! in its window that would answer soonest ([`crate::source`]), as long as the request's
//! byte limit fits the budget. Before the chunk count is known, chunk 0 is asked of up
//! to `probe` sources at once and chunks `1..early_chunks` of the others, without waiting
//! for manifests (a chunk's URL needs only the root and its index; the limit is then
//! `early_limit`, a guess). When nothing is queued, idle sources are given copies
//! of chunks still in flight elsewhere (speculation, for tail latency). Last, it decides
//! whether the sync is done or can no longer complete.

use std::time::Duration;

use bavl_core::Hasher;

use crate::error::SyncError;
use crate::request::{Request, RequestId, SourceId, Want};
use crate::source::ManifestState;
use crate::syncer::{Action, Flight, Syncer};

impl<H: Hasher> Syncer<H> {
    pub(crate) fn pump(&mut self, now: Duration) {
        if self.finished {
            return;
        }
        self.send_manifests(now);
        self.send_chunks(now);
        if self.opts.speculate && self.truth.is_some() && self.pending.is_empty() {
            self.speculate(now);
        }
        self.settle(now);
    }

    fn send_manifests(&mut self, now: Duration) {
        for s in 0..self.sources.len() {
            let src = &self.sources[s];
            let needed = matches!(src.manifest, ManifestState::Needed);
            if !needed || !src.is_live() || src.retry_at > now {
                continue;
            }
            if !self.fits(self.opts.max_manifest_bytes) {
                return;
            }
            self.sources[s].manifest = ManifestState::InFlight;
            let limit = self.opts.max_manifest_bytes;
            self.send(now, SourceId(s as u32), Want::Manifest, limit, false);
        }
    }

    fn send_chunks(&mut self, now: Duration) {
        while let Some(&index) = self.pending.front() {
            // Arrived meanwhile (a speculative copy, a local chunk), or (chunk 0, kept
            // queued while it is probed) a copy is being verified: drop it lazily. If that
            // copy fails, it is queued again.
            if self.slots.get(index as usize).is_none_or(|s| s.done || s.verifying > 0) {
                self.pending.pop_front();
                if let Some(s) = self.slots.get_mut(index as usize) {
                    s.queued = false;
                }
                continue;
            }
            let Some((source, size, guess)) = self.pick(now, index) else { break };
            if !self.fits(size) {
                return;
            }
            let slot = &mut self.slots[index as usize];
            // Before the count is known chunk 0 stays queued until `probe` sources have it.
            let probing = index == 0 && self.truth.is_none() && slot.copies + 1 < self.opts.probe;
            if !probing {
                slot.queued = false;
                self.pending.pop_front();
            }
            self.send(now, source, Want::Chunk(index), size, guess);
        }
        if self.truth.is_none() {
            self.send_early(now);
        }
    }

    /// Before the count is known: chunks `1..early_end` in order, to sources with room.
    /// Those past the end get `404` from honest sources and are cancelled once a chunk
    /// verified; the first round trip carries data from every source instead of a probe.
    fn send_early(&mut self, now: Duration) {
        while self.early_next < self.early_end {
            let index = self.early_next;
            if self.slots.len() <= index as usize {
                self.slots.resize(index as usize + 1, Default::default());
            }
            let Some((source, size, guess)) = self.pick(now, index) else { return };
            if !self.fits(size) {
                return;
            }
            self.early_next += 1;
            self.send(now, source, Want::Chunk(index), size, guess);
        }
    }

    fn speculate(&mut self, now: Duration) {
        let mut lone: Vec<(Duration, u64)> = self
            .flights
            .values()
            .filter_map(|f| match f.want {
                Want::Chunk(i) if self.slots[i as usize].copies == 1 => Some((f.sent, i)),
                _ => None,
            })
            .collect();
        lone.sort_unstable();
        for (_, index) in lone {
            if self.slots[index as usize].verifying > 0 {
                continue;
            }
            let Some((source, size, guess)) = self.pick(now, index) else { continue };
            if !self.fits(size) {
                return;
            }
            self.status.speculative += 1;
            self.send(now, source, Want::Chunk(index), size, guess);
        }
    }

    /// The best source for chunk `index`, the size its manifest claims and whether that
    /// size is a guess: live, with room in its window, not backing off, not already asked
    /// for it, claiming a size within the limit.
    fn pick(&self, now: Duration, index: u64) -> Option<(SourceId, u64, bool)> {
        let early = self.truth.is_none();
        let big = self.slots[index as usize].big;
        let mut best: Option<(f64, SourceId, u64, bool)> = None;
        for (s, src) in self.sources.iter().enumerate() {
            let id = SourceId(s as u32);
            if !src.has_room(now) || (early && src.early_404.iter().any(|&j| j <= index)) {
                continue;
            }
            let (size, guess) = match src.manifest() {
                Some(m) => match m.chunk_sizes.get(index as usize) {
                    Some(&size) => (size, false),
                    None => continue,
                },
                // While the count is unknown, chunks are asked of sources whose manifest is
                // still on its way: a chunk's URL needs nothing from a manifest, and every
                // non-empty tree has a chunk 0. This saves the sync a round trip or two at
                // its start. The size is a guess, so a larger chunk is no lie.
                None if early && !big => {
                    (self.opts.early_limit.min(self.opts.max_chunk_bytes), true)
                }
                None => continue,
            };
            if size > self.opts.max_chunk_bytes || self.carries(id, index) {
                continue;
            }
            let score = src.score();
            if best.is_none_or(|(b, ..)| score < b) {
                best = Some((score, id, size, guess));
            }
        }
        best.map(|(_, id, size, guess)| (id, size, guess))
    }

    fn carries(&self, source: SourceId, index: u64) -> bool {
        self.slots[index as usize].copies > 0
            && self.flights.values().any(|f| f.source == source && f.want == Want::Chunk(index))
    }

    fn fits(&self, bytes: u64) -> bool {
        self.status.buffered + bytes <= self.opts.max_buffered_bytes
    }

    fn send(&mut self, now: Duration, source: SourceId, want: Want, limit: u64, guess: bool) {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let deadline = now + self.opts.request_timeout;
        let flight = Flight { source, want, sent: now, deadline, reserved: limit, guess };
        self.flights.insert(id, flight);
        self.status.buffered += limit;
        self.status.peak_buffered = self.status.peak_buffered.max(self.status.buffered);
        let src = &mut self.sources[source.0 as usize];
        src.in_flight += 1;
        src.stats.requests += 1;
        if let Want::Chunk(i) = want {
            self.slots[i as usize].copies += 1;
            self.status.chunk_requests += 1;
        }
        let path = Request::path_for(want, self.version, &self.root);
        let (min_rate, grace) = (self.opts.min_rate, self.opts.grace);
        let req = Request { id, source, want, path, limit, sent: now, deadline, min_rate, grace };
        self.actions.push_back(Action::Send(req));
    }

    /// Emits `Done` when every chunk is verified, `Failed` when nothing can progress.
    fn settle(&mut self, now: Duration) {
        let complete = match self.truth {
            Some(t) if t.count == 0 => true,
            Some(_) => self.restore.is_complete(),
            None => false,
        };
        if complete {
            self.finished = true;
            self.done = true;
            self.actions.push_back(Action::Done);
            return;
        }
        if self.sources.is_empty() || !self.flights.is_empty() || !self.verifying.is_empty() {
            return;
        }
        // Nothing in flight: can a live source still be asked, now or after its backoff?
        let waiting = self.sources.iter().any(|s| {
            s.is_live() && (s.retry_at > now || !matches!(s.manifest, ManifestState::Have(_)))
        });
        if waiting {
            return;
        }
        let live = self.sources.iter().filter(|s| s.is_live()).count();
        let missing = self.truth.map_or(1, |t| t.count) - self.status().verified;
        if live > 0 {
            if let Some(&index) = self.pending.front() {
                let limit = self.opts.max_chunk_bytes;
                self.fail(SyncError::ChunkTooLarge { index, limit });
                return;
            }
        }
        let banned =
            self.sources.iter().filter(|s| matches!(s.health, crate::Health::Banned(_))).count();
        let dropped = self.sources.len() - live - banned;
        self.fail(SyncError::NoSources { banned, dropped, missing });
    }
}
