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

use bavl_core::{Digest, Hasher, Restore, Sha256, Tree, VerifiedChunk};

use crate::error::{BanReason, DropReason, OptionsError, SyncError};
use crate::options::Options;
use crate::request::{FailureKind, Request, RequestId, SourceId, Want};
use crate::source::{Source, SourceReport};
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
    /// Copies given to a proven source because no copy was in good hands, or all were
    /// expected later than it would answer (rescues and hedges; not counted in
    /// `speculative`).
    pub rescues: u64,
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

/// A body awaiting verification: whose, which chunk, how long, when it was asked for and
/// how long its answer took (counted for its source only if it verifies).
pub(crate) struct Pending {
    pub source: SourceId,
    pub index: u64,
    pub len: u64,
    pub sent: Duration,
    pub rtt: Duration,
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
    pub(crate) verifying: HashMap<RequestId, Pending>,
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
        self.add_sources(now, 1)[0]
    }

    /// Adds `n` sources at once; they are asked for their first chunks and manifests
    /// together, each getting its share. Prefer it to `n` calls of
    /// [`Syncer::add_source`] when the sources are known together: sources added one by
    /// one let the first ones take more than the later ones' shares until they answer
    /// (a crowd of silent ones added first then holds the half of the budget and of
    /// `max_in_flight` that unproven sources may hold, until the grace period judges it).
    pub fn add_sources(&mut self, now: Duration, n: u32) -> Vec<SourceId> {
        self.now = self.now.max(now);
        let first = self.sources.len() as u32;
        for _ in 0..n {
            self.sources.push(Source::new(self.opts.initial_window, self.opts.max_window));
        }
        self.pump(now);
        (first..first + n).map(SourceId).collect()
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
        let now = self.now;
        let deadlines = self.flights.values().map(|f| f.deadline);
        // A request at a proven source falls out of good hands when it becomes overdue
        // (then it may be rescued).
        let overdue = self.flights.values().filter_map(|f| {
            let src = &self.sources[f.source.0 as usize];
            src.proven().then(|| crate::schedule::overdue_at(f.sent, src.srtt()))
        });
        let retries = self
            .sources
            .iter()
            .filter(|s| s.is_live())
            .flat_map(|s| [s.retry_at, s.manifest_after]);
        deadlines.chain(overdue).chain(retries).filter(|&t| t > now).min()
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

    /// Requests in flight (at most `Options::max_in_flight`).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
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
}
