//! The sans-I/O sync state machine: events in, actions out.
//!
//! A [`Syncer`] owns the [`Restore`] of one trusted `(root, version)` and decides which
//! source is asked for what. It has no threads, no clock and no sockets: the caller feeds
//! it [`Event`]s with the current time (any monotonic clock, as a `Duration` since an epoch
//! of the caller's choosing) and carries out the [`Action`]s it queues. The same
//! sequence of events always gives the same actions.
//!
//! Guarantees, whatever the sources send:
//! - a chunk is kept only once it verified against the trusted root;
//! - a source is banned at its first invalid response (`docs/sync-protocol.md`, peer
//!   policy) and what it was asked for is asked of another source;
//! - `buffered()` — the byte limits of requests in flight plus the bodies awaiting
//!   verification — never exceeds `Options::max_buffered_bytes` (verified chunks live in
//!   the [`Restore`], as the rebuilt tree will);
//! - [`Action::Done`] comes once every chunk is verified, while one honest source is left.
//!
//! The caller must: make each [`Action::Send`] request and read its body through
//! [`crate::BodyGuard`]; report its outcome exactly once (or not at all after
//! [`Action::Cancel`]); run each [`Action::Verify`] job (on any thread) and feed back its
//! [`Verified`]; call [`Syncer::tick`] by [`Syncer::next_wakeup`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use bavl_core::hash::{root_hash, EMPTY_TOP};
use bavl_core::{Digest, Hasher, Restore, Sha256, Tree, VerifiedChunk};

use crate::error::{BanReason, DropReason, ManifestError, OptionsError, SyncError};
use crate::options::Options;
use crate::protocol::Manifest;
use crate::request::{FailureKind, Request, RequestId, SourceId, Verdict, Want};
use crate::source::{Health, ManifestState, Source, SourceReport};
use crate::verify::{Verified, VerifyJob};

/// Something that happened, for the syncer to learn.
#[derive(Debug)]
pub enum Event {
    /// A complete `200` body for a request.
    Response { id: RequestId, body: Vec<u8> },
    /// The request failed.
    Failed { id: RequestId, kind: FailureKind },
    /// A [`VerifyJob`] was run (boxed: a verified chunk is large beside the other events).
    Verified(Box<Verified>),
    /// Time passed (deadlines, backoff).
    Tick,
}

/// Something for the caller to do.
#[derive(Debug)]
pub enum Action {
    /// Make this request.
    Send(Request),
    /// Abandon this request and drop whatever it received; report nothing for it.
    Cancel(RequestId),
    /// Verify this body (on any thread) and feed back [`Event::Verified`].
    Verify(VerifyJob),
    /// Chunk `index` verified and is kept: persist `body` for resuming if wanted.
    Accepted { index: u64, source: SourceId, body: Vec<u8> },
    /// The source sent an invalid response; it is not asked again.
    Banned { source: SourceId, reason: BanReason },
    /// The source is not asked again, without being called a liar.
    Dropped { source: SourceId, reason: DropReason },
    /// Every chunk is verified: call [`Syncer::finish`].
    Done,
    /// The sync cannot complete.
    Failed(SyncError),
}

/// Overall progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Chunks verified (including those given at resume).
    pub verified: u64,
    /// The chunk count, once a chunk verified (or an empty tree was proven).
    pub total: Option<u64>,
    /// Current and highest `buffered()`.
    pub buffered: u64,
    pub peak_buffered: u64,
    pub in_flight: usize,
    pub verifying: usize,
    /// Chunk requests sent, of which re-requests after a failure and speculative copies.
    pub chunk_requests: u64,
    pub refetches: u64,
    pub speculative: u64,
}

/// What the root and the first verified chunk say about the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Truth {
    pub count: u64,
    pub capacity: u32,
    pub keys: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Slot {
    /// Requests in flight for it.
    pub copies: u8,
    /// Bodies of it being verified.
    pub verifying: u8,
    pub queued: bool,
    pub done: bool,
    /// Once verified: its true length, which every manifest must state.
    pub size: u64,
    /// It failed once (a later request is a refetch).
    pub failed: bool,
    /// Its body exceeded `early_limit`: asked for again only at a size a manifest states.
    pub big: bool,
}

pub(crate) struct Flight {
    pub source: SourceId,
    pub want: Want,
    pub sent: Duration,
    pub deadline: Duration,
    pub reserved: u64,
    /// Its limit is `early_limit`, not a size the source stated: a body over it is no lie.
    pub guess: bool,
}

