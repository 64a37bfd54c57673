//! The baseline: state sync as Cosmos/IAVL (CometBFT state sync over the SDK's snapshot
//! manager) does it today, reduced to what decides its speed and its robustness.
//!
//! - **Serving.** The state's key-value pairs are serialised in key order into one stream
//!   and cut into fixed-size chunks (`chunk_bytes`; the SDK uses 10 MB, the B+AVL paper's
//!   Baseline fills chunks of a number of leaves). The chunks are opaque: nothing in a
//!   chunk can be checked alone. The snapshot metadata (chunk count and sizes) comes from
//!   an untrusted peer; the SDK also lists chunk hashes there, but a Byzantine peer that
//!   advertises the snapshot supplies those too, so they prove nothing (this model treats
//!   them as absent: the worst case the protocol admits).
//! - **Syncing.** Every chunk is fetched in parallel from every live peer (a shared queue,
//!   `workers` concurrent requests per peer, so faster peers take more). Only once every
//!   chunk is in, the stream is decoded and imported and the root of the imported tree
//!   compared with the trusted root ([`root_of`]: an IAVL-like binary Merkle tree over the
//!   sorted leaves, as the app hash in a block header).
//! - **A wrong root** restarts the sync from scratch: every chunk is thrown away and fetched
//!   again. Which peers take part in the next attempt is [`RetryPolicy`]: the B+AVL paper's
//!   model, where each failed attempt exposes one liar (charitable: a real node learns
//!   nothing from a wrong app hash about who lied), so `b` Byzantine peers cost at least
//!   `b + 1` full downloads.
//!
//! The decoder and the download loop are generic over [`Transport`], so the logic is
//! tested in memory (`tests` below) and runs over HTTP in `crate::http`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A 32-byte SHA-256 digest.
pub type Digest = [u8; 32];

/// Snapshot metadata, as a peer advertises it (untrusted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub format: u32,
    pub chunk_bytes: u64,
    pub total_bytes: u64,
    pub chunks: u64,
    pub entries: u64,
}

/// The largest stream the client accepts (bounds what an untrusted `total_bytes` can make
/// it allocate).
pub const MAX_TOTAL_BYTES: u64 = 64 << 30;

impl Meta {
    /// Checks the fields against each other and the limits.
    pub fn check(&self) -> Result<(), SyncError> {
        let bad = |why: &str| Err(SyncError::BadMeta(why.to_string()));
        if self.format != 1 {
            return bad("format is not 1");
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > 64 << 20 {
            return bad("chunk_bytes outside 1..=64 MiB");
        }
        if self.total_bytes > MAX_TOTAL_BYTES {
            return bad("total_bytes over the limit");
        }
        if self.chunks != self.total_bytes.div_ceil(self.chunk_bytes) {
            return bad("chunks is not total_bytes / chunk_bytes rounded up");
        }
        Ok(())
    }

    /// The exact length of chunk `i`.
    pub fn chunk_len(&self, i: u64) -> u64 {
        let start = i * self.chunk_bytes;
        (self.total_bytes - start).min(self.chunk_bytes)
    }
}

/// A served snapshot: the serialised stream and its metadata.
pub struct Snapshot {
    pub meta: Meta,
    pub stream: Vec<u8>,
}

impl Snapshot {
    /// Serialises `entries` (in key order) as `u16 key length | u32 value length | key |
    /// value` each (little-endian) and cuts the stream every `chunk_bytes`.
    pub fn build<'a>(
        entries: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        chunk_bytes: u64,
    ) -> Result<Snapshot, SyncError> {
        let mut stream = Vec::new();
        let mut n = 0u64;
        for (k, v) in entries {
            let kl = u16::try_from(k.len()).map_err(|_| SyncError::Decode("key too long"))?;
            let vl = u32::try_from(v.len()).map_err(|_| SyncError::Decode("value too long"))?;
            stream.extend_from_slice(&kl.to_le_bytes());
            stream.extend_from_slice(&vl.to_le_bytes());
            stream.extend_from_slice(k);
            stream.extend_from_slice(v);
            n += 1;
        }
        let total = stream.len() as u64;
        let meta = Meta {
            format: 1,
            chunk_bytes,
            total_bytes: total,
            chunks: total.div_ceil(chunk_bytes),
            entries: n,
        };
        meta.check()?;
        Ok(Snapshot { meta, stream })
    }

