//! The sans-I/O sync state machine: events in, actions out.
//!
//! A [`Syncer`] syncs one trusted `(root, version)`: it decides which source is asked for
//! what and hands out each chunk once it verified ([`Action::Accepted`]); it keeps no
//! chunk itself, only a few bytes of bookkeeping per chunk (about 25), so the caller
//! decides where the state goes: into a store's files as it arrives
//! (`bavl_store::Ingest`), or into a [`bavl_core::Restore`] for a tree in memory. It has
//! no threads, no clock and no sockets: the caller feeds
//! it [`Event`]s with the current time (any monotonic clock, as a `Duration` since an epoch
//! of the caller's choosing) and carries out the [`Action`]s it queues. The same
//! sequence of events always gives the same actions.
//!
//! Guarantees, whatever the sources send:
//! - a chunk is kept only once it verified against the trusted root;
//! - a source is banned at its first invalid response (`docs/sync-protocol.md`, peer
//!   policy) and what it was asked for is asked of another source;
//! - `buffered()` — the byte limits of requests in flight plus the bodies awaiting
//!   verification — never exceeds `Options::max_buffered_bytes` (a verified chunk leaves
//!   the syncer in its [`Action::Accepted`]);
//! - each chunk is accepted exactly once (never one given as held, [`Syncer::add_held`]),
//!   and every accepted chunk agrees with the [`Shape`] the first one proved;
//! - [`Action::Done`] comes once every chunk is accepted or held, while one honest source
//!   is left.
//!
//! The caller must: make each [`Action::Send`] request and read its body through
//! [`crate::BodyGuard`]; report its outcome exactly once (or not at all after
//! [`Action::Cancel`]); run each [`Action::Verify`] job (on any thread) and feed back its
//! [`Verified`]; keep each accepted chunk (the syncer never hands it out again); call
//! [`Syncer::tick`] by [`Syncer::next_wakeup`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::marker::PhantomData;
use std::time::Duration;

use bavl_core::{Digest, Hasher, RestoreError, Sha256, VerifiedChunk};

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
pub enum Action {
    /// Make this request.
    Send(Request),
    /// Abandon this request and drop whatever it received; report nothing for it.
    Cancel(RequestId),
    /// Verify this body (on any thread) and feed back [`Event::Verified`].
    Verify(VerifyJob),
    /// Chunk `index` verified: the caller keeps it (the syncer does not, and never asks
    /// for it again). `len` is the length of the body as it came (its export, proof
    /// included).
    Accepted { index: u64, source: SourceId, len: u64, chunk: Box<VerifiedChunk> },
    /// The source sent an invalid response; it is not asked again.
    Banned { source: SourceId, reason: BanReason },
    /// The source is not asked again, without being called a liar.
    Dropped { source: SourceId, reason: DropReason },
    /// Every chunk is accepted or held: the sync is complete.
    Done,
    /// The sync cannot complete.
    Failed(SyncError),
}

impl std::fmt::Debug for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Send(r) => f.debug_tuple("Send").field(r).finish(),
            Action::Cancel(id) => f.debug_tuple("Cancel").field(id).finish(),
            Action::Verify(j) => f.debug_tuple("Verify").field(j).finish(),
            Action::Accepted { index, source, len, chunk } => f
                .debug_struct("Accepted")
                .field("index", index)
                .field("source", source)
                .field("len", len)
                .field("entries", &chunk.len())
                .finish(),
            Action::Banned { source, reason } => {
                f.debug_struct("Banned").field("source", source).field("reason", reason).finish()
            }
            Action::Dropped { source, reason } => {
                f.debug_struct("Dropped").field("source", source).field("reason", reason).finish()
            }
            Action::Done => f.write_str("Done"),
            Action::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truth {
    pub count: u64,
    pub capacity: u32,
    /// Unknown while only held chunks told the count and capacity (a store being built
    /// keeps no key count): learned from the first chunk that verifies.
    pub keys: Option<u64>,
}

/// What the trusted root commits to about the tree: its chunk count, capacity and key
/// count, proved by any chunk that verifies (or, for the empty tree, by the root itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub chunk_count: u64,
    pub capacity: u32,
    /// `None` while only held chunks (given without it) told the shape.
    pub key_count: Option<u64>,
}

