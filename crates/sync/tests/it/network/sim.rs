//! A deterministic simulated network for the syncer: sources with latency, bandwidth and
//! a behaviour, a virtual clock, seeded randomness, and one verifying worker.
//!
//! Each source is a serial link: a response starts when the request has crossed the
//! latency and the link is free, and its bytes arrive at the link's rate. Bodies are read
//! through the request's `BodyGuard` as a transport must, so over-long, endless, stalled
//! and trickling bodies fail exactly as they would over HTTP. Verification jobs are run
//! for real and delivered after `verify_cost` each on one worker, so bodies wait to be
//! verified and the memory budget is exercised.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::time::Duration;

use bavl_core::{Restore, Sha256, Snapshot, Tree};
use bavl_sync::{
    Action, BanReason, DropReason, Event, FailureKind, Manifest, Request, RequestId, SourceId,
    Status, SyncError, Syncer, Verified, Want,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How a simulated source answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Honest,
    /// A chunk with one byte flipped.
    WrongBytes,
    /// A valid chunk, of the next index.
    WrongIndex,
    /// The chunk at this index of a later version of the same state.
    OtherVersion,
    /// The chunk at this index of an unrelated tree.
    OtherTree,
    /// Two thirds of the chunk, as a complete response.
    Truncated,
    /// The chunk and 100 bytes more.
    OverLong,
    /// Bytes without end at the link's rate.
    Endless,
    /// A manifest claiming 5 chunks more than there are.
    ManifestCount,
    /// A manifest of another root.
    ManifestRoot,
    /// A manifest whose chunk sizes are each one byte off.
    ManifestSizes,
    /// A manifest claiming the tree is empty.
    ManifestEmpty,
    /// A manifest for another version than asked (with that version's root).
    WrongVersion,
    /// Chunk bodies never start.
    Stall,
    /// Chunk bodies arrive at 100 bytes per second.
    Trickle,
    /// Every request answered with this status.
    Http(u16),
    /// This status for the first `n` requests, honest after.
    Flaky(u16, u32),
    /// An honest manifest, but `404` for every chunk (a pruned or partial copy).
    ChunksMissing,
    /// Random bytes to every request.
    Garbage,
    /// Redirects without end.
    RedirectLoop,
    /// The true manifest at once; chunk 0 never answered (its body never starts); `404`
    /// for every other chunk. (The crowd that kept a sync from verifying anything.)
    ChunkZeroStall,
    /// Every answer, manifests included, at 10 bytes per second (a dripped head).
    DripAll,
    /// A manifest that decodes but claims this many chunks (a false, large tree); `404`
    /// for every chunk.
    HugeManifest(u64),
    /// Every other chunk answer is cut in the middle; the others honest.
    Alternate,
}

/// The liars, one of each kind (a fixed order for tests that use many).
pub const LIES: [Behaviour; 18] = [
    Behaviour::WrongBytes,
    Behaviour::WrongIndex,
    Behaviour::OtherVersion,
    Behaviour::OtherTree,
    Behaviour::Truncated,
    Behaviour::OverLong,
    Behaviour::Endless,
    Behaviour::ManifestCount,
    Behaviour::ManifestRoot,
    Behaviour::ManifestSizes,
    Behaviour::ManifestEmpty,
    Behaviour::WrongVersion,
    Behaviour::Stall,
    Behaviour::Trickle,
    Behaviour::Http(403),
    Behaviour::Garbage,
    Behaviour::RedirectLoop,
    Behaviour::Http(500),
];

pub const VERSION: u64 = 7;

/// The states the sources serve: the truth, a later version of it, an unrelated tree.
pub struct World {
    pub truth: Snapshot<Sha256>,
    pub later: Snapshot<Sha256>,
    pub other: Snapshot<Sha256>,
}

