//! The syncing side of the demo: knows only the root hash, trusts no peer.
//!
//! A coordinator (the calling thread) hands out requests `(peer, chunk index)` round-robin
//! over the peers not banned, keeping a bounded window in flight. Worker threads fetch
//! each chunk from its peer and verify it with [`verify_chunk`] against the root; the
//! coordinator receives the results in arrival order, adds the verified chunks to the
//! [`Restore`] with `add_verified`, bans a peer at its first bad chunk and queues that
//! chunk again for another peer. The chunk count is learned from the first verified chunk
//! (the root commits to it); the other chunks are then requested in shuffled order, so
//! arrival order is not index order.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_core::{
    verify_chunk, Digest, ProofError, Restore, RestoreError, Sha256, Tree, VerifiedChunk,
};
use indicatif::ProgressBar;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::peer::Peer;

/// Requests in flight per worker thread.
const WINDOW_PER_THREAD: usize = 8;

/// What the syncing side observed of one peer.
#[derive(Debug, Default, Clone)]
pub struct PeerStats {
    /// Chunks accepted from this peer.
    pub served: u64,
    /// Chunks rejected from this peer.
    pub rejected: u64,
    pub banned: bool,
    /// The first rejection, as the typed error displays it.
    pub first_error: Option<String>,
    /// Rejections per error variant.
    pub errors: BTreeMap<String, u64>,
}

/// Everything the sync measured; `result` holds the rebuilt tree or why the sync failed.
pub struct SyncOutcome {
    pub peers: Vec<PeerStats>,
    /// Chunk indices in the order they were accepted.
    pub arrivals: Vec<u64>,
    /// Chunks requested again after a rejection.
    pub refetched: u64,
    /// Wall time of fetching and verifying every chunk.
    pub wall: Duration,
    /// Time summed over workers spent in `fetch` and in `verify_chunk`.
    pub fetch_cpu: Duration,
    pub verify_cpu: Duration,
    /// Time of `Restore::finish`.
    pub rebuild: Duration,
    pub result: Result<Tree>,
}

struct Arrival {
    peer: usize,
    index: u64,
    result: Result<VerifiedChunk, ProofError>,
}

/// Syncs the tree with root `root` from `peers` using `threads` verifying workers.
pub fn sync(
    root: Digest,
    peers: &[Box<dyn Peer>],
    threads: usize,
    rng: ChaCha8Rng,
    bar: ProgressBar,
) -> SyncOutcome {
    let mut co = Coordinator {
        restore: Restore::new(root),
        peers: vec![PeerStats::default(); peers.len()],
        pending: VecDeque::from([0]),
        next_peer: 0,
        outstanding: 0,
        arrivals: Vec::new(),
        refetched: 0,
        rng,
        bar,
    };
    let start = Instant::now();
    let (job_tx, job_rx) = channel::<(usize, u64)>();
    let job_rx = Mutex::new(job_rx);
    let (res_tx, res_rx) = channel::<Arrival>();
    let (run, times) = thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let res_tx = res_tx.clone();
                let job_rx = &job_rx;
                s.spawn(move || worker(&root, peers, job_rx, res_tx))
            })
            .collect();
        drop(res_tx);
        let run = co.run(job_tx, &res_rx, threads.max(1) * WINDOW_PER_THREAD);
        let times: Vec<_> = workers.into_iter().map(|w| w.join().unwrap_or_default()).collect();
        (run, times)
    });
    let wall = start.elapsed();
    co.bar.finish_and_clear();
    let t = Instant::now();
    let result =
        run.and_then(|()| co.restore.finish(0).context("rebuilding the tree from the chunks"));
    SyncOutcome {
        peers: co.peers,
        arrivals: co.arrivals,
        refetched: co.refetched,
        wall,
        fetch_cpu: times.iter().map(|t| t.0).sum(),
        verify_cpu: times.iter().map(|t| t.1).sum(),
        rebuild: t.elapsed(),
        result,
    }
}

/// Fetches and verifies until the job queue closes; returns (fetch time, verify time).
fn worker(
    root: &Digest,
    peers: &[Box<dyn Peer>],
    jobs: &Mutex<Receiver<(usize, u64)>>,
    out: Sender<Arrival>,
) -> (Duration, Duration) {
    let (mut fetch, mut verify) = (Duration::ZERO, Duration::ZERO);
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => break,
        };
        let Ok((peer, index)) = job else { break };
        let t = Instant::now();
        let bytes = peers[peer].fetch(index);
        fetch += t.elapsed();
        let t = Instant::now();
        let result = verify_chunk::<Sha256>(root, index, &bytes);
        verify += t.elapsed();
        let arrival = Arrival { peer, index, result };
        if out.send(arrival).is_err() {
            break;
        }
    }
    (fetch, verify)
}

struct Coordinator {
    restore: Restore<Sha256>,
    peers: Vec<PeerStats>,
    /// Chunk indices still to request, next first.
    pending: VecDeque<u64>,
    next_peer: usize,
    outstanding: usize,
    arrivals: Vec<u64>,
    refetched: u64,
    rng: ChaCha8Rng,
    bar: ProgressBar,
}

impl Coordinator {
    fn run(
        &mut self,
        jobs: Sender<(usize, u64)>,
        results: &Receiver<Arrival>,
        window: usize,
    ) -> Result<()> {
        loop {
            // One request at a time until the first chunk tells how many there are.
            let window = if self.restore.chunk_count().is_some() { window } else { 1 };
            while self.outstanding < window {
                let Some(index) = self.pending.pop_front() else { break };
                let peer =
                    self.pick_peer().with_context(|| format!("cannot fetch chunk {index}"))?;
                jobs.send((peer, index)).context("worker threads stopped")?;
                self.outstanding += 1;
            }
            if self.outstanding == 0 {
                return Ok(());
            }
            let arrival = results.recv().context("worker threads stopped")?;
            self.outstanding -= 1;
            self.on_arrival(arrival)?;
        }
    }

    /// The next peer in round-robin order that is not banned.
    fn pick_peer(&mut self) -> Result<usize> {
        let n = self.peers.len();
        for _ in 0..n {
            let p = self.next_peer % n;
            self.next_peer += 1;
            if !self.peers[p].banned {
                return Ok(p);
            }
        }
        bail!("every peer is banned")
    }

    fn on_arrival(&mut self, a: Arrival) -> Result<()> {
        let stats = &mut self.peers[a.peer];
        match a.result {
            Ok(chunk) => {
                let first = self.restore.chunk_count().is_none();
                self.restore.add_verified(chunk)?;
                stats.served += 1;
                self.arrivals.push(a.index);
                self.bar.inc(1);
                if let (true, Some(count)) = (first, self.restore.chunk_count()) {
                    self.bar.set_length(count);
                    let mut rest: Vec<u64> = (0..count).filter(|&i| i != a.index).collect();
                    rest.shuffle(&mut self.rng);
                    self.pending.extend(rest);
                }
            }
            Err(e) => {
                *stats.errors.entry(crate::verify::variant(&e)).or_default() += 1;
                let e = RestoreError::Invalid { index: a.index, source: e };
                stats.first_error.get_or_insert_with(|| e.to_string());
                stats.rejected += 1;
                stats.banned = true;
                self.refetched += 1;
                self.pending.push_front(a.index);
            }
        }
        Ok(())
    }
}
