//! Snapshot transfer as bavl chunks fetched in parallel from several replicas.
//!
//! openraft's leader offers a replica its snapshot (`RaftRpc::Snapshot`), which carries a
//! [`Manifest`] — descriptor, root, capacity, chunk count, the log id of the committed
//! `Attest` entry naming the root — and no chunk. Before handing the snapshot to openraft,
//! the receiving node fetches the chunks (`RaftRpc::Fetch`, batches of [`BATCH`] chunks) in
//! parallel from the sender and the voters of the snapshot's membership, one worker per
//! source pulling batches from a shared queue. Every chunk is verified on arrival against
//! the manifest's root and index (`bavl_core::verify_chunk`, which also checks the chunk
//! count the root commits to); a source whose answer is late, refused, malformed or holds a
//! bad chunk is dropped and its batch re-asked of the others. The snapshot is installed
//! only when every chunk arrived, and `RangeState::import` checks the rebuilt root again.
//!
//! A replica serves chunks only from a retained version (`versions`) with exactly the
//! asked `(index, root)`; the version's copy-on-write tree lives as long as it is retained.
//!
//! Guarantees: sizes are bounded before allocating (chunk count, batch length, reply
//! bytes); no input from a peer can panic the learner; a fetch ends within [`FETCH_LIMIT`].

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bavl_core::Sha256;
use serde::{Deserialize, Serialize};

use crate::msg::{Message, RaftReply, RaftRpc, Reply, Transport};
use crate::node::Node;
use crate::types::{typ, ChunkBytes, GroupId, NodeId, RangeDesc, SnapshotData};

/// Chunks a learner asks for in one request.
pub const BATCH: u32 = 8;
/// Chunks a server returns at most per request (a longer request is refused).
pub const MAX_BATCH: u32 = 64;
/// A server stops adding chunks to a reply once it holds this many bytes.
pub const MAX_REPLY_BYTES: usize = 8 << 20;
/// A manifest naming more chunks is refused before anything is allocated.
pub const MAX_CHUNKS: u64 = 1 << 24;
/// Time limit of one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Time limit of a whole fetch.
pub const FETCH_LIMIT: Duration = Duration::from_secs(60);
/// Fetches remembered for [`Node::fetch_log`].
const LOG_LEN: usize = 32;

/// What a snapshot offer carries instead of the chunks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub desc: Option<RangeDesc>,
    #[serde(with = "crate::codec::bytes")]
    pub root: Vec<u8>,
    pub capacity: u32,
    pub chunk_count: u64,
    pub next_group_id: u64,
    /// The committed `Attest` entry naming `root` (none: a group's origin snapshot).
    pub attested: Option<typ::LogId>,
    /// The range's merge state (see `merge`), small: carried whole.
    #[serde(default)]
    pub merge: crate::merge::MergeState,
}

impl Manifest {
    pub fn of(data: &SnapshotData) -> Self {
        Manifest {
            desc: data.desc.clone(),
            root: data.root.clone(),
            capacity: data.capacity,
            chunk_count: data.chunks.len() as u64,
            next_group_id: data.next_group_id,
            attested: data.attested,
            merge: data.merge.clone(),
        }
    }
}

/// Chunks `first .. first + count` of the version at log index `index` with root `root`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FetchRequest {
    pub index: u64,
    #[serde(with = "crate::codec::bytes")]
    pub root: Vec<u8>,
    pub first: u64,
    pub count: u32,
}

/// Why a fetch failed (openraft's leader offers the snapshot again later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("bad manifest: {0}")]
    BadManifest(&'static str),
    #[error("a fetch of group {0} is already under way")]
    Busy(GroupId),
    #[error("{0} chunks missing and no source left")]
    NoSource(usize),
    #[error("the fetch took longer than {0:?}")]
    Timeout(Duration),
}

/// One fetch, for tests and diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    pub group: GroupId,
    pub index: u64,
    pub chunks: u64,
    /// Chunks accepted, per source.
    pub served: BTreeMap<NodeId, u64>,
    /// Chunks refused (failed verification), per source.
    pub refused: BTreeMap<NodeId, u64>,
    /// Sources dropped, each with why (bad chunk, timeout, refusal, an empty reply).
    pub dropped: BTreeMap<NodeId, String>,
    pub ok: bool,
}

/// A node's fetch bookkeeping.
#[derive(Default)]
pub struct FetchState {
    busy: Mutex<HashSet<GroupId>>,
    log: Mutex<VecDeque<FetchStats>>,
    /// Fault injection for tests: corrupt one chunk of every reply served.
    corrupt: AtomicBool,
}