impl World {
    pub fn new(keys: u32, capacity: u32) -> World {
        let mut t = Tree::<Sha256>::with_capacity(capacity).unwrap();
        for i in 0..keys {
            let k = (i.wrapping_mul(2_654_435_761)).to_be_bytes();
            t.insert(&k, format!("value-{i:012}").as_bytes()).unwrap();
        }
        let truth = t.snapshot();
        for i in 0..keys / 20 {
            t.insert(&(i.wrapping_mul(2_654_435_761)).to_be_bytes(), b"changed").unwrap();
        }
        let later = t.snapshot();
        let mut o = Tree::<Sha256>::with_capacity(capacity).unwrap();
        for i in 0..keys {
            o.insert(&(i + 1).to_le_bytes(), b"other tree").unwrap();
        }
        World { truth, later, other: o.snapshot() }
    }
}

/// One simulated source.
pub struct SimSource {
    pub behaviour: Behaviour,
    pub latency: Duration,
    /// Bytes per second.
    pub bandwidth: u64,
    busy_until: Duration,
    served: u32,
}

impl SimSource {
    pub fn new(behaviour: Behaviour, latency_ms: u64, bandwidth: u64) -> SimSource {
        SimSource {
            behaviour,
            latency: Duration::from_millis(latency_ms),
            bandwidth,
            busy_until: Duration::ZERO,
            served: 0,
        }
    }
}

/// What the source puts on the wire.
enum Answer {
    Body(Vec<u8>),
    /// `len` bytes (None: endless) at `rate` bytes per second.
    Stream(Option<u64>, u64),
    Fail(FailureKind),
}

enum Due {
    Response(RequestId, Vec<u8>),
    Failure(RequestId, FailureKind),
    Verified(Box<Verified>),
}

/// What happened during a run.
#[derive(Default, Clone)]
pub struct Log {
    pub sent: Vec<(SourceId, Want)>,
    pub banned: Vec<(SourceId, BanReason)>,
    pub dropped: Vec<(SourceId, DropReason)>,
    /// Index, source and length of each accepted chunk.
    pub accepted: Vec<(u64, SourceId, u64)>,
    pub done: bool,
    pub failed: Option<SyncError>,
    pub end: Duration,
    pub max_buffered: u64,
    pub max_in_flight: usize,
}

pub struct Sim {
    pub world: World,
    pub sources: Vec<SimSource>,
    pub syncer: Syncer<Sha256>,
    /// The sink: every accepted chunk is kept here (a duplicate fails the run).
    pub restore: Restore<Sha256>,
    pub budget: u64,
    /// The syncer's `max_in_flight` (checked at every step, as the budget is).
    pub max_in_flight: usize,
    pub verify_cost: Duration,
    pub log: Log,
    now: Duration,
    verify_free: Duration,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    due: BTreeMap<u64, Due>,
    live: HashSet<RequestId>,
    seq: u64,
    rng: ChaCha8Rng,
}

impl Sim {
    pub fn new(world: World, syncer: Syncer<Sha256>, budget: u64, seed: u64) -> Sim {
        Sim {
            restore: Restore::new(syncer.root()),
            world,
            sources: Vec::new(),
            syncer,
            budget,
            max_in_flight: usize::MAX,
            verify_cost: Duration::from_micros(200),
            log: Log::default(),
            now: Duration::ZERO,
            verify_free: Duration::ZERO,
            queue: BinaryHeap::new(),
            due: BTreeMap::new(),
            live: HashSet::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn add(&mut self, source: SimSource) -> SourceId {
        self.sources.push(source);
        self.syncer.add_source(self.now)
    }

    /// Adds several sources at once (`Syncer::add_sources`), as a transport that knows
    /// them together does.
    pub fn add_all(&mut self, sources: Vec<SimSource>) -> Vec<SourceId> {
        let n = sources.len() as u32;
        self.sources.extend(sources);
        self.syncer.add_sources(self.now, n)
    }

    /// Runs until the syncer is done or failed; panics if it gets stuck.
    pub fn run(&mut self) -> Log {
        for _step in 0..2_000_000 {
            self.drain();
            if self.log.done || self.log.failed.is_some() {
                self.log.end = self.now;
                return self.log.clone();
            }
            let next = self.queue.peek().map(|Reverse((t, _))| *t);
            let wake = self.syncer.next_wakeup();
            let t = match (next, wake) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).expect("the syncer is stuck: nothing due, no wakeup"),
            };
            self.now = self.now.max(t);
            if next == Some(t) {
                let Some(Reverse((_, seq))) = self.queue.pop() else { unreachable!() };
                self.deliver(seq);
            } else {
                self.syncer.tick(self.now);
            }
            let b = self.syncer.buffered();
            assert!(b <= self.budget, "buffered {b} over the budget {}", self.budget);
            let n = self.syncer.in_flight();
            assert!(n <= self.max_in_flight, "{n} requests in flight, over {}", self.max_in_flight);
            self.log.max_in_flight = self.log.max_in_flight.max(n);
            self.log.max_buffered = self.log.max_buffered.max(b);
        }
        panic!("the simulation did not end");
    }