    /// The bytes of chunk `i`, or `None` past the end.
    pub fn chunk(&self, i: u64) -> Option<&[u8]> {
        if i >= self.meta.chunks {
            return None;
        }
        let start = (i * self.meta.chunk_bytes) as usize;
        let end = start + self.meta.chunk_len(i) as usize;
        Some(&self.stream[start..end])
    }
}

fn leaf_hash(k: &[u8], v: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update((k.len() as u32).to_le_bytes());
    h.update(k);
    h.update((v.len() as u32).to_le_bytes());
    h.update(v);
    h.finalize().into()
}

fn inner_hash(l: &Digest, r: &Digest) -> Digest {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

/// The baseline's state root: a binary Merkle tree over the leaf hashes of the sorted
/// entries (pairs combined level by level, an odd last node carried up), as an IAVL import
/// rebuilds one inner node per leaf and hashes them all. The empty state's root is
/// SHA-256 of nothing.
pub fn root_of<'a>(entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Digest {
    let mut level: Vec<Digest> = entries.map(|(k, v)| leaf_hash(k, v)).collect();
    if level.is_empty() {
        return Sha256::digest([]).into();
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| if p.len() == 2 { inner_hash(&p[0], &p[1]) } else { p[0] })
            .collect();
    }
    level[0]
}

/// A decoded pair, borrowed from the stream.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// Decodes a whole stream: the entries in order, checked strictly increasing.
pub fn decode(stream: &[u8]) -> Result<Vec<Pair<'_>>, SyncError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < stream.len() {
        let head = stream.get(at..at + 6).ok_or(SyncError::Decode("cut-off entry header"))?;
        let kl = u16::from_le_bytes([head[0], head[1]]) as usize;
        let vl = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
        at += 6;
        let k = stream.get(at..at + kl).ok_or(SyncError::Decode("cut-off key"))?;
        at += kl;
        let v = stream.get(at..at.saturating_add(vl)).ok_or(SyncError::Decode("cut-off value"))?;
        at += vl;
        if let Some((prev, _)) = out.last() {
            if *prev >= k {
                return Err(SyncError::Decode("keys out of order"));
            }
        }
        out.push((k, v));
    }
    Ok(out)
}

/// Why a sync (or one attempt) failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("malformed snapshot metadata: {0}")]
    BadMeta(String),
    #[error("the imported stream does not decode: {0}")]
    Decode(&'static str),
    #[error("the imported tree's root {got} is not the trusted root")]
    WrongRoot { got: String },
    #[error("no live peer left with chunks missing")]
    NoPeers,
    #[error("gave up after {0} attempts")]
    TooManyAttempts(u32),
    #[error("fetch failed: {0}")]
    Fetch(#[from] FetchError),
    #[error("writing the imported state: {0}")]
    Io(#[from] std::io::Error),
}

/// A transport failure (the peer is dropped for the rest of the attempt).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad answer: {0}")]
    Protocol(String),
}

/// How a client reaches the peers.
pub trait Transport: Sync {
    type Conn: Send;
    fn connect(&self, peer: usize) -> Result<Self::Conn, FetchError>;
    fn meta(&self, conn: &mut Self::Conn) -> Result<Meta, FetchError>;
    /// Chunk `index`, at most `limit` bytes.
    fn chunk(&self, conn: &mut Self::Conn, index: u64, limit: u64) -> Result<Vec<u8>, FetchError>;
}

/// Which peers take part in the attempt after a failed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryPolicy {
    /// The B+AVL paper's model: each failed attempt exposes one liar, which is excluded
    /// from then on (the first of `liars`, in order, that served a chunk in the failed
    /// attempt). A real node gets no such hint from a wrong app hash; this is the
    /// charitable case, so the baseline's times are lower bounds.
    ExposeOneLiar { liars: Vec<usize> },
    /// Retry with the same peers (what a node with no information can do; completes only
    /// if no liar serves a chunk).
    Same,
    /// A node with no information that guesses: after a failed attempt it drops one peer
    /// chosen at random (seeded) among those that served a chunk in it; when every peer is
    /// dropped, it starts over with all of them.
    DropRandom { seed: u64 },
}