struct Job {
    queue: VecDeque<(u64, u32)>,
    chunks: Vec<Option<ChunkBytes>>,
    stats: FetchStats,
}

struct Ctx {
    transport: Arc<dyn Transport>,
    me: NodeId,
    group: GroupId,
    index: u64,
    root: [u8; 32],
    total: u64,
    job: Mutex<Job>,
}

impl Ctx {
    fn requeue(&self, first: u64, count: u32) {
        if count > 0 {
            self.job.lock().expect("not poisoned").queue.push_front((first, count));
        }
    }

    /// Pulls batches until the queue is empty (`Ok`) or this source fails (why).
    async fn worker(self: Arc<Self>, source: NodeId) -> Result<(), String> {
        loop {
            let next = self.job.lock().expect("not poisoned").queue.pop_front();
            let Some((first, count)) = next else { return Ok(()) };
            let root = self.root.to_vec();
            let req = FetchRequest { index: self.index, root, first, count };
            let rpc = Box::new(RaftRpc::Fetch(req));
            let msg = Message::Raft { group: self.group, from: self.me, rpc };
            let sent =
                tokio::time::timeout(REQUEST_TIMEOUT, self.transport.send(self.me, source, msg));
            let chunks = match sent.await {
                Ok(Ok(Reply::Raft(RaftReply::Chunks(c))))
                    if !c.is_empty() && c.len() <= count as usize =>
                {
                    c
                }
                other => {
                    self.requeue(first, count);
                    return Err(match other {
                        Err(_) => format!("no reply within {REQUEST_TIMEOUT:?}"),
                        Ok(Err(e)) => format!("transport: {e}"),
                        Ok(Ok(Reply::Raft(RaftReply::Refused(why)))) => format!("refused: {why}"),
                        Ok(Ok(Reply::Raft(RaftReply::Chunks(c)))) => {
                            format!("{} chunks for a batch of {count}", c.len())
                        }
                        Ok(Ok(_)) => "an unexpected reply".to_string(),
                    });
                }
            };
            let got = chunks.len() as u32;
            for (k, c) in chunks.into_iter().enumerate() {
                let i = first + k as u64;
                let ok = bavl_core::verify_chunk::<Sha256>(&self.root, i, &c.0)
                    .is_ok_and(|v| v.chunk_count == self.total);
                let mut job = self.job.lock().expect("not poisoned");
                if !ok {
                    *job.stats.refused.entry(source).or_default() += 1;
                    drop(job);
                    self.requeue(i, count - k as u32);
                    return Err(format!("chunk {i} failed verification"));
                }
                *job.stats.served.entry(source).or_default() += 1;
                job.chunks[i as usize] = Some(c);
            }
            // A reply cut short by its byte bound: the rest goes back to the queue.
            self.requeue(first + u64::from(got), count - got);
        }
    }
}

/// Releases a group's fetch slot however the fetch ends.
struct Slot<'a>(&'a FetchState, GroupId);
impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.busy.lock().expect("not poisoned").remove(&self.1);
    }
}

impl Node {
    /// Fault injection for tests: every reply to a `Fetch` this node serves carries one
    /// corrupted chunk.
    pub fn corrupt_served_chunks(&self, on: bool) {
        self.fetch.corrupt.store(on, Ordering::SeqCst);
    }

    /// The latest fetches this node made, oldest first.
    pub fn fetch_log(&self) -> Vec<FetchStats> {
        self.fetch.log.lock().expect("not poisoned").iter().cloned().collect()
    }

    /// Serves a `Fetch` from a retained version of group `g`.
    pub(crate) fn serve_fetch(&self, g: GroupId, req: &FetchRequest) -> RaftReply {
        let Some(group) = self.group(g) else {
            return RaftReply::Refused(format!("node {} hosts no group {g}", self.id));
        };
        if req.count == 0 || req.count > MAX_BATCH {
            return RaftReply::Refused(format!("batch of {} chunks out of bounds", req.count));
        }
        let shared = group.sm.shared.lock().expect("not poisoned");
        let Some(v) = shared.versions.find(req.index, &req.root) else {
            return RaftReply::Refused(format!("no version at index {} with that root", req.index));
        };
        let tree = v.tree.clone();
        drop(shared);
        let end = req.first.saturating_add(u64::from(req.count)).min(tree.chunk_count());
        let (mut out, mut bytes) = (Vec::new(), 0);
        for i in req.first..end {
            match tree.export_chunk(i) {
                Ok(c) => {
                    bytes += c.len();
                    out.push(ChunkBytes(c));
                }
                Err(e) => return RaftReply::Refused(format!("chunk {i}: {e}")),
            }
            if bytes >= MAX_REPLY_BYTES {
                break;
            }
        }
        if out.is_empty() {
            return RaftReply::Refused(format!("no chunk from {}", req.first));
        }
        if self.fetch.corrupt.load(Ordering::SeqCst) {
            let c = &mut out[0].0;
            let mid = c.len() / 2;
            c[mid] ^= 0x55;
        }
        RaftReply::Chunks(out)
    }