/// The sync state machine. See the module documentation.
pub struct Syncer<H: Hasher = Sha256> {
    pub(crate) root: Digest,
    pub(crate) version: u64,
    pub(crate) opts: Options,
    pub(crate) restore: Restore<H>,
    pub(crate) truth: Option<Truth>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) pending: VecDeque<u64>,
    /// Before the count is known: the next chunk index to ask for early, and the end of
    /// the early range (lowered when a source says an index does not exist).
    pub(crate) early_next: u64,
    pub(crate) early_end: u64,
    pub(crate) sources: Vec<Source>,
    pub(crate) flights: BTreeMap<RequestId, Flight>,
    pub(crate) verifying: HashMap<RequestId, (SourceId, u64, u64)>,
    pub(crate) next_id: u64,
    pub(crate) actions: VecDeque<Action>,
    /// `Done` or `Failed` was emitted.
    pub(crate) finished: bool,
    pub(crate) done: bool,
    /// The latest time the caller gave.
    pub(crate) now: Duration,
    pub(crate) status: Status,
}

impl<H: Hasher> Syncer<H> {
    /// A sync of the tree with root `root` at `version` (both trusted).
    pub fn new(root: Digest, version: u64, opts: Options) -> Result<Self, OptionsError> {
        opts.check()?;
        let mut slots = vec![Slot::default()];
        slots[0].queued = true;
        let early_end = u64::from(opts.early_chunks).max(1);
        Ok(Syncer {
            root,
            version,
            opts,
            restore: Restore::new(root),
            truth: None,
            slots,
            pending: VecDeque::from([0]),
            early_next: 1,
            early_end,
            sources: Vec::new(),
            flights: BTreeMap::new(),
            verifying: HashMap::new(),
            next_id: 0,
            actions: VecDeque::new(),
            finished: false,
            done: false,
            now: Duration::ZERO,
            status: Status::default(),
        })
    }

    /// Gives a chunk already held (read back from a resume file): it is verified here and
    /// never requested. A chunk that fails is refused and will be fetched. Call before the
    /// first source is added.
    pub fn add_local_chunk(&mut self, index: u64, body: &[u8]) -> Result<(), bavl_core::Error> {
        let vc = bavl_core::verify_chunk::<H>(&self.root, index, body)?;
        self.keep_local(vc, body.len() as u64)
    }

    /// [`Syncer::add_local_chunk`] for a chunk whose index the caller does not know (a
    /// resume file's): the index is derived from the chunk's proof and returned.
    pub fn add_local_chunk_unindexed(&mut self, body: &[u8]) -> Result<u64, bavl_core::Error> {
        let vc = bavl_core::verify_chunk_unindexed::<H>(&self.root, body)?;
        let index = vc.index;
        self.keep_local(vc, body.len() as u64)?;
        Ok(index)
    }

    /// Keeps a verified local chunk, unless it is already held.
    fn keep_local(&mut self, vc: VerifiedChunk, len: u64) -> Result<(), bavl_core::Error> {
        if self.slots.get(vc.index as usize).is_some_and(|s| s.done) {
            return Err(bavl_core::RestoreError::Duplicate(vc.index).into());
        }
        self.accept(vc, len)?;
        Ok(())
    }

    /// Adds a source; it is asked for its manifest at once.
    pub fn add_source(&mut self, now: Duration) -> SourceId {
        self.now = self.now.max(now);
        let id = SourceId(self.sources.len() as u32);
        self.sources.push(Source::new(self.opts.initial_window, self.opts.max_window));
        self.pump(now);
        id
    }

    /// Feeds one event.
    pub fn handle(&mut self, now: Duration, event: Event) {
        self.now = self.now.max(now);
        match event {
            Event::Response { id, body } => self.on_response(now, id, body),
            Event::Failed { id, kind } => self.on_failed(now, id, kind),
            Event::Verified(v) => self.on_verified(*v),
            Event::Tick => self.on_tick(now),
        }
        self.pump(now);
    }

    /// Shorthand for `handle(now, Event::Tick)`.
    pub fn tick(&mut self, now: Duration) {
        self.handle(now, Event::Tick);
    }

    /// The next queued action.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`Syncer::tick`] next at the latest (a deadline or a backoff ends);
    /// `None` while only responses can move it on.
    pub fn next_wakeup(&self) -> Option<Duration> {
        if self.finished {
            return None;
        }
        let deadlines = self.flights.values().map(|f| f.deadline);
        let retries = self.sources.iter().filter(|s| s.is_live() && s.retry_at > self.now);
        deadlines.chain(retries.map(|s| s.retry_at)).min()
    }

    /// Progress and memory accounting.
    pub fn status(&self) -> Status {
        let mut s = self.status.clone();
        s.verified = self.slots.iter().filter(|s| s.done).count() as u64;
        s.total = self.truth.map(|t| t.count);
        s.in_flight = self.flights.len();
        s.verifying = self.verifying.len();
        if self.truth.is_none() {
            s.verified = 0;
        }
        s
    }

