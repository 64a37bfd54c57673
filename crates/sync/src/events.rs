//! How the syncer learns from each event: responses, failures, verification outcomes and
//! time. Each handler settles the books first (the request's reservation and counts, in
//! `books.rs`), then judges the source by the peer policy of `docs/sync-protocol.md` §5.
//!
//! What a source earns: only a chunk that verifies measures its round trip, grows its
//! window and pays down its failure debt; a manifest or a `404`, however fast, earns
//! nothing. What it costs: a parsed manifest is charged to the budget for as long as it is
//! kept, and released when its source is banned or dropped.

use std::time::Duration;

use bavl_core::hash::{root_hash, EMPTY_TOP};
use bavl_core::Hasher;

use crate::error::{BanReason, DropReason, ManifestError};
use crate::protocol::Manifest;
use crate::request::{FailureKind, RequestId, SourceId, Verdict, Want};
use crate::source::ManifestState;
use crate::syncer::{Action, Flight, Pending, Syncer, Truth};
use crate::verify::{Verified, VerifyJob};

/// What a parsed manifest of `chunk_count` entries is charged to the budget: its sizes
/// (8 bytes each) and the rest of the structure.
pub(crate) fn manifest_cost(chunk_count: u64) -> u64 {
    chunk_count.saturating_mul(8).saturating_add(256)
}

impl<H: Hasher> Syncer<H> {
    pub(crate) fn on_response(&mut self, now: Duration, id: RequestId, body: Vec<u8>) {
        let Some(f) = self.end_flight(id) else { return };
        let len = body.len() as u64;
        if len > f.reserved {
            // The transport should have cut it: the same verdict.
            return self.on_failed_flight(now, f, FailureKind::TooLong);
        }
        self.sources[f.source.0 as usize].stats.bytes += len;
        match f.want {
            Want::Manifest => self.on_manifest(now, f.source, &body, f.reserved),
            Want::Chunk(index) => {
                let slot = &mut self.slots[index as usize];
                if slot.done {
                    self.sources[f.source.0 as usize].stats.duplicates += 1;
                    return;
                }
                slot.verifying += 1;
                self.status.buffered += len;
                self.sources[f.source.0 as usize].reserved += len;
                let rtt = now.saturating_sub(f.sent);
                let pending = Pending { source: f.source, index, len, sent: f.sent, rtt };
                self.verifying.insert(id, pending);
                let job = VerifyJob { id, source: f.source, index, root: self.root, body };
                self.actions.push_back(Action::Verify(job));
            }
        }
    }

    /// A manifest body, asked at `limit` bytes (released just before).
    fn on_manifest(&mut self, now: Duration, source: SourceId, body: &[u8], limit: u64) {
        let m = match Manifest::decode(body, self.version, &self.root) {
            Ok(m) => m,
            Err(e) => return self.ban(source, BanReason::InvalidManifest(e)),
        };
        if m.chunk_count == 0 && self.truth.is_none() {
            // An empty tree has no chunk to prove it: the root does.
            if root_hash::<H>(m.capacity, &EMPTY_TOP) != self.root {
                let e = ManifestError::Contradicted("the root is not that of an empty tree");
                return self.ban(source, BanReason::InvalidManifest(e));
            }
            self.truth = Some(Truth { count: 0, capacity: m.capacity, keys: Some(0) });
            // Chunks may have been asked for before this manifest came: nothing will be
            // kept of them (the slots stay, for late answers to land on; none can verify).
            self.cancel_chunks(|_| true);
            self.pending.clear();
            self.slots.iter_mut().for_each(|s| s.queued = false);
        }
        if let Some(t) = self.truth {
            if m.chunk_count != t.count {
                // Not held even for a moment: contradicted at once.
                let e = ManifestError::Contradicted("chunk count, capacity or key count");
                return self.ban(source, BanReason::InvalidManifest(e));
            }
        }
        // Held in place of the request's reservation, if it is no larger; else only within
        // the budget and the source's share.
        let cost = manifest_cost(m.chunk_count);
        let in_place = self.fits(cost) && cost <= limit;
        if !in_place && !self.can_hold(source, cost) {
            // No room for it now: asked again once the count is known (its bound is then
            // exact), and no sooner than a second from now.
            let src = &mut self.sources[source.0 as usize];
            src.manifest = ManifestState::Needed;
            src.manifest_big = true;
            src.manifest_after = now + Duration::from_secs(1);
            return;
        }
        let src = &mut self.sources[source.0 as usize];
        // A source that said `404` for a chunk its own manifest lists does not hold it.
        let denied = self.truth.is_none() && src.early_404.iter().any(|&i| i < m.chunk_count);
        src.manifest = ManifestState::Have(m);
        src.manifest_held = cost;
        src.reserved += cost;
        self.status.buffered += cost;
        self.status.peak_buffered = self.status.peak_buffered.max(self.status.buffered);
        if denied {
            return self.drop_source(source, DropReason::NotFound(404));
        }
        self.check_manifest(source);
    }

    pub(crate) fn on_failed(&mut self, now: Duration, id: RequestId, kind: FailureKind) {
        let Some(f) = self.end_flight(id) else { return };
        self.on_failed_flight(now, f, kind);
    }

