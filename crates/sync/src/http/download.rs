//! The HTTP sync loop: the [`Syncer`] driven over real sockets.
//!
//! One thread owns the syncer and carries out its actions: each request runs on a thread
//! of its own through the [`Client`] (the syncer's per-source windows bound how many run
//! at once), each verification on a pool of worker threads running [`VerifyJob::run`],
//! so hashing never holds up the network. Everything comes back on one channel. Every
//! accepted chunk is appended to the resume file (a store checkpoint being filled), which
//! a thread of its own syncs every 8 MiB, and which is sealed into a complete checkpoint at
//! the end; a later run with the same file verifies its chunks again and fetches only the
//! rest. Memory: what the syncer's budget bounds (requests in flight at their
//! limits, bodies awaiting verification) plus the verified chunks the rebuild needs.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bavl_core::{Digest, Tree};

use super::client::{Abort, BaseUrl, Client, Fetch};
use crate::error::{BanReason, DropReason, OptionsError, SyncError};
use crate::{resume, Action, Event, Options, Request, RequestId, SourceId, Syncer, VerifyJob};

/// How to sync.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub sources: Vec<BaseUrl>,
    pub options: Options,
    /// Verification worker threads.
    pub verify_threads: usize,
    /// The resume file (created if missing); `None` for none.
    pub resume: Option<PathBuf>,
    pub connect_timeout: Duration,
}

