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

use std::collections::HashMap;
use std::time::Duration;

use bavl_core::Hasher;

use crate::error::{DropReason, SyncError};
use crate::protocol::MIN_CHUNK_LEN;
use crate::request::{Request, RequestId, SourceId, Want};
use crate::source::ManifestState;
use crate::syncer::{Action, Flight, Syncer};

impl<H: Hasher> Syncer<H> {
    pub(crate) fn pump(&mut self, now: Duration) {
        if self.finished {
            return;
        }
        if self.is_complete() {
            // Nothing left to ask for: only the bodies received await their verdicts.
            return self.settle(now);
        }
        // Before the count is known, chunk requests first: they can prove it, manifests
        // cannot, and every source should be asked for one in its first round trip.
        if self.truth.is_none() {
            self.send_early_probes(now);
            self.send_manifests(now);
            self.send_early_fill(now);
        } else {
            self.send_manifests(now);
            self.send_chunks(now);
        }
        if self.truth.is_some() && self.pending.is_empty() {
            self.rescue(now);
        }
        self.settle(now);
    }

    fn send_manifests(&mut self, now: Duration) {
        for s in 0..self.sources.len() {
            let src = &self.sources[s];
            let needed = matches!(src.manifest, ManifestState::Needed);
            let waits = (src.manifest_big && self.truth.is_none()) || src.manifest_after > now;
            if !needed || waits || !src.has_room(now) {
                continue;
            }
            // Before the count is known a manifest is asked at a guess; after, at the most
            // a manifest of that many chunks can take.
            let (limit, guess) = match self.truth {
                Some(t) => (manifest_bound(t.count).min(self.opts.max_manifest_bytes), false),
                None => {
                    let guess = self.opts.manifest_guess.min(self.opts.max_manifest_bytes);
                    // Half of an unproven source's share at most: the rest is for chunks.
                    let share = if src.proven() { u64::MAX } else { self.unproven_share() / 2 };
                    (guess.min(share).max(1024), true)
                }
            };
            let id = SourceId(s as u32);
            if !self.may_send(id, limit, &self.crowd()) {
                continue;
            }
            self.sources[s].manifest = ManifestState::InFlight;
            self.send(now, id, Want::Manifest, limit, guess);
        }
    }

    fn send_chunks(&mut self, now: Duration) {
        while let Some(&index) = self.pending.front() {
            // Arrived meanwhile (a speculative copy, a local chunk), or a copy is being
            // verified: drop it lazily. If that copy fails, it is queued again.
            if self.slots.get(index as usize).is_none_or(|s| s.done || s.verifying > 0) {
                self.pending.pop_front();
                if let Some(s) = self.slots.get_mut(index as usize) {
                    s.queued = false;
                }
                continue;
            }
            let Some((source, size, guess)) = self.pick(now, index, false) else { break };
            self.slots[index as usize].queued = false;
            self.pending.pop_front();
            self.send(now, source, Want::Chunk(index), size, guess);
        }
    }

    /// Before the count is known: the queued indices (chunk 0 to up to `probe` sources,
    /// and early indices given back by a failed or cancelled request); then every source
    /// not yet asked for a chunk is asked for one (the next fresh index of `1..early_end`,
    /// or chunk 0, which every non-empty tree has), before any source is asked for a
    /// second; then fresh indices in order, each to the source with the least in flight.
    /// So every source is asked for something verifiable in its first round trip,
    /// whatever the others do, and one honest source among any crowd proves the count at
    /// once. Those past the end get `404` from honest sources and are cancelled once a
    /// chunk verified; a source whose early chunks were all past the end is asked for
    /// chunk 0.
    fn send_early_probes(&mut self, now: Duration) {
        let queued: Vec<u64> = self.pending.iter().copied().collect();
        for index in queued {
            let slot = &self.slots[index as usize];
            let copies = if index == 0 { self.opts.probe } else { 1 };
            if slot.done || slot.verifying > 0 || slot.copies >= copies {
                self.unqueue(index);
                continue;
            }
            while self.slots[index as usize].copies < copies {
                let Some((source, size, guess)) = self.pick(now, index, false) else { break };
                self.send(now, source, Want::Chunk(index), size, guess);
            }
            if self.slots[index as usize].copies >= copies {
                self.unqueue(index);
            }
        }
        self.probe_every_source(now);
    }

    /// The rest of [`Syncer::send_early_probes`], after the manifests: fresh indices in
    /// order, each to the source with the least in flight.
    fn send_early_fill(&mut self, now: Duration) {
        while self.early_next < self.early_end {
            let index = self.early_next;
            self.grow_slots(index);
            let Some((source, size, guess)) = self.pick(now, index, false) else { break };
            self.early_next += 1;
            self.send(now, source, Want::Chunk(index), size, guess);
        }
    }