/// Options of a baseline sync.
#[derive(Clone, Debug)]
pub struct Config {
    pub peers: usize,
    pub trusted_root: Digest,
    /// Concurrent requests per peer.
    pub workers: usize,
    pub policy: RetryPolicy,
    pub max_attempts: u32,
}

/// One attempt's record.
#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    pub peers: Vec<usize>,
    pub chunks: u64,
    pub bytes: u64,
    pub download_s: f64,
    pub import_s: f64,
    pub ok: bool,
    pub error: Option<String>,
    /// Chunks served per peer in this attempt (indexed by peer).
    pub served: Vec<u64>,
}

/// What a finished sync returns.
pub struct Outcome {
    pub attempts: Vec<Attempt>,
    pub stream: Vec<u8>,
    pub entries: u64,
    pub root: Digest,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn fetched_bytes(&self) -> u64 {
        self.attempts.iter().map(|a| a.bytes).sum()
    }
}

/// Runs attempts until the imported root is the trusted one (or no peer is left).
pub fn sync<T: Transport>(t: &T, cfg: &Config) -> Result<Outcome, SyncError> {
    let start = Instant::now();
    let mut live: Vec<usize> = (0..cfg.peers).collect();
    let mut attempts = Vec::new();
    let mut rng = match cfg.policy {
        RetryPolicy::DropRandom { seed } => seed ^ 0x9e37_79b9_7f4a_7c15,
        _ => 0,
    };
    loop {
        if live.is_empty() {
            return Err(SyncError::NoPeers);
        }
        if attempts.len() as u32 >= cfg.max_attempts {
            return Err(SyncError::TooManyAttempts(cfg.max_attempts));
        }
        let (mut record, result) = attempt(t, cfg, &live);
        match result {
            Ok((stream, entries, root)) => {
                record.attempt.ok = true;
                attempts.push(record.attempt);
                return Ok(Outcome { attempts, stream, entries, root, elapsed: start.elapsed() });
            }
            Err(e) => {
                record.attempt.error = Some(e.to_string());
                match &cfg.policy {
                    RetryPolicy::ExposeOneLiar { liars } => {
                        let exposed = liars
                            .iter()
                            .find(|l| live.contains(l) && record.attempt.served[**l] > 0);
                        if let Some(l) = exposed {
                            live.retain(|p| p != l);
                        }
                    }
                    RetryPolicy::DropRandom { .. } => {
                        let served: Vec<usize> = live
                            .iter()
                            .copied()
                            .filter(|p| record.attempt.served[*p] > 0)
                            .collect();
                        if !served.is_empty() {
                            // xorshift64*: deterministic for a seed.
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            let pick = served[(rng % served.len() as u64) as usize];
                            live.retain(|p| *p != pick);
                        }
                        // Every peer dropped and still no valid state: the guesses were
                        // wrong; start over with every peer (an operator's restart).
                        if live.is_empty() {
                            live = (0..cfg.peers).collect();
                        }
                    }
                    RetryPolicy::Same => {}
                }
                // Peers that failed to connect in this attempt stay out too.
                live.retain(|p| !record.dead.contains(p));
                attempts.push(record.attempt);
            }
        }
    }
}

struct Record {
    attempt: Attempt,
    dead: Vec<usize>,
}