    /// Runs until `n` chunks were accepted (or the end), then stops as a kill would.
    pub fn run_until_accepted(&mut self, n: usize) {
        while self.log.accepted.len() < n && !self.log.done {
            self.drain();
            let Some(Reverse((t, seq))) = self.queue.pop() else { panic!("stuck") };
            self.now = self.now.max(t);
            self.deliver(seq);
        }
    }

    /// The tree rebuilt from the accepted chunks (and those the restore was given before),
    /// its root checked.
    pub fn finish(&mut self) -> Tree {
        let restore = std::mem::replace(&mut self.restore, Restore::new(self.syncer.root()));
        let capacity = self.syncer.shape().map_or(0, |s| s.capacity);
        restore.finish(capacity).expect("the tree rebuilds")
    }

    pub fn status(&self) -> Status {
        self.syncer.status()
    }

    fn deliver(&mut self, seq: u64) {
        let Some(due) = self.due.remove(&seq) else { return };
        let event = match due {
            Due::Response(id, body) if self.live.remove(&id) => Event::Response { id, body },
            Due::Failure(id, kind) if self.live.remove(&id) => Event::Failed { id, kind },
            Due::Verified(v) => Event::Verified(v),
            _ => return, // cancelled
        };
        self.syncer.handle(self.now, event);
    }