    /// Every live source with room that has no chunk request in flight and was never
    /// asked for one (or whose early chunks all lay past the end) is asked for one.
    fn probe_every_source(&mut self, now: Duration) {
        let zero = &self.slots[0];
        let zero_open = !zero.done && zero.verifying == 0;
        for s in 0..self.sources.len() {
            let id = SourceId(s as u32);
            let src = &self.sources[s];
            let chunk_asked =
                self.flights.values().any(|f| f.source == id && f.want != Want::Manifest);
            let idle = !src.probed || (!chunk_asked && !src.early_404.is_empty());
            if !idle || chunk_asked || !src.has_room(now) {
                continue;
            }
            let fresh =
                (self.early_next < self.early_end && !src.probed).then_some(self.early_next);
            for index in fresh.into_iter().chain(zero_open.then_some(0)) {
                self.grow_slots(index);
                if let Some((size, guess)) = self.offer(now, id, index, &self.crowd()) {
                    if Some(index) == fresh {
                        self.early_next += 1;
                    }
                    self.send(now, id, Want::Chunk(index), size, guess);
                    break;
                }
            }
        }
    }

    fn grow_slots(&mut self, index: u64) {
        if self.slots.len() <= index as usize {
            self.slots.resize(index as usize + 1, Default::default());
        }
    }

    fn unqueue(&mut self, index: u64) {
        self.pending.retain(|&i| i != index);
        self.slots[index as usize].queued = false;
    }