type AttemptResult = Result<(Vec<u8>, u64, Digest), SyncError>;

/// One attempt from scratch over `live`: metadata from the first peer that answers, every
/// chunk fetched, then decode, import (root) and compare.
fn attempt<T: Transport>(t: &T, cfg: &Config, live: &[usize]) -> (Record, AttemptResult) {
    let t0 = Instant::now();
    let mut rec = Record {
        attempt: Attempt {
            peers: live.to_vec(),
            chunks: 0,
            bytes: 0,
            download_s: 0.0,
            import_s: 0.0,
            ok: false,
            error: None,
            served: vec![0; cfg.peers],
        },
        dead: Vec::new(),
    };
    // The metadata: from the first live peer that gives a well-formed one.
    let mut meta = None;
    for &p in live {
        match t.connect(p).and_then(|mut c| t.meta(&mut c)) {
            Ok(m) if m.check().is_ok() => {
                meta = Some(m);
                break;
            }
            _ => rec.dead.push(p),
        }
    }
    let Some(meta) = meta else {
        return (rec, Err(SyncError::NoPeers));
    };
    let queue: Mutex<VecDeque<u64>> = Mutex::new((0..meta.chunks).collect());
    let slots: Vec<Mutex<Option<Vec<u8>>>> = (0..meta.chunks).map(|_| Mutex::new(None)).collect();
    let served: Vec<Mutex<u64>> = (0..cfg.peers).map(|_| Mutex::new(0)).collect();
    let dead: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for &p in live.iter().filter(|p| !rec.dead.contains(p)) {
            for _ in 0..cfg.workers.max(1) {
                let (queue, slots, served, dead, meta) = (&queue, &slots, &served, &dead, &meta);
                s.spawn(move || {
                    let Ok(mut conn) = t.connect(p) else {
                        lock(dead).push(p);
                        return;
                    };
                    loop {
                        let Some(i) = lock(queue).pop_front() else { return };
                        match t.chunk(&mut conn, i, meta.chunk_len(i)) {
                            Ok(body) if body.len() as u64 == meta.chunk_len(i) => {
                                *lock(&slots[i as usize]) = Some(body);
                                *lock(&served[p]) += 1;
                            }
                            // A short or failed answer: the chunk goes back, this worker
                            // stops (the peer's other workers go on).
                            _ => {
                                lock(queue).push_front(i);
                                lock(dead).push(p);
                                return;
                            }
                        }
                    }
                });
            }
        }
    });
    for (p, n) in served.iter().enumerate() {
        rec.attempt.served[p] = *lock(n);
    }
    let mut dead = std::mem::take(&mut *lock(&dead));
    dead.sort_unstable();
    dead.dedup();
    // A peer all of whose workers failed is out; one that served and failed once is kept.
    rec.dead.extend(dead.into_iter().filter(|p| rec.attempt.served[*p] == 0));
    rec.attempt.download_s = t0.elapsed().as_secs_f64();
    // Sized by what arrived, not by the peer's claim (`total_bytes` is untrusted).
    let arrived: usize = slots.iter().map(|s| lock(s).as_ref().map_or(0, |b| b.len())).sum();
    let mut stream = Vec::with_capacity(arrived);
    for slot in &slots {
        match lock(slot).take() {
            Some(b) => {
                rec.attempt.chunks += 1;
                rec.attempt.bytes += b.len() as u64;
                stream.extend_from_slice(&b);
            }
            None => {
                // Count what was fetched anyway, then fail: no peer could supply a chunk.
                for s in &slots {
                    if let Some(b) = lock(s).as_ref() {
                        rec.attempt.chunks += 1;
                        rec.attempt.bytes += b.len() as u64;
                    }
                }
                return (rec, Err(SyncError::NoPeers));
            }
        }
    }
    let t1 = Instant::now();
    let result = import(&stream, &cfg.trusted_root);
    rec.attempt.import_s = t1.elapsed().as_secs_f64();
    match result {
        Ok((entries, root)) => (rec, Ok((stream, entries, root))),
        Err(e) => (rec, Err(e)),
    }
}