    fn on_failed_flight(&mut self, now: Duration, f: Flight, kind: FailureKind) {
        if f.guess && kind == FailureKind::TooLong {
            return self.outgrew_guess(f.source, f.want);
        }
        if let (Want::Chunk(index), None, Verdict::Unavailable) =
            (f.want, self.truth, kind.verdict())
        {
            return self.early_not_found(f.source, index);
        }
        self.requeue_want(f.want);
        let (base, max, retries) =
            (self.opts.backoff_base, self.opts.backoff_max, self.opts.max_retries);
        let src = &mut self.sources[f.source.0 as usize];
        if f.want == Want::Manifest && src.is_live() {
            src.manifest = ManifestState::Needed;
        }
        match kind.verdict() {
            Verdict::Transient => {
                src.on_transient(now, kind, base, max);
                if src.failures > retries || src.debt > f64::from(retries) {
                    let reason = DropReason::Unreliable { failures: src.failures, last: kind };
                    self.drop_source(f.source, reason);
                }
            }
            Verdict::Unavailable => {
                let status = if let FailureKind::Http(s) = kind { s } else { 404 };
                self.drop_source(f.source, DropReason::NotFound(status));
            }
            Verdict::Invalid => self.ban(f.source, BanReason::Failure(kind)),
        }
    }

    pub(crate) fn on_verified(&mut self, v: Verified) {
        let Some(p) = self.verifying.remove(&v.id) else { return };
        self.status.buffered -= p.len;
        self.sources[p.source.0 as usize].reserved -= p.len;
        self.slots[p.index as usize].verifying -= 1;
        match v.outcome {
            Ok(vc) if vc.index == p.index && vc.root == self.root => {
                let tolerance = self.opts.latency_tolerance;
                self.sources[p.source.0 as usize].on_verified(p.rtt, p.len, tolerance);
                if self.slots[p.index as usize].done {
                    self.sources[p.source.0 as usize].stats.duplicates += 1;
                    return;
                }
                if let Err(e) = self.accept(&vc, p.len) {
                    // Only chunks given as held, of another tree, can contradict a chunk
                    // verified against the root.
                    self.fail(crate::SyncError::Restore(e));
                    return;
                }
                self.sources[p.source.0 as usize].stats.chunks += 1;
                let (index, source, len) = (p.index, p.source, p.len);
                let chunk = Box::new(vc);
                self.actions.push_back(Action::Accepted { index, source, len, chunk });
                self.drop_outrun(index, p.sent, p.rtt);
                self.cancel_copies(index, p.sent);
            }
            Ok(_) => {
                let e = bavl_core::ProofError::Structure("verified for another index or root");
                self.reject(p.source, p.index, e);
            }
            Err(e) => self.reject(p.source, p.index, e),
        }
    }

    /// Chunk `index`, asked of the winner at `sent` and answered in `rtt`, verified: an
    /// unproven source that had been asked for it earlier and has still not answered,
    /// after eight times the winner's round trip and at least half a second, was outrun
    /// by a later copy. It held work it did not do; it is dropped (not called a liar: it
    /// may only be slow, and a slow source that has not proved itself is no use here).
    fn drop_outrun(&mut self, index: u64, sent: Duration, rtt: Duration) {
        let patience = (rtt * 8).max(Duration::from_millis(500));
        let now = self.now;
        let slow: Vec<SourceId> = self
            .flights
            .values()
            .filter(|f| f.want == Want::Chunk(index) && f.sent < sent)
            .filter(|f| now.saturating_sub(f.sent) > patience)
            .map(|f| f.source)
            .filter(|s| !self.sources[s.0 as usize].proven())
            .collect();
        for s in slow {
            self.drop_source(s, DropReason::Outrun { index });
        }
    }

    /// A request asked at a guessed limit outgrew it: no lie. A chunk is asked again only
    /// at a size a manifest states; a manifest, once the count bounds it exactly.
    fn outgrew_guess(&mut self, source: SourceId, want: Want) {
        match want {
            Want::Chunk(index) => {
                self.slots[index as usize].big = true;
                self.requeue(index);
            }
            Want::Manifest => {
                let src = &mut self.sources[source.0 as usize];
                if src.is_live() {
                    src.manifest = ManifestState::Needed;
                    src.manifest_big = true;
                }
            }
        }
    }

    /// `404` for a chunk asked for before the count was known: the tree may be smaller
    /// (or empty), so the source is judged only once its manifest or the first verified
    /// chunk tells; meanwhile it is asked for nothing at or beyond that index. Other
    /// sources are not held to its word: the index is queued again for them.
    fn early_not_found(&mut self, source: SourceId, index: u64) {
        let src = &mut self.sources[source.0 as usize];
        src.early_404.push(index);
        let listed = src.manifest().is_some_and(|m| index < m.chunk_count);
        if listed {
            return self.drop_source(source, DropReason::NotFound(404));
        }
        self.requeue(index);
    }

    fn reject(&mut self, source: SourceId, index: u64, e: bavl_core::ProofError) {
        self.slots[index as usize].failed = true;
        self.ban(source, BanReason::InvalidChunk { index, source: e });
        self.requeue(index);
    }

    pub(crate) fn on_tick(&mut self, now: Duration) {
        let expired: Vec<RequestId> =
            self.flights.iter().filter(|(_, f)| f.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.actions.push_back(Action::Cancel(id));
            self.on_failed(now, id, FailureKind::Timeout);
        }
    }
}
