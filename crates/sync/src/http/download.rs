//! The HTTP sync loop: the [`Syncer`] driven over real sockets, its verified chunks
//! handed to a [`Sink`].
//!
//! One thread owns the syncer and carries out its actions: each request runs on a thread
//! of its own through the [`Client`] (the syncer's per-source windows bound how many run
//! at once), each verification on a pool of worker threads running [`VerifyJob::run`],
//! so hashing never holds up the network. Everything comes back on one channel. Each
//! accepted chunk goes, in the order chunks verify, to a writer thread that owns the
//! sink: it adds the chunk and flushes the sink every [`FLUSH_EVERY_BYTES`] or
//! [`FLUSH_EVERY`], whichever comes first, and once more at the end (also when the sync
//! fails, so what was written can be resumed from), so the network loop never waits for
//! the disk. Chunks the sink already holds ([`Sink::held`]) are never fetched.
//!
//! Memory: what the syncer's budget bounds (requests in flight at their limits, bodies
//! awaiting verification), the chunks queued for the writer (at most
//! [`WRITE_QUEUE_BYTES`] of them, counted by their length as fetched; one chunk more
//! if it alone is larger), a few bytes per chunk of the syncer's bookkeeping, and what
//! the sink keeps (the whole tree for a [`bavl_core::Restore`]; a skeleton entry per
//! chunk for `bavl_store::Ingest`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bavl_core::{Digest, Restore, RestoreError, Tree, VerifiedChunk};

use super::client::{Abort, BaseUrl, Client, Fetch};
use crate::error::{BanReason, DropReason, OptionsError, SyncError};
use crate::sink::{Sink, SinkError};
use crate::{Action, Event, Options, Request, RequestId, Shape, SourceId, Syncer, VerifyJob};

/// How to sync.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub sources: Vec<BaseUrl>,
    pub options: Options,
    /// Verification worker threads.
    pub verify_threads: usize,
    pub connect_timeout: Duration,
}

/// Why an HTTP sync failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// What the sink said it held does not fit the trusted root's tree.
    #[error("the chunks held from an earlier run do not fit this sync: {0}")]
    Held(RestoreError),
    /// The sink failed (a full disk, say); what it had flushed before is kept.
    #[error("writing the verified chunks: {0}")]
    Sink(SinkError),
    #[error(transparent)]
    Sync(#[from] SyncError),
}

/// Something that happened to a source, for reports.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    Banned { source: SourceId, reason: BanReason },
    Dropped { source: SourceId, reason: DropReason },
}

/// What a progress callback is shown.
pub struct Progress<'a> {
    pub syncer: &'a Syncer,
    /// Bytes of chunks fetched that verified.
    pub fetched_bytes: u64,
    /// Chunks the sink holds: given as held at the start, plus those it took since.
    pub written: u64,
    /// Of those, the chunks made durable (held at the start, or flushed since): what a
    /// run after a kill would not fetch again.
    pub durable: u64,
    pub events: &'a [SourceEvent],
}

/// The result of a completed sync; every chunk is in the sink, flushed.
pub struct Downloaded {
    /// What the root commits to (`None` only if the sync never learned it, which a
    /// completed sync always has).
    pub shape: Option<Shape>,
    /// Chunks the sink held at the start (not fetched).
    pub resumed: u64,
    /// Chunks fetched in this run.
    pub fetched: u64,
    pub fetched_bytes: u64,
    pub elapsed: Duration,
    pub status: crate::Status,
    pub sources: Vec<crate::SourceReport>,
    pub events: Vec<SourceEvent>,
}

enum Msg {
    Done(RequestId, Result<Vec<u8>, Abort>),
    Verified(Box<crate::Verified>),
}

/// Syncs `(root, version)` from the configured sources into `sink`. `progress` is called
/// about ten times a second (for a progress bar). On an error the sink has been flushed
/// (unless it failed itself): a later run with it fetches only what it lacks.
pub fn download(
    root: Digest,
    version: u64,
    cfg: &SyncConfig,
    sink: &mut dyn Sink,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Downloaded, DownloadError> {
    let start = Instant::now();
    let mut syncer = Syncer::new(root, version, cfg.options.clone())?;
    let resumed = match sink.held() {
        Some(held) => syncer.add_held(held.shape, held.indices).map_err(DownloadError::Held)?,
        None => 0,
    };
    let queue = WriteQueue::new(resumed);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new()
            .name("bavl-sync-write".into())
            .spawn_scoped(scope, || queue.drain_into(sink))
            .map_err(|e| DownloadError::Sink(Box::new(e)))?;
        let looped = run_loop(&mut syncer, cfg, &queue, progress);
        queue.close();
        let wrote = writer.join().unwrap_or_else(|_| Err("the writer thread panicked".into()));
        // A sync that failed reports why, even if the sink failed too meanwhile.
        let (fetched, fetched_bytes, events) = looped?;
        wrote.map_err(DownloadError::Sink)?;
        // Once more, with every chunk written.
        let (written, durable) = queue.counts();
        progress(&Progress { syncer: &syncer, fetched_bytes, written, durable, events: &events });
        Ok(Downloaded {
            shape: syncer.shape(),
            resumed,
            fetched,
            fetched_bytes,
            elapsed: start.elapsed(),
            status: syncer.status(),
            sources: syncer.sources(),
            events,
        })
    })
}