    /// Fetches the chunks a snapshot offer's manifest names from `from` and the voters of
    /// the snapshot's membership, verifying each; the snapshot data to install.
    pub(crate) async fn fetch_snapshot(
        &self,
        g: GroupId,
        from: NodeId,
        meta: &typ::SnapshotMeta,
        m: &Manifest,
    ) -> Result<SnapshotData, FetchError> {
        let root: [u8; 32] =
            m.root.as_slice().try_into().map_err(|_| FetchError::BadManifest("root"))?;
        if m.chunk_count > MAX_CHUNKS {
            return Err(FetchError::BadManifest("too many chunks"));
        }
        if m.desc.is_none() {
            return Err(FetchError::BadManifest("no descriptor"));
        }
        let index = meta.last_log_id.map_or(0, |l| l.index);
        if m.attested.is_some_and(|a| a.index <= index) {
            // An `Attest` is proposed after the index it names was applied.
            return Err(FetchError::BadManifest("attested before its own index"));
        }
        if !self.fetch.busy.lock().expect("not poisoned").insert(g) {
            return Err(FetchError::Busy(g));
        }
        let _slot = Slot(&self.fetch, g);
        let mut sources = vec![from];
        for v in meta.last_membership.membership().voter_ids() {
            if !sources.contains(&v) {
                sources.push(v);
            }
        }
        sources.retain(|s| *s != self.id);
        let queue = (0..m.chunk_count)
            .step_by(BATCH as usize)
            .map(|f| (f, (m.chunk_count - f).min(u64::from(BATCH)) as u32))
            .collect();
        let stats = FetchStats { group: g, index, chunks: m.chunk_count, ..Default::default() };
        let chunks = vec![None; m.chunk_count as usize];
        let ctx = Arc::new(Ctx {
            transport: self.transport.clone(),
            me: self.id,
            group: g,
            index,
            root,
            total: m.chunk_count,
            job: Mutex::new(Job { queue, chunks, stats }),
        });
        let run = tokio::time::timeout(FETCH_LIMIT, run(ctx.clone(), sources)).await;
        let mut job = std::mem::replace(
            &mut *ctx.job.lock().expect("not poisoned"),
            Job { queue: VecDeque::new(), chunks: Vec::new(), stats: FetchStats::default() },
        );
        let result = match run {
            Err(_) => Err(FetchError::Timeout(FETCH_LIMIT)),
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => {
                let chunks: Option<Vec<ChunkBytes>> = job.chunks.drain(..).collect();
                match chunks {
                    Some(chunks) => Ok(SnapshotData {
                        desc: m.desc.clone(),
                        root: m.root.clone(),
                        capacity: m.capacity,
                        chunks,
                        next_group_id: m.next_group_id,
                        attested: m.attested,
                        merge: m.merge.clone(),
                    }),
                    None => Err(FetchError::NoSource(job.queue.len())),
                }
            }
        };
        job.stats.ok = result.is_ok();
        let mut log = self.fetch.log.lock().expect("not poisoned");
        log.push_back(job.stats);
        while log.len() > LOG_LEN {
            log.pop_front();
        }
        result
    }
}

/// Runs one worker per live source until the queue is empty (a round ends when every
/// worker has; a batch a failing source put back after the others finished is taken by
/// the next round, without that source).
async fn run(ctx: Arc<Ctx>, mut live: Vec<NodeId>) -> Result<(), FetchError> {
    loop {
        let left = ctx.job.lock().expect("not poisoned").queue.len();
        if left == 0 {
            return Ok(());
        }
        if live.is_empty() {
            return Err(FetchError::NoSource(left));
        }
        let mut set = tokio::task::JoinSet::new();
        for &s in &live {
            let c = ctx.clone();
            set.spawn(async move { (s, c.worker(s).await) });
        }
        let mut still = Vec::new();
        while let Some(r) = set.join_next().await {
            match r {
                Ok((s, Ok(()))) => still.push(s),
                Ok((s, Err(why))) => {
                    ctx.job.lock().expect("not poisoned").stats.dropped.insert(s, why);
                }
                Err(_) => {}
            }
        }
        still.sort_unstable();
        live = still;
    }
}