    /// Request limits in flight plus bodies awaiting verification, in bytes.
    pub fn buffered(&self) -> u64 {
        self.status.buffered
    }

    /// Indices of the verified chunks, ascending (what a resume file holds).
    pub fn verified_indices(&self) -> impl Iterator<Item = u64> + '_ {
        let known = self.truth.is_some();
        self.slots.iter().enumerate().filter(move |(_, s)| known && s.done).map(|(i, _)| i as u64)
    }

    /// One report per source, by [`SourceId`].
    pub fn sources(&self) -> Vec<SourceReport> {
        self.sources.iter().map(Source::report).collect()
    }

    /// The trusted root.
    pub fn root(&self) -> Digest {
        self.root
    }

    /// The trusted version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Rebuilds the tree once [`Action::Done`] was emitted; its root is checked.
    pub fn finish(self) -> Result<Tree<H>, SyncError> {
        let Some(truth) = self.truth.filter(|_| self.done) else {
            return Err(SyncError::NotDone);
        };
        Ok(self.restore.finish(truth.capacity)?)
    }

    fn on_response(&mut self, now: Duration, id: RequestId, body: Vec<u8>) {
        let Some(f) = self.end_flight(id) else { return };
        let len = body.len() as u64;
        if len > f.reserved {
            // The transport should have cut it: the same verdict.
            if f.guess {
                return self.outgrew_guess(f.want);
            }
            self.ban(f.source, BanReason::Failure(FailureKind::TooLong));
            self.requeue_want(f.want);
            return;
        }
        let tolerance = self.opts.latency_tolerance;
        let src = &mut self.sources[f.source.0 as usize];
        src.stats.bytes += len;
        src.on_success(now.saturating_sub(f.sent), tolerance);
        match f.want {
            Want::Manifest => self.on_manifest(f.source, &body),
            Want::Chunk(index) => {
                let slot = &mut self.slots[index as usize];
                if slot.done {
                    self.sources[f.source.0 as usize].stats.duplicates += 1;
                    return;
                }
                slot.verifying += 1;
                self.status.buffered += len;
                self.verifying.insert(id, (f.source, index, len));
                let job = VerifyJob { id, source: f.source, index, root: self.root, body };
                self.actions.push_back(Action::Verify(job));
            }
        }
    }

    fn on_manifest(&mut self, source: SourceId, body: &[u8]) {
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
            self.truth = Some(Truth { count: 0, capacity: m.capacity, keys: 0 });
            // Chunks may have been asked for before this manifest came: nothing will be
            // kept of them (the slots stay, for late answers to land on; none can verify).
            self.cancel_chunks(|_| true);
            self.pending.clear();
            self.slots.iter_mut().for_each(|s| s.queued = false);
        }
        let src = &mut self.sources[source.0 as usize];
        // A source that said `404` for a chunk its own manifest lists does not hold it.
        let denied = self.truth.is_none() && src.early_404.iter().any(|&i| i < m.chunk_count);
        src.manifest = ManifestState::Have(m);
        if denied {
            return self.drop_source(source, DropReason::NotFound(404));
        }
        self.check_manifest(source);
    }

    fn on_failed(&mut self, now: Duration, id: RequestId, kind: FailureKind) {
        let Some(f) = self.end_flight(id) else { return };
        if f.guess && kind == FailureKind::TooLong {
            return self.outgrew_guess(f.want);
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
                src.on_transient(now, base, max);
                if src.failures > retries {
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

    fn on_verified(&mut self, v: Verified) {
        let Some((source, index, len)) = self.verifying.remove(&v.id) else { return };
        self.status.buffered -= len;
        self.slots[index as usize].verifying -= 1;
        match v.outcome {
            Ok(vc) if vc.index == index && vc.root == self.root => {
                if self.slots[index as usize].done {
                    self.sources[source.0 as usize].stats.duplicates += 1;
                    return;
                }
                if let Err(e) = self.accept(vc, len) {
                    // Cannot happen for chunks verified against one root (Restore checks).
                    self.fail(SyncError::Restore(e));
                    return;
                }
                self.sources[source.0 as usize].stats.chunks += 1;
                self.actions.push_back(Action::Accepted { index, source, body: v.body });
                self.cancel_copies(index);
            }
            Ok(_) => {
                let e = bavl_core::ProofError::Structure("verified for another index or root");
                self.reject(source, index, e);
            }
            Err(e) => self.reject(source, index, e),
        }
    }

    /// A chunk asked for at `early_limit` is larger: no lie; it waits for a manifest's size.
    fn outgrew_guess(&mut self, want: Want) {
        if let Want::Chunk(index) = want {
            self.slots[index as usize].big = true;
            self.requeue(index);
        }
    }

    /// `404` for a chunk asked for before the count was known: the tree may be smaller
    /// (or empty), so the source is judged only once its manifest or the first verified
    /// chunk tells; meanwhile it is asked for nothing at or beyond that index.
    fn early_not_found(&mut self, source: SourceId, index: u64) {
        let src = &mut self.sources[source.0 as usize];
        src.early_404.push(index);
        let listed = src.manifest().is_some_and(|m| index < m.chunk_count);
        if listed {
            return self.drop_source(source, DropReason::NotFound(404));
        }
        if index > 0 {
            self.early_end = self.early_end.min(index);
        }
        self.requeue(index);
    }

    fn reject(&mut self, source: SourceId, index: u64, e: bavl_core::ProofError) {
        self.slots[index as usize].failed = true;
        self.ban(source, BanReason::InvalidChunk { index, source: e });
        self.requeue(index);
    }

    fn on_tick(&mut self, now: Duration) {
        let expired: Vec<RequestId> =
            self.flights.iter().filter(|(_, f)| f.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.actions.push_back(Action::Cancel(id));
            self.on_failed(now, id, FailureKind::Timeout);
        }
    }

    /// Keeps a verified chunk; learns the truth from the first one.
    fn accept(&mut self, vc: VerifiedChunk, len: u64) -> Result<(), bavl_core::RestoreError> {
        let index = vc.index;
        let first = self.truth.is_none();
        let truth = Truth { count: vc.chunk_count, capacity: vc.capacity, keys: vc.key_count };
        self.restore.add_verified(vc)?;
        if first {
            self.truth = Some(truth);
            if self.slots.len() < truth.count as usize {
                self.slots.resize(truth.count as usize, Slot::default());
            }
            for i in 0..truth.count {
                let s = &mut self.slots[i as usize];
                if i != index && !s.done && !s.queued && s.copies == 0 && s.verifying == 0 {
                    s.queued = true;
                    self.pending.push_back(i);
                }
            }
            // Early requests past the end can bring nothing (honest sources say `404`).
            self.cancel_chunks(|i| i >= truth.count);
        }
        let slot = &mut self.slots[index as usize];
        slot.done = true;
        slot.size = len;
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

    /// Bans the source if its manifest contradicts what verified chunks proved.
    fn check_manifest(&mut self, source: SourceId) {
        let (Some(t), Some(m)) = (self.truth, self.sources[source.0 as usize].manifest()) else {
            return;
        };
        if !self.sources[source.0 as usize].is_live() {
            return;
        }
        let reason = if m.chunk_count != t.count
            || m.capacity != t.capacity
            || m.key_count != t.keys
        {
            Some(BanReason::InvalidManifest(ManifestError::Contradicted(
                "chunk count, capacity or key count",
            )))
        } else {
            let wrong =
                self.slots.iter().enumerate().find(|(i, s)| s.done && m.chunk_sizes[*i] != s.size);
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
    fn end_flight(&mut self, id: RequestId) -> Option<Flight> {
        let f = self.flights.remove(&id)?;
        self.status.buffered -= f.reserved;
        self.sources[f.source.0 as usize].in_flight -= 1;
        if let Want::Chunk(i) = f.want {
            self.slots[i as usize].copies -= 1;
        }
        Some(f)
    }

    fn requeue_want(&mut self, want: Want) {
        if let Want::Chunk(i) = want {
            self.slots[i as usize].failed = true;
            self.requeue(i);
        }
    }

    /// Queues the index again, first, if nothing else will bring it. Before the count is
    /// known only chunk 0 is queued (the others are once it is); none past the end.
    pub(crate) fn requeue(&mut self, index: u64) {
        match self.truth {
            Some(t) if index >= t.count => return,
            None if index > 0 => return,
            _ => {}
        }
        let Some(slot) = self.slots.get_mut(index as usize) else { return };
        if !slot.done && !slot.queued && slot.copies == 0 && slot.verifying == 0 {
            slot.queued = true;
            self.pending.push_front(index);
        }
    }

    fn cancel_copies(&mut self, index: u64) {
        self.cancel_chunks(|i| i == index);
    }

    /// Cancels the chunk requests in flight whose index matches.
    fn cancel_chunks(&mut self, which: impl Fn(u64) -> bool) {
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
    }

    fn drop_source(&mut self, source: SourceId, reason: DropReason) {
        let src = &mut self.sources[source.0 as usize];
        if !src.is_live() {
            return;
        }
        src.health = Health::Dropped(reason.clone());
        self.actions.push_back(Action::Dropped { source, reason });
        self.cancel_source(source);
    }

    pub(crate) fn fail(&mut self, e: SyncError) {
        if !self.finished {
            self.finished = true;
            self.actions.push_back(Action::Failed(e));
        }
    }
}