/// [`download`] into a [`Restore`], and the tree rebuilt (its root checked): for a state
/// that fits in memory.
pub fn download_tree(
    root: Digest,
    version: u64,
    cfg: &SyncConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Tree, Downloaded), DownloadError> {
    let mut restore = Restore::new(root);
    let done = download(root, version, cfg, &mut restore, progress)?;
    let capacity = done.shape.map_or(0, |s| s.capacity);
    let tree = restore.finish(capacity).map_err(SyncError::Restore)?;
    Ok((tree, done))
}

/// The loop that owns the syncer, until it is done or failed, or the writer failed:
/// chunks fetched, their bytes, and what happened to sources.
fn run_loop(
    syncer: &mut Syncer,
    cfg: &SyncConfig,
    queue: &WriteQueue,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(u64, u64, Vec<SourceEvent>), DownloadError> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let verify = spawn_verifiers(cfg.verify_threads.max(1), tx.clone());
    let client = Arc::new(Client::new(cfg.connect_timeout));
    let sources = Arc::new(cfg.sources.clone());
    let epoch = Instant::now();
    // All at once: each gets its share of the first round (see `Syncer::add_sources`).
    syncer.add_sources(epoch.elapsed(), cfg.sources.len() as u32);
    let max_threads = cfg.options.max_in_flight as usize + 16;
    let mut fetchers =
        Fetchers::new(client.clone(), sources.clone(), epoch, tx.clone(), max_threads);
    let mut cancels: HashMap<RequestId, Arc<AtomicBool>> = HashMap::new();
    let mut events = Vec::new();
    let (mut fetched, mut fetched_bytes, mut last_progress) = (0u64, 0u64, Instant::now());
    let outcome = loop {
        let mut finished = None;
        while let Some(action) = syncer.poll_action() {
            match action {
                Action::Send(req) => {
                    let id = req.id;
                    let cancel = Arc::new(AtomicBool::new(false));
                    cancels.insert(id, cancel.clone());
                    if fetchers.submit(req, cancel).is_err() {
                        // No thread: the request fails as the network would.
                        cancels.remove(&id);
                        let kind = crate::FailureKind::Transport;
                        syncer.handle(epoch.elapsed(), Event::Failed { id, kind });
                    }
                }
                Action::Cancel(id) => {
                    if let Some(c) = cancels.remove(&id) {
                        c.store(true, Ordering::Relaxed);
                    }
                }
                Action::Verify(job) => {
                    let q = verify.lock().unwrap_or_else(|e| e.into_inner());
                    // The workers hold the receiver as long as this function runs.
                    let _ = q.send(job);
                }
                Action::Accepted { len, chunk, .. } => {
                    fetched += 1;
                    fetched_bytes += len;
                    if !queue.push(chunk, len) {
                        // The writer failed: its error is what the caller reports.
                        finished = Some(Ok(()));
                    }
                }
                Action::Banned { source, reason } => {
                    client.forget(&sources[source.0 as usize]);
                    events.push(SourceEvent::Banned { source, reason })
                }
                Action::Dropped { source, reason } => {
                    client.forget(&sources[source.0 as usize]);
                    events.push(SourceEvent::Dropped { source, reason })
                }
                Action::Done => finished = Some(Ok(())),
                Action::Failed(e) => finished = Some(Err(e)),
            }
        }
        if queue.failed() && finished.is_none() {
            finished = Some(Ok(()));
        }
        if last_progress.elapsed() >= Duration::from_millis(100) || finished.is_some() {
            let (written, durable) = queue.counts();
            progress(&Progress { syncer, fetched_bytes, written, durable, events: &events });
            last_progress = Instant::now();
        }
        if let Some(f) = finished {
            break f;
        }
        let now = epoch.elapsed();
        let wait =
            syncer.next_wakeup().map_or(Duration::from_millis(100), |w| w.saturating_sub(now));
        match rx.recv_timeout(wait.min(Duration::from_millis(100))) {
            Ok(Msg::Done(id, result)) => {
                cancels.remove(&id);
                let now = epoch.elapsed();
                match result {
                    Ok(body) => syncer.handle(now, Event::Response { id, body }),
                    Err(Abort::Failed(kind)) => syncer.handle(now, Event::Failed { id, kind }),
                    Err(Abort::Cancelled) => {}
                }
            }
            Ok(Msg::Verified(v)) => syncer.handle(epoch.elapsed(), Event::Verified(v)),
            Err(RecvTimeoutError::Timeout) => syncer.tick(epoch.elapsed()),
            Err(RecvTimeoutError::Disconnected) => unreachable!("this loop holds a sender"),
        }
    };
    for c in cancels.values() {
        c.store(true, Ordering::Relaxed);
    }
    outcome?;
    Ok((fetched, fetched_bytes, events))
}