/// Decodes and imports a complete stream, then checks its root: `(entries, root)`.
pub fn import(stream: &[u8], trusted: &Digest) -> Result<(u64, Digest), SyncError> {
    let entries = decode(stream)?;
    let root = root_of(entries.iter().copied());
    if &root != trusted {
        return Err(SyncError::WrongRoot { got: hex::encode(root) });
    }
    Ok((entries.len() as u64, root))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(n: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<_> = bavl_workload::initial(7)
            .take(n as usize)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        v.sort();
        v
    }

    fn snap(s: &[(Vec<u8>, Vec<u8>)], chunk: u64) -> Snapshot {
        Snapshot::build(s.iter().map(|(k, v)| (&k[..], &v[..])), chunk).unwrap()
    }

    /// In-memory peers; a liar flips a byte in every chunk it serves.
    struct Mem<'a> {
        snap: &'a Snapshot,
        liars: Vec<usize>,
        down: Vec<usize>,
    }

    impl Transport for Mem<'_> {
        type Conn = usize;
        fn connect(&self, peer: usize) -> Result<usize, FetchError> {
            if self.down.contains(&peer) {
                return Err(FetchError::Protocol("down".into()));
            }
            Ok(peer)
        }
        fn meta(&self, _: &mut usize) -> Result<Meta, FetchError> {
            Ok(self.snap.meta.clone())
        }
        fn chunk(&self, p: &mut usize, i: u64, _limit: u64) -> Result<Vec<u8>, FetchError> {
            let mut b = self.snap.chunk(i).ok_or(FetchError::Protocol("404".into()))?.to_vec();
            if self.liars.contains(p) {
                let mid = b.len() / 2;
                b[mid] ^= 0x5a;
            }
            // Let every worker take chunks.
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok(b)
        }
    }

    fn cfg(peers: usize, root: Digest, policy: RetryPolicy) -> Config {
        Config { peers, trusted_root: root, workers: 2, policy, max_attempts: 20 }
    }

    #[test]
    fn stream_round_trips_and_root_is_order_sensitive() {
        let s = state(1000);
        let sn = snap(&s, 1000);
        assert_eq!(sn.meta.chunks, sn.meta.total_bytes.div_ceil(1000));
        let all: Vec<u8> =
            (0..sn.meta.chunks).flat_map(|i| sn.chunk(i).unwrap().to_vec()).collect();
        let back = decode(&all).unwrap();
        assert_eq!(back.len(), 1000);
        assert!(back.iter().zip(&s).all(|((k, v), (k2, v2))| k == k2 && v == v2));
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        assert_eq!(import(&all, &root).unwrap().0, 1000);
        let mut bad = all.clone();
        bad[500] ^= 1;
        assert!(import(&bad, &root).is_err());
        // Swapping two entries is caught as disorder.
        let mut swapped = s.clone();
        swapped.swap(3, 4);
        let sw = snap(&swapped, 1000);
        assert!(matches!(decode(&sw.stream), Err(SyncError::Decode("keys out of order"))));
    }

    #[test]
    fn honest_peers_complete_in_one_attempt() {
        let s = state(3000);
        let sn = snap(&s, 4096);
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        let t = Mem { snap: &sn, liars: vec![], down: vec![] };
        let out = sync(&t, &cfg(4, root, RetryPolicy::ExposeOneLiar { liars: vec![] })).unwrap();
        assert_eq!(out.attempts.len(), 1);
        assert_eq!(out.entries, 3000);
        assert_eq!(out.root, root);
        assert_eq!(out.stream, sn.stream);
        assert_eq!(out.fetched_bytes(), sn.meta.total_bytes);
    }

    #[test]
    fn wrong_root_restarts_from_scratch_and_excludes_one_liar_per_attempt() {
        let s = state(3000);
        let sn = snap(&s, 2048);
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        let liars = vec![0, 2];
        let t = Mem { snap: &sn, liars: liars.clone(), down: vec![] };
        let out = sync(&t, &cfg(5, root, RetryPolicy::ExposeOneLiar { liars })).unwrap();
        // Each liar serves at least one chunk in each attempt it is in (workers race, but
        // every worker of every peer takes a chunk while 2 KiB chunks of a ~380 KB stream
        // remain), so: fail, fail, succeed.
        assert_eq!(out.attempts.len(), 3, "{:?}", out.attempts);
        assert!(!out.attempts[0].ok && !out.attempts[1].ok && out.attempts[2].ok);
        assert_eq!(out.attempts[0].peers, vec![0, 1, 2, 3, 4]);
        assert_eq!(out.attempts[1].peers, vec![1, 2, 3, 4]);
        assert_eq!(out.attempts[2].peers, vec![1, 3, 4]);
        // Every attempt downloads everything again.
        for a in &out.attempts {
            assert_eq!(a.bytes, sn.meta.total_bytes);
        }
        assert!(
            out.attempts[0].error.as_deref().unwrap().contains("trusted root")
                || out.attempts[0].error.as_deref().unwrap().contains("decode")
        );
        assert_eq!(out.root, root);
    }

    #[test]
    fn no_information_means_no_progress() {
        let s = state(500);
        let sn = snap(&s, 1024);
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        let t = Mem { snap: &sn, liars: vec![1], down: vec![] };
        let mut c = cfg(3, root, RetryPolicy::Same);
        c.max_attempts = 3;
        assert!(matches!(sync(&t, &c), Err(SyncError::TooManyAttempts(3))));
    }

    #[test]
    fn guessing_drops_a_random_server_until_the_liar_is_gone() {
        let s = state(2000);
        let sn = snap(&s, 2048);
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        for seed in 0..5 {
            let t = Mem { snap: &sn, liars: vec![2], down: vec![] };
            let out = sync(&t, &cfg(4, root, RetryPolicy::DropRandom { seed })).unwrap();
            let n = out.attempts.len();
            // Peers leave one per failed attempt (all come back after the last is dropped);
            // every failed attempt had the liar serving; the last one succeeded because the
            // liar was gone or silent.
            for w in out.attempts.windows(2) {
                let back = w[0].peers.len() == 1 && w[1].peers.len() == 4;
                assert!(back || w[1].peers.len() + 1 == w[0].peers.len(), "seed {seed}");
            }
            assert!(out.attempts[..n - 1].iter().all(|a| a.served[2] > 0 && !a.ok));
            let last = &out.attempts[n - 1];
            assert!(last.ok && last.served[2] == 0);
            assert_eq!(out.root, root);
        }
    }

    #[test]
    fn a_dead_peer_is_skipped() {
        let s = state(500);
        let sn = snap(&s, 1024);
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        let t = Mem { snap: &sn, liars: vec![], down: vec![0] };
        let out = sync(&t, &cfg(3, root, RetryPolicy::Same)).unwrap();
        assert_eq!(out.attempts.len(), 1);
        assert_eq!(out.attempts[0].served[0], 0);
        let t = Mem { snap: &sn, liars: vec![], down: vec![0, 1, 2] };
        assert!(matches!(sync(&t, &cfg(3, root, RetryPolicy::Same)), Err(SyncError::NoPeers)));
    }

    #[test]
    fn metadata_is_checked() {
        let m = Meta { format: 1, chunk_bytes: 10, total_bytes: 95, chunks: 10, entries: 1 };
        assert!(m.check().is_ok());
        assert_eq!(m.chunk_len(9), 5);
        assert!(Meta { chunks: 9, ..m.clone() }.check().is_err());
        assert!(Meta { chunk_bytes: 0, ..m.clone() }.check().is_err());
        assert!(Meta { total_bytes: MAX_TOTAL_BYTES + 1, ..m }.check().is_err());
    }
}