    /// When nothing is left to hand out, oldest first, at most [`MAX_COPIES`] copies of a
    /// chunk; the first copy to verify wins:
    /// - **rescue:** a chunk none of whose copies is in good hands (at a proven source,
    ///   not overdue) is given to a proven source with room: work never waits only on
    ///   sources that have not proved themselves, or that stopped delivering, while one
    ///   that delivers is idle;
    /// - **hedge:** a chunk all of whose copies are expected later than a proven source
    ///   with room would answer a new request is given to that source too (a crowd of
    ///   slow but honest sources cannot hold the tail while a fast one idles);
    /// - **speculation** (if on): a chunk with a single copy gets a second one at any
    ///   source, against tail latency.
    fn rescue(&mut self, now: Duration) {
        // Per chunk in flight: the oldest copy, and the earliest expected answer of a copy
        // in good hands (none: no copy is).
        let mut chunks: HashMap<u64, (Duration, Option<Duration>)> = HashMap::new();
        for f in self.flights.values() {
            let Want::Chunk(i) = f.want else { continue };
            let src = &self.sources[f.source.0 as usize];
            let good = src.proven() && !overdue(now, f.sent, src.srtt());
            let eta = good.then(|| expected(now, f.sent, src.srtt()));
            let e = chunks.entry(i).or_insert((f.sent, None));
            e.0 = e.0.min(f.sent);
            e.1 = match (e.1, eta) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let mut order: Vec<(Duration, u64, Option<Duration>)> =
            chunks.into_iter().map(|(i, (sent, eta))| (sent, i, eta)).collect();
        order.sort_unstable();
        for (_, index, eta) in order {
            let slot = &self.slots[index as usize];
            if slot.verifying > 0 || slot.done || slot.copies >= MAX_COPIES {
                continue;
            }
            let lone = slot.copies == 1;
            let best = self.pick(now, index, true);
            let rescue = match (eta, best) {
                (None, best) => best,
                (Some(e), Some(best)) if self.answers_by(now, best.0) < e => Some(best),
                _ => None,
            };
            if let Some((source, size, guess)) = rescue {
                self.status.rescues += 1;
                self.send(now, source, Want::Chunk(index), size, guess);
            } else if let Some((source, size, guess)) =
                (self.opts.speculate && lone).then(|| self.pick(now, index, false)).flatten()
            {
                self.status.speculative += 1;
                self.send(now, source, Want::Chunk(index), size, guess);
            }
        }
    }

    /// When a new request to `source` would be answered: a round trip from now, longer if
    /// it has more in flight than its window holds.
    fn answers_by(&self, now: Duration, source: SourceId) -> Duration {
        let src = &self.sources[source.0 as usize];
        let rtt = src.srtt().unwrap_or(Duration::MAX / 4);
        let queue = f64::from(src.in_flight + 1) / f64::from(src.window().max(1));
        now + rtt.mul_f64(queue.max(1.0))
    }

    /// How many live sources have not proved themselves, and how much they have in
    /// flight: what an unproven source's shares are computed from.
    pub(crate) fn crowd(&self) -> Crowd {
        let unproven = self.sources.iter().filter(|s| s.is_live() && !s.proven());
        let (n, flights, reserved) = unproven
            .fold((0u32, 0u32, 0u64), |(n, f, r), s| (n + 1, f + s.in_flight, r + s.reserved));
        let n = n.max(1);
        Crowd { n, flights, reserved, share: self.opts.max_buffered_bytes / 2 / u64::from(n) }
    }

    /// Whether `source` may be sent one more request of `limit` bytes: within the total
    /// of requests in flight and the budget; an unproven source also within its share of
    /// the half of both that unproven sources may hold together, and within that half
    /// (its first chunk request excepted for the count: every source gets one).
    fn may_send(&self, source: SourceId, limit: u64, crowd: &Crowd) -> bool {
        let src = &self.sources[source.0 as usize];
        let total = self.opts.max_in_flight;
        if self.flights.len() as u32 >= total || !self.fits(limit) {
            return false;
        }
        if src.proven() {
            return true;
        }
        let half = self.opts.max_buffered_bytes / 2;
        let per_source = (total / 2 / crowd.n).max(2);
        (crowd.flights < total / 2 || !src.probed)
            && src.in_flight < per_source
            && src.reserved + limit <= crowd.share
            && crowd.reserved + limit <= half
    }

    /// The size `source` would be asked chunk `index` at, and whether it is a guess, if it
    /// may be asked for it now (see [`Syncer::pick`]).
    fn offer(
        &self,
        now: Duration,
        source: SourceId,
        index: u64,
        crowd: &Crowd,
    ) -> Option<(u64, bool)> {
        let src = &self.sources[source.0 as usize];
        let early = self.truth.is_none();
        if !src.has_room(now) || (early && src.early_404.iter().any(|&j| j <= index)) {
            return None;
        }
        let (size, guess) = match src.manifest() {
            Some(m) => (*m.chunk_sizes.get(index as usize)?, false),
            // While the count is unknown, chunks are asked of sources whose manifest is
            // still on its way: a chunk's URL needs nothing from a manifest. The size is
            // a guess (so a larger chunk is no lie), within the source's share.
            None if early && !self.slots[index as usize].big => {
                let mut guess = self.opts.early_limit.min(self.opts.max_chunk_bytes);
                if !src.proven() {
                    let half = self.opts.max_buffered_bytes / 2;
                    guess = guess
                        .min(crowd.share.saturating_sub(src.reserved))
                        .min(half.saturating_sub(crowd.reserved));
                }
                (guess, true)
            }
            None => return None,
        };
        let usable = size >= MIN_CHUNK_LEN && size <= self.opts.max_chunk_bytes;
        (usable && !self.carries(source, index) && self.may_send(source, size, crowd))
            .then_some((size, guess))
    }

    /// The best source for chunk `index` (proven ones only, if `proven_only`), the size to
    /// ask it at and whether that size is a guess: live, with room in its window, not
    /// backing off, not already asked for it, claiming a size within the limit, within its
    /// shares; proven sources first, by expected answer time, then unproven ones, by
    /// least in flight ([`crate::source`]); ties to the lowest id.
    fn pick(&self, now: Duration, index: u64, proven_only: bool) -> Option<(SourceId, u64, bool)> {
        let crowd = self.crowd();
        let mut best: Option<((u8, f64), SourceId, u64, bool)> = None;
        for (s, src) in self.sources.iter().enumerate() {
            if proven_only && !src.proven() {
                continue;
            }
            let id = SourceId(s as u32);
            let Some((size, guess)) = self.offer(now, id, index, &crowd) else { continue };
            let rank = src.rank();
            if best.as_ref().is_none_or(|(b, ..)| rank < *b) {
                best = Some((rank, id, size, guess));
            }
        }
        best.map(|(_, id, size, guess)| (id, size, guess))
    }

    fn carries(&self, source: SourceId, index: u64) -> bool {
        self.slots[index as usize].copies > 0
            && self.flights.values().any(|f| f.source == source && f.want == Want::Chunk(index))
    }

    fn send(&mut self, now: Duration, source: SourceId, want: Want, limit: u64, guess: bool) {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let deadline = now + self.opts.request_timeout;
        let flight = Flight { source, want, sent: now, deadline, reserved: limit, guess };
        self.flights.insert(id, flight);
        self.status.buffered += limit;
        self.sources[source.0 as usize].reserved += limit;
        self.status.peak_buffered = self.status.peak_buffered.max(self.status.buffered);
        let src = &mut self.sources[source.0 as usize];
        src.in_flight += 1;
        src.stats.requests += 1;
        src.probed |= want != Want::Manifest;
        if let Want::Chunk(i) = want {
            self.slots[i as usize].copies += 1;
            self.status.chunk_requests += 1;
        }
        let path = Request::path_for(want, self.version, &self.root);
        let (min_rate, grace) = (self.opts.min_rate, self.opts.grace);
        let req = Request { id, source, want, path, limit, sent: now, deadline, min_rate, grace };
        self.actions.push_back(Action::Send(req));
    }

    /// At completion: a live source with as many transient failures as verified chunks is
    /// dropped as unreliable; a live source that delivered not one verified chunk, and that was
    /// outrun on a chunk (asked for it before the source that delivered it), failed a
    /// request, or has a request still open that is overdue by the fastest proven
    /// source's round trip, is dropped as unproductive, so the report names every source
    /// that held work it did not do (a crowd of slow or silent sources the sync did not
    /// wait for is still named). A source that answered all it was asked (a manifest,
    /// `404` past the end) is not.
    fn judge_unproductive(&mut self) {
        let fastest = self.sources.iter().filter(|s| s.proven()).filter_map(|s| s.srtt()).min();
        let now = self.now;
        for s in 0..self.sources.len() {
            let src = &self.sources[s];
            let id = SourceId(s as u32);
            let open = self
                .flights
                .values()
                .any(|f| f.source == id && fastest.is_some() && now > overdue_at(f.sent, fastest));
            let held = src.outrun > 0 || src.stats.transient_failures > 0 || open;
            let failed = src.stats.transient_failures;
            if src.is_live() && held && !src.proven() {
                let reason = DropReason::Unproductive { requests: src.stats.requests };
                self.drop_source(id, reason);
            } else if let (true, true, Some(last)) =
                (src.is_live(), failed > 0 && failed >= src.stats.chunks, src.last_failure)
            {
                // As many failed answers as verified chunks: it cost the sync as much as it
                // gave (a source cutting every other answer, in a sync too short for its
                // debt to drop it).
                let reason = DropReason::Unreliable { failures: failed as u32, last };
                self.drop_source(id, reason);
            }
        }
    }

    /// Whether every chunk is accepted or held.
    fn is_complete(&self) -> bool {
        match self.truth {
            Some(t) if t.count == 0 => true,
            Some(t) => self.complete == t.count,
            None => false,
        }
    }

    /// Emits `Done` when every chunk is accepted or held and every body received has had
    /// its verdict (a source that sent a bad one is banned, not left unjudged: at most the
    /// budget's worth of verification, and no body is queued for it once every chunk is
    /// in); `Failed` when nothing can progress.
    fn settle(&mut self, now: Duration) {
        if self.is_complete() {
            if !self.verifying.is_empty() {
                return;
            }
            self.judge_unproductive();
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

/// Copies of one chunk in flight at most (rescues included).
const MAX_COPIES: u8 = 4;

/// What the unproven sources hold together, for their shares.
pub(crate) struct Crowd {
    /// Live unproven sources (at least 1).
    n: u32,
    /// Their requests in flight.
    flights: u32,
    /// The budget they hold.
    reserved: u64,
    /// Each one's share of the budget.
    pub(crate) share: u64,
}

/// Whether a request sent at `sent` to a source of smoothed round trip `srtt` is overdue:
/// four round trips and 100 ms without its answer.
fn overdue(now: Duration, sent: Duration, srtt: Option<Duration>) -> bool {
    now > overdue_at(sent, srtt)
}

/// When a request sent at `sent` to a source of smoothed round trip `srtt` is expected to
/// be answered: a round trip after it was sent, or, if that has passed, a round trip from
/// now (it is late, and no better than a new request).
fn expected(now: Duration, sent: Duration, srtt: Option<Duration>) -> Duration {
    let rtt = srtt.unwrap_or(Duration::ZERO);
    if sent + rtt > now {
        sent + rtt
    } else {
        now + rtt
    }
}

/// When a request sent at `sent` to a source of smoothed round trip `srtt` falls overdue.
pub(crate) fn overdue_at(sent: Duration, srtt: Option<Duration>) -> Duration {
    sent + srtt.map_or(Duration::ZERO, |r| r * 4) + Duration::from_millis(100)
}

/// The largest manifest of `count` chunks (a generous bound: every size of 20 digits and
/// its comma, and 64 KiB for the other fields and any unknown ones).
pub(crate) fn manifest_bound(count: u64) -> u64 {
    count.saturating_mul(21).saturating_add(64 << 10)
}