/// Why an HTTP sync failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error("resume file {path}: {source}")]
    Resume { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Sync(#[from] SyncError),
}

/// Something that happened to a source, for reports.
#[derive(Debug, Clone)]
pub enum SourceEvent {
    Banned { source: SourceId, reason: BanReason },
    Dropped { source: SourceId, reason: DropReason },
}

/// The result of a completed sync.
pub struct Downloaded {
    pub tree: Tree,
    /// The resume file, sealed: a complete store checkpoint of the version
    /// (`bavl_store::Store::adopt_checkpoint` makes it a store without writing it again).
    pub checkpoint: Option<PathBuf>,
    /// Chunks taken from the resume file (not fetched).
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

/// Syncs `(root, version)` from the configured sources. `progress` is called about ten
/// times a second with the syncer (for a progress bar) and the bytes fetched so far.
pub fn download(
    root: Digest,
    version: u64,
    cfg: &SyncConfig,
    progress: &mut dyn FnMut(&Syncer, u64, &[SourceEvent]),
) -> Result<Downloaded, DownloadError> {
    let start = Instant::now();
    let mut syncer = Syncer::new(root, version, cfg.options.clone())?;
    let mut journal = match &cfg.resume {
        Some(path) => Some(Journal::open(path, &root, version, &mut syncer)?),
        None => None,
    };
    let resumed = journal.as_ref().map_or(0, |j| j.resumed);
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
                Action::Accepted { body, .. } => {
                    fetched += 1;
                    fetched_bytes += body.len() as u64;
                    if let Some(j) = journal.as_mut() {
                        j.append(&body)?;
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
        if last_progress.elapsed() >= Duration::from_millis(100) || finished.is_some() {
            progress(&syncer, fetched_bytes, &events);
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
    if let Err(e) = outcome {
        if let Some(j) = journal.as_mut() {
            j.sync()?;
        }
        return Err(e.into());
    }
    let status = syncer.status();
    let reports = syncer.sources();
    let tree = syncer.finish()?;
    let checkpoint = match journal {
        Some(j) => Some(j.seal(&root, version, &tree, status.total.unwrap_or(0))?),
        None => None,
    };
    Ok(Downloaded {
        tree,
        checkpoint,
        resumed,
        fetched,
        fetched_bytes,
        elapsed: start.elapsed(),
        status,
        sources: reports,
        events,
    })
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

/// Bytes appended to the resume file between two (background) syncs.
const SYNC_EVERY: u64 = 8 << 20;

/// The resume file, appended as chunks are accepted: a store checkpoint being filled
/// ([`resume`]). Appends go to the page cache from the sync loop; a thread of its own
/// `fdatasync`s every [`SYNC_EVERY`] bytes, so the loop never waits for the disk (an
/// `fdatasync` of 60 MB on the loop held every response back by 0.3 s), and sealing it
/// at the end has only the last slice left to sync.
struct Journal {
    path: PathBuf,
    file: File,
    resumed: u64,
    unsynced: u64,
    flusher: Option<(Sender<()>, std::thread::JoinHandle<()>)>,
    failed: Arc<Mutex<Option<io::Error>>>,
}

impl Journal {
    /// Opens or creates the file; gives its chunks to the syncer (which verifies them),
    /// and keeps the file up to the first one that fails or repeats.
    fn open(
        path: &PathBuf,
        root: &Digest,
        version: u64,
        syncer: &mut Syncer,
    ) -> Result<Journal, DownloadError> {
        let err = |source| DownloadError::Resume { path: path.clone(), source };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(err)?;
        let mut resumed = 0;
        let keep = match resume::read(&bytes, root, version) {
            Ok(r) => {
                let mut keep = r.valid_len;
                for (offset, body) in &r.chunks {
                    // A chunk that fails verification, and every one after it, is fetched
                    // again (the file must end up holding each chunk once).
                    if syncer.add_local_chunk_unindexed(body).is_err() {
                        keep = *offset;
                        break;
                    }
                    resumed += 1;
                }
                keep
            }
            // Empty, damaged or another sync's: start afresh.
            Err(_) => 0,
        };
        drop(bytes);
        file.set_len(keep as u64).map_err(err)?;
        file.seek(SeekFrom::End(0)).map_err(err)?;
        if keep == 0 {
            file.write_all(&resume::header(root, version)).map_err(err)?;
        }
        file.sync_all().map_err(err)?;
        let failed = Arc::new(Mutex::new(None));
        let flusher = {
            let (tx, rx) = mpsc::channel::<()>();
            let (clone, failed) = (file.try_clone().map_err(err)?, failed.clone());
            let handle = std::thread::Builder::new()
                .name("bavl-resume-sync".into())
                .spawn(move || {
                    while rx.recv().is_ok() {
                        while rx.try_recv().is_ok() {}
                        if let Err(e) = clone.sync_data() {
                            *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                            return;
                        }
                    }
                })
                .map_err(err)?;
            Some((tx, handle))
        };
        Ok(Journal { path: path.clone(), file, resumed, unsynced: 0, flusher, failed })
    }

    fn err(&self, source: io::Error) -> DownloadError {
        DownloadError::Resume { path: self.path.clone(), source }
    }

    fn append(&mut self, body: &[u8]) -> Result<(), DownloadError> {
        if let Some(e) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(self.err(e));
        }
        // The length, then the body as it is (no copy of the chunk into a record): a kill
        // between the two writes leaves a record cut short, which resuming drops.
        self.file.write_all(&resume::record_prefix(body)).map_err(|e| self.err(e))?;
        self.file.write_all(body).map_err(|e| self.err(e))?;
        self.unsynced += 4 + body.len() as u64;
        if self.unsynced >= SYNC_EVERY {
            self.unsynced = 0;
            if let Some((tx, _)) = &self.flusher {
                let _ = tx.send(());
            }
        }
        Ok(())
    }

    /// Stops the background syncs and syncs what is left.
    fn sync(&mut self) -> Result<(), DownloadError> {
        if let Some((tx, handle)) = self.flusher.take() {
            drop(tx);
            let _ = handle.join();
        }
        if let Some(e) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(self.err(e));
        }
        self.file.sync_data().map_err(|e| self.err(e))
    }

    /// Completes the file as the checkpoint of `tree` (final header and trailer), synced.
    fn seal(
        mut self,
        root: &Digest,
        version: u64,
        tree: &Tree,
        chunks: u64,
    ) -> Result<PathBuf, DownloadError> {
        use std::os::unix::fs::FileExt as _;
        let (head, trailer) = resume::seal(root, version, tree.capacity(), tree.len(), chunks);
        self.file.write_all(&trailer).map_err(|e| self.err(e))?;
        self.file.write_all_at(&head, 0).map_err(|e| self.err(e))?;
        self.sync()?;
        Ok(self.path)
    }
}