/// Bytes of accepted chunks (counted by their fetched length) the writer may have queued;
/// past it the sync loop waits for the writer. One chunk is always admitted.
pub const WRITE_QUEUE_BYTES: u64 = 16 << 20;
/// Bytes added to the sink between two flushes, at most.
pub const FLUSH_EVERY_BYTES: u64 = 64 << 20;
/// Time between two flushes, at most, while chunks are added.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The accepted chunks on their way to the writer thread, bounded in bytes.
struct WriteQueue {
    state: Mutex<QueueState>,
    /// Signalled when a chunk is queued or the queue is closed.
    filled: Condvar,
    /// Signalled when the writer took a chunk or failed.
    drained: Condvar,
}

struct QueueState {
    chunks: VecDeque<(Box<VerifiedChunk>, u64)>,
    bytes: u64,
    closed: bool,
    failed: bool,
    /// Chunks the sink holds (held at the start, then added), and of those the ones made
    /// durable (held at the start, then flushed).
    written: u64,
    durable: u64,
}

impl WriteQueue {
    fn new(held: u64) -> Self {
        let state = QueueState {
            chunks: VecDeque::new(),
            bytes: 0,
            closed: false,
            failed: false,
            written: held,
            durable: held,
        };
        WriteQueue { state: Mutex::new(state), filled: Condvar::new(), drained: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a chunk, waiting while the queue is full; `false` if the writer failed (the
    /// chunk is dropped).
    fn push(&self, chunk: Box<VerifiedChunk>, len: u64) -> bool {
        let mut st = self.lock();
        while !st.failed && !st.chunks.is_empty() && st.bytes + len > WRITE_QUEUE_BYTES {
            st = self.drained.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.failed {
            return false;
        }
        st.bytes += len;
        st.chunks.push_back((chunk, len));
        self.filled.notify_one();
        true
    }

    /// No more chunks: the writer flushes and ends.
    fn close(&self) {
        self.lock().closed = true;
        self.filled.notify_one();
    }

    fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Chunks written and made durable.
    fn counts(&self) -> (u64, u64) {
        let st = self.lock();
        (st.written, st.durable)
    }

    /// Flushes the sink; the chunks written before are durable.
    fn flush(&self, sink: &mut dyn Sink) -> Result<(), SinkError> {
        let written = self.lock().written;
        sink.flush()?;
        self.lock().durable = written;
        Ok(())
    }

    /// The writer thread: adds each queued chunk to the sink, flushes it now and then and
    /// at the end. At its first error it drops what is queued and refuses more.
    fn drain_into(&self, sink: &mut dyn Sink) -> Result<(), SinkError> {
        let result = self.write_all(sink);
        if result.is_err() {
            let mut st = self.lock();
            st.failed = true;
            st.chunks.clear();
            st.bytes = 0;
            self.drained.notify_all();
        }
        result
    }

    fn write_all(&self, sink: &mut dyn Sink) -> Result<(), SinkError> {
        // Bytes added since the last flush, and when the first of them was.
        let (mut unflushed, mut since) = (0u64, None::<Instant>);
        loop {
            match self.next(since) {
                Next::Chunk(chunk, len) => {
                    sink.add(*chunk)?;
                    let mut st = self.lock();
                    st.bytes -= len;
                    st.written += 1;
                    self.drained.notify_one();
                    drop(st);
                    unflushed += len;
                    since.get_or_insert_with(Instant::now);
                    if unflushed < FLUSH_EVERY_BYTES {
                        continue;
                    }
                }
                Next::FlushDue => {}
                Next::Closed if unflushed == 0 => return Ok(()),
                Next::Closed => return self.flush(sink),
            }
            self.flush(sink)?;
            (unflushed, since) = (0, None);
        }
    }

    /// Waits for the next chunk, the end, or the moment a flush is due (a second after
    /// the first unflushed chunk was added).
    fn next(&self, since: Option<Instant>) -> Next {
        let mut st = self.lock();
        loop {
            if let Some((chunk, len)) = st.chunks.pop_front() {
                return Next::Chunk(chunk, len);
            }
            if st.closed {
                return Next::Closed;
            }
            let wait = match since {
                None => FLUSH_EVERY,
                Some(t) => match FLUSH_EVERY.checked_sub(t.elapsed()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Next::FlushDue,
                },
            };
            st = self.filled.wait_timeout(st, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// What the writer thread does next.
enum Next {
    Chunk(Box<VerifiedChunk>, u64),
    FlushDue,
    Closed,
}

/// A request and its cancellation flag.
type FetchJob = (Request, Arc<AtomicBool>);

/// The threads that carry out requests. A request never waits for a busy thread while
/// fewer than `max` exist: one is started whenever none is idle, and each is reused
/// instead of a thread being started per request (on loopback, thread stacks mapped and
/// unmapped per request cost more than the requests). The syncer keeps at most
/// `Options::max_in_flight` requests in flight, so `max` (that and a few more, for
/// cancelled requests still winding down, which notice within [`super::client::POLL`])
/// bounds the threads whatever the number of sources; a request beyond it waits for the
/// next free thread. A thread idle for [`IDLE_EXIT`] ends: the pool shrinks.
struct Fetchers {
    tx: Sender<FetchJob>,
    rx: Arc<Mutex<mpsc::Receiver<FetchJob>>>,
    /// Threads waiting for a request that no submitted request has claimed yet.
    idle: Arc<AtomicUsize>,
    /// Threads alive.
    threads: Arc<AtomicUsize>,
    max: usize,
    client: Arc<Client>,
    sources: Arc<Vec<BaseUrl>>,
    epoch: Instant,
    done: Sender<Msg>,
}

/// How long a fetch thread waits for a request before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(5);

impl Fetchers {
    fn new(
        client: Arc<Client>,
        sources: Arc<Vec<BaseUrl>>,
        epoch: Instant,
        done: Sender<Msg>,
        max: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let (rx, idle) = (Arc::new(Mutex::new(rx)), Arc::new(AtomicUsize::new(0)));
        let threads = Arc::new(AtomicUsize::new(0));
        Fetchers { tx, rx, idle, threads, max, client, sources, epoch, done }
    }

    /// Threads alive now.
    fn threads(&self) -> usize {
        self.threads.load(Ordering::Acquire)
    }

    /// Hands a request to an idle thread or a new one (while fewer than `max` exist);
    /// `Err` if no thread could start and none exists.
    fn submit(&mut self, req: Request, cancel: Arc<AtomicBool>) -> Result<(), ()> {
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !claimed && self.threads() < self.max {
            let (rx, idle, threads) = (self.rx.clone(), self.idle.clone(), self.threads.clone());
            let (client, sources, done) =
                (self.client.clone(), self.sources.clone(), self.done.clone());
            let epoch = self.epoch;
            threads.fetch_add(1, Ordering::AcqRel);
            let spawned = std::thread::Builder::new().name("bavl-fetch".into()).spawn(move || {
                loop {
                    // The lock is held only by the thread waiting for the next request.
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv_timeout(IDLE_EXIT);
                    match next {
                        Ok((req, cancel)) => {
                            fetch(&client, &sources, req, epoch, &cancel, &done);
                            idle.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            // Leave only by taking itself off the idle count: if a request
                            // claimed every idle thread meantime, one is on its way here.
                            let off = |n: usize| n.checked_sub(1);
                            if idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, off).is_ok() {
                                break;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                threads.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                self.threads.fetch_sub(1, Ordering::AcqRel);
                if self.threads() == 0 {
                    return Err(());
                }
            }
        }
        // Every thread outlives this sender's use (they exit when it is dropped).
        self.tx.send((req, cancel)).map_err(|_| ())
    }
}

fn fetch(
    client: &Client,
    sources: &[BaseUrl],
    req: Request,
    epoch: Instant,
    cancel: &AtomicBool,
    tx: &Sender<Msg>,
) {
    let mut f = Fetch { guard: req.guard(), epoch, cancel, deadline: None };
    let result = client.get(&sources[req.source.0 as usize], &req.path, &mut f);
    let _ = tx.send(Msg::Done(req.id, result));
}

/// Verification workers; the returned sender queues jobs. They end when it is dropped.
fn spawn_verifiers(n: usize, tx: Sender<Msg>) -> Mutex<Sender<VerifyJob>> {
    let (jobs_tx, jobs_rx) = mpsc::channel::<VerifyJob>();
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    for _ in 0..n {
        let (rx, tx) = (jobs_rx.clone(), tx.clone());
        let _ = std::thread::Builder::new().name("bavl-verify".into()).spawn(move || loop {
            let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                Ok(job) => job,
                Err(_) => return,
            };
            if tx.send(Msg::Verified(Box::new(job.run::<bavl_core::Sha256>()))).is_err() {
                return;
            }
        });
    }
    Mutex::new(jobs_tx)
}