    fn at(&mut self, t: Duration, due: Due) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq)));
        self.due.insert(self.seq, due);
    }

    fn drain(&mut self) {
        while let Some(action) = self.syncer.poll_action() {
            match action {
                Action::Send(req) => self.request(req),
                Action::Cancel(id) => {
                    self.live.remove(&id);
                }
                Action::Verify(job) => {
                    let start = self.now.max(self.verify_free);
                    self.verify_free = start + self.verify_cost;
                    let v = Box::new(job.run::<Sha256>());
                    self.at(self.verify_free, Due::Verified(v));
                }
                Action::Accepted { index, source, len, chunk } => {
                    self.restore.add_verified(*chunk).expect("each chunk accepted once");
                    self.log.accepted.push((index, source, len))
                }
                Action::Banned { source, reason } => self.log.banned.push((source, reason)),
                Action::Dropped { source, reason } => self.log.dropped.push((source, reason)),
                Action::Done => self.log.done = true,
                Action::Failed(e) => self.log.failed = Some(e),
            }
        }
    }

    fn request(&mut self, req: Request) {
        self.log.sent.push((req.source, req.want));
        self.live.insert(req.id);
        let answer = self.answer(&req);
        let src = &mut self.sources[req.source.0 as usize];
        src.served += 1;
        let start = (self.now + src.latency).max(src.busy_until);
        let (latency, bandwidth) = (src.latency, src.bandwidth);
        let (len, rate) = match answer {
            Answer::Fail(kind) => {
                let t = self.now + latency * 2;
                return self.at(t, Due::Failure(req.id, kind));
            }
            Answer::Body(b) => {
                let len = b.len() as u64;
                return self.stream(req, start, Some(len), bandwidth, Some(b));
            }
            Answer::Stream(len, rate) => (len, rate),
        };
        self.stream(req, start, len, rate, None);
    }

    /// Delivers `len` bytes (None: endless) from `start` at `rate` through the guard.
    fn stream(
        &mut self,
        req: Request,
        start: Duration,
        len: Option<u64>,
        rate: u64,
        body: Option<Vec<u8>>,
    ) {
        let secs = |bytes: u64| {
            if rate == 0 {
                Duration::MAX / 4
            } else {
                Duration::from_secs_f64(bytes as f64 / rate as f64)
            }
        };
        let complete = len.map(|l| start + secs(l));
        // The guard's rate check, at the end of the grace period (the average rate of a
        // constant-rate stream only rises after it).
        let check_at = req.sent + req.grace;
        let mut guard = req.guard();
        let stalled = complete.is_none_or(|c| c > check_at) && {
            let arrived = check_at.saturating_sub(start).as_secs_f64() * rate as f64;
            guard.on_bytes(check_at, arrived as u64).is_err()
        };
        let too_long = len.is_none_or(|l| l > req.limit).then(|| start + secs(req.limit + 1));
        let mut outcome = (complete.unwrap_or(Duration::MAX / 2), None);
        if stalled && check_at < outcome.0 {
            outcome = (check_at, Some(FailureKind::Stalled));
        }
        if let Some(t) = too_long.filter(|t| *t < outcome.0) {
            outcome = (t, Some(FailureKind::TooLong));
        }
        let src = &mut self.sources[req.source.0 as usize];
        src.busy_until = outcome.0.min(self.now + Duration::from_secs(3600));
        match outcome.1 {
            Some(kind) => self.at(outcome.0, Due::Failure(req.id, kind)),
            None => {
                let body = body.unwrap_or_else(|| vec![0; len.unwrap_or(0) as usize]);
                self.at(outcome.0, Due::Response(req.id, body))
            }
        }
    }

    fn answer(&mut self, req: &Request) -> Answer {
        let src = &self.sources[req.source.0 as usize];
        let (behaviour, bandwidth, served) = (src.behaviour, src.bandwidth, src.served);
        if behaviour == Behaviour::Garbage {
            let len = self.rng.gen_range(1..2000);
            return Answer::Body((0..len).map(|_| self.rng.gen()).collect());
        }
        match (behaviour, req.want) {
            (Behaviour::DripAll, Want::Manifest) => {
                let len =
                    Manifest::from_snapshot(VERSION, &self.world.truth).unwrap().to_json().len();
                return Answer::Stream(Some(len as u64), 10);
            }
            (Behaviour::DripAll, Want::Chunk(_)) => return Answer::Stream(Some(4096), 10),
            (Behaviour::ChunkZeroStall, Want::Chunk(0)) => return Answer::Stream(Some(4096), 0),
            (Behaviour::ChunkZeroStall | Behaviour::HugeManifest(_), Want::Chunk(_)) => {
                return Answer::Fail(FailureKind::Http(404))
            }
            (Behaviour::HugeManifest(n), Want::Manifest) => {
                return Answer::Body(huge(n, &hex::encode(self.world.truth.root_hash())))
            }
            (Behaviour::Alternate, Want::Chunk(_)) if served % 2 == 1 => {
                return Answer::Fail(FailureKind::Truncated)
            }
            _ => {}
        }
        let w = &self.world;
        // A chunk the tree does not have (asked for before the count is known; chunk 0 of
        // the empty tree too): 404, as `bavl serve` answers.
        if matches!(req.want, Want::Chunk(i) if i >= w.truth.chunk_count()) {
            return Answer::Fail(FailureKind::Http(404));
        }
        let honest = || match req.want {
            Want::Manifest => Manifest::from_snapshot(VERSION, &w.truth).unwrap().to_json(),
            Want::Chunk(i) => w.truth.export_chunk(i).unwrap_or_default(),
        };
        let chunk = |i: u64, f: &dyn Fn(Vec<u8>) -> Vec<u8>| match req.want {
            Want::Manifest => honest(),
            Want::Chunk(_) => f(w.truth.export_chunk(i).unwrap_or_default()),
        };
        let manifest = |f: &dyn Fn(&mut Manifest)| match req.want {
            Want::Manifest => {
                let mut m = Manifest::from_snapshot(VERSION, &w.truth).unwrap();
                f(&mut m);
                m.to_json()
            }
            Want::Chunk(_) => honest(),
        };
        let index = match req.want {
            Want::Chunk(i) => i,
            Want::Manifest => 0,
        };
        let body = match behaviour {
            Behaviour::Honest => honest(),
            Behaviour::WrongBytes => chunk(index, &|mut b| {
                let at = (index as usize * 31 + 7) % b.len();
                b[at] ^= 0x20;
                b
            }),
            Behaviour::WrongIndex => {
                let next = (index + 1) % w.truth.chunk_count();
                chunk(next, &|b| b)
            }
            Behaviour::OtherVersion => match req.want {
                Want::Chunk(i) => w.later.export_chunk(i).unwrap_or_default(),
                Want::Manifest => honest(),
            },
            Behaviour::OtherTree => match req.want {
                Want::Chunk(i) => w.other.export_chunk(i % w.other.chunk_count()).unwrap(),
                Want::Manifest => honest(),
            },
            Behaviour::Truncated => chunk(index, &|mut b| {
                b.truncate(b.len() * 2 / 3);
                b
            }),
            Behaviour::OverLong => chunk(index, &|mut b| {
                b.extend([0u8; 100]);
                b
            }),
            Behaviour::Endless => match req.want {
                Want::Chunk(_) => return Answer::Stream(None, bandwidth),
                Want::Manifest => honest(),
            },
            Behaviour::ManifestCount => manifest(&|m| {
                m.chunk_count += 5;
                m.key_count += 5;
                let last = *m.chunk_sizes.last().unwrap();
                m.chunk_sizes.extend([last; 5]);
            }),
            Behaviour::ManifestRoot => manifest(&|m| m.root = hex::encode(w.other.root_hash())),
            Behaviour::ManifestSizes => manifest(&|m| {
                m.chunk_sizes.iter_mut().for_each(|s| *s += 1);
            }),
            Behaviour::ManifestEmpty => manifest(&|m| {
                m.chunk_count = 0;
                m.key_count = 0;
                m.chunk_sizes.clear();
            }),
            Behaviour::WrongVersion => match req.want {
                Want::Manifest => Manifest::from_snapshot(VERSION + 1, &w.later).unwrap().to_json(),
                Want::Chunk(i) => w.later.export_chunk(i).unwrap_or_default(),
            },
            Behaviour::Stall | Behaviour::Trickle => match req.want {
                Want::Manifest => honest(),
                Want::Chunk(i) => {
                    let len = w.truth.export_chunk(i).unwrap_or_default().len() as u64;
                    let rate = if behaviour == Behaviour::Stall { 0 } else { 100 };
                    return Answer::Stream(Some(len), rate);
                }
            },
            Behaviour::Http(status) => return Answer::Fail(FailureKind::Http(status)),
            Behaviour::ChunksMissing => match req.want {
                Want::Manifest => honest(),
                Want::Chunk(_) => return Answer::Fail(FailureKind::Http(404)),
            },
            Behaviour::Flaky(status, n) if served < n => {
                return Answer::Fail(FailureKind::Http(status))
            }
            Behaviour::Flaky(..) => honest(),
            Behaviour::Garbage => unreachable!(),
            Behaviour::ChunkZeroStall
            | Behaviour::DripAll
            | Behaviour::HugeManifest(_)
            | Behaviour::Alternate => honest(),
            Behaviour::RedirectLoop => return Answer::Fail(FailureKind::TooManyRedirects),
        };
        Answer::Body(body)
    }
}

/// A manifest of version [`VERSION`] and the true root that decodes but claims `chunks`
/// chunks of 100 bytes (a false tree).
fn huge(chunks: u64, root: &str) -> Vec<u8> {
    let sizes = vec!["100"; chunks as usize].join(",");
    format!(
        "{{\"format\":1,\"version\":{VERSION},\"root\":\"{root}\",\"capacity\":16,\
         \"chunk_count\":{chunks},\"key_count\":{chunks},\"chunk_sizes\":[{sizes}]}}",
    )
    .into_bytes()
}