impl Shape {
    /// The shape a verified chunk proves.
    pub fn of(chunk: &VerifiedChunk) -> Shape {
        let (chunk_count, capacity) = (chunk.chunk_count, chunk.capacity);
        Shape { chunk_count, capacity, key_count: Some(chunk.key_count) }
    }
}

impl From<Truth> for Shape {
    fn from(t: Truth) -> Shape {
        Shape { chunk_count: t.count, capacity: t.capacity, key_count: t.keys }
    }
}

impl From<Shape> for Truth {
    fn from(s: Shape) -> Truth {
        Truth { count: s.chunk_count, capacity: s.capacity, keys: s.key_count }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Slot {
    /// Requests in flight for it.
    pub copies: u8,
    /// Bodies of it being verified.
    pub verifying: u8,
    pub queued: bool,
    pub done: bool,
    /// Once verified: its true length, which every manifest must state (0 for a chunk
    /// given as held, whose length this run never saw).
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
    pub(crate) truth: Option<Truth>,
    /// Chunks accepted or held (the slots marked `done`).
    pub(crate) complete: u64,
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
    pub(crate) _hasher: PhantomData<H>,
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
            truth: None,
            complete: 0,
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
            _hasher: PhantomData,
        })
    }

    /// Gives chunks the caller already holds (verified by an earlier run and kept, as
    /// the directory of an unfinished `bavl sync` keeps them), with the shape their first
    /// chunk proved: they are never requested, and `Done` counts them. Call before the
    /// first source is added. Nothing is verified here: the caller vouches for what it
    /// kept (a chunk that contradicts `shape` later fails the sync as inconsistent, and
    /// the caller's own rebuild checks the root). Refused, changing nothing: after a
    /// source was added, a shape other than one given before or learned, an index out of
    /// range, or a chunk count above [`crate::protocol::MAX_CHUNK_COUNT`].
    pub fn add_held(
        &mut self,
        shape: Shape,
        indices: impl IntoIterator<Item = u64>,
    ) -> Result<u64, RestoreError> {
        if !self.sources.is_empty() {
            return Err(RestoreError::Inconsistent("held chunks given after a source was added"));
        }
        if shape.chunk_count == 0 || shape.chunk_count > crate::protocol::MAX_CHUNK_COUNT {
            return Err(RestoreError::Inconsistent(
                "held chunks of a tree of no or too many chunks",
            ));
        }
        let known = |t: Truth| {
            (t.count, t.capacity) != (shape.chunk_count, shape.capacity)
                || t.keys.zip(shape.key_count).is_some_and(|(a, b)| a != b)
        };
        if self.truth.is_some_and(known) {
            return Err(RestoreError::Inconsistent("held chunks of another shape"));
        }
        let indices: Vec<u64> = indices.into_iter().collect();
        if let Some(&index) = indices.iter().find(|&&i| i >= shape.chunk_count) {
            return Err(RestoreError::OutOfRange { index, count: shape.chunk_count });
        }
        match &mut self.truth {
            None => self.learn(shape.into(), None),
            Some(t) => t.keys = t.keys.or(shape.key_count),
        }
        let mut added = 0;
        for i in indices {
            let slot = &mut self.slots[i as usize];
            if !slot.done {
                slot.done = true;
                slot.queued = false;
                self.complete += 1;
                added += 1;
            }
        }
        // Queued entries of held chunks are skipped when they come up.
        Ok(added)
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

    /// Indices of the chunks accepted or held, ascending.
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

    /// What the root commits to about the tree, once a chunk verified (or held chunks
    /// were given, or the empty tree was proven). A caller rebuilding a tree in a
    /// [`bavl_core::Restore`] passes its capacity to `Restore::finish` (which needs it only
    /// for the empty tree).
    pub fn shape(&self) -> Option<Shape> {
        self.truth.map(Shape::from)
    }

    /// Whether [`Action::Done`] was emitted.
    pub fn is_done(&self) -> bool {
        self.done
    }
}
