//! The client library: a routing cache of range descriptors ordered by start key, requests
//! stamped with the range's epoch, and retries driven by the replicas' answers.
//!
//! Guarantees: a write is retried only after an answer that proves it did not take effect
//! (`Stale`, `NotLeader` before proposing, an unreachable node); after a timeout or an
//! `Unknown` answer the write is reported as [`ClientError::Unknown`] and not retried, so a
//! late duplicate can never apply after the client moved on. Reads retry on anything.
//! On `Stale` the client drops the one cache entry it used and keeps the replica's current
//! descriptor (DynaTree's step-by-step invalidation); a key the cache does not cover is
//! looked up in the directory. With `no_cache`, every request asks the directory first.
//!
//! The nodes a client is given are where it starts: the first time a descriptor names a
//! node it has not met, it asks the directory for the node list once, learns every
//! registered node's address and asks all of them for the directory from then on, so it
//! follows ranges and the directory onto nodes added after it started, and keeps finding
//! the directory after the nodes it was given left.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::msg::{
    ClientOp, ClientReply, ClientRequest, Message, NetError, ReplicaInfo, Reply, Transport,
};
use crate::types::{BatchOp, Epoch, GroupId, NodeId, RangeDesc, DIRECTORY_GROUP};

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub no_cache: bool,
    pub timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Duration,
    /// Fault injection for checking the checkers: send gets to any replica in turn.
    pub spread_reads: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            no_cache: false,
            timeout: Duration::from_secs(2),
            max_attempts: 30,
            backoff: Duration::from_millis(20),
            spread_reads: false,
        }
    }
}

/// Why an operation did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// A write whose outcome is unknown: it may or may not have taken effect.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// Certainly not done: every attempt failed definitely.
    #[error("gave up after {0} attempts")]
    GaveUp(u32),
    #[error("refused: {0}")]
    Refused(String),
    #[error("a batch spans more than one range; cross-range batches are not supported")]
    CrossRange,
    #[error("the proof does not verify: {0}")]
    BadProof(String),
}

/// A read verified by a proof against a range's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenRead {
    pub root: [u8; 32],
    /// The range group's applied log index the root belongs to.
    pub index: u64,
    pub value: Option<Vec<u8>>,
}

/// Counters of the routing work.
#[derive(Clone, Debug, Default)]
pub struct ClientStats {
    pub ops: u64,
    pub retries: u64,
    pub stale: u64,
    pub not_leader: u64,
    pub directory_lookups: u64,
}

/// A client of the cluster.
pub struct Client {
    pub id: u64,
    nodes: Vec<NodeId>,
    /// Nodes met so far (given, learned, or listed by the directory).
    met: BTreeSet<NodeId>,
    transport: Arc<dyn Transport>,
    opts: ClientOptions,
    cache: BTreeMap<Vec<u8>, RangeDesc>,
    leaders: HashMap<GroupId, NodeId>,
    pub stats: ClientStats,
    turn: usize,
}

impl Client {
    pub fn new(
        id: u64,
        nodes: Vec<NodeId>,
        transport: Arc<dyn Transport>,
        opts: ClientOptions,
    ) -> Self {
        let cache = BTreeMap::new();
        Client {
            id,
            met: nodes.iter().copied().collect(),
            nodes,
            transport,
            opts,
            cache,
            leaders: HashMap::new(),
            stats: ClientStats::default(),
            turn: 0,
        }
    }

    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        match self.execute(ClientOp::Get(key.to_vec())).await? {
            ClientReply::Value(v) => Ok(v),
            other => Err(ClientError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    pub async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        self.execute(ClientOp::Put(key.to_vec(), value.to_vec())).await.map(drop)
    }

    pub async fn delete(&mut self, key: &[u8]) -> Result<(), ClientError> {
        self.execute(ClientOp::Delete(key.to_vec())).await.map(drop)
    }

    /// An atomic batch; every key must fall in one range.
    pub async fn batch(&mut self, ops: Vec<BatchOp>) -> Result<(), ClientError> {
        self.execute(ClientOp::Batch(ops)).await.map(drop)
    }

    /// Entries with `start <= key < end` (empty `end`: to the end of the key space), in key
    /// order, across as many ranges as needed, at most `limit`. Each range's part is
    /// linearizable on its own; the scan as a whole is not a snapshot across ranges.
    pub async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: u32,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ClientError> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut cursor = start.to_vec();
        while (out.len() as u32) < limit && (end.is_empty() || cursor.as_slice() < end) {
            let want = limit - out.len() as u32;
            let op = ClientOp::Scan { start: cursor.clone(), end: end.to_vec(), limit: want };
            let ClientReply::Entries { entries, range_end, more } = self.execute(op).await? else {
                return Err(ClientError::Refused("unexpected answer to a scan".into()));
            };
            let last = entries.last().map(|(k, _)| k.clone());
            out.extend(entries);
            cursor = match (more, last) {
                // Resume just after the last key returned (its successor in byte order).
                (true, Some(mut k)) => {
                    k.push(0);
                    k
                }
                _ if range_end.is_empty() => break,
                _ => range_end,
            };
        }
        Ok(out)
    }

    /// The value of `key` (or its absence) with a proof, verified here against the root
    /// the range's leader reported at its read index. The caller decides whether it trusts
    /// that root (for example by comparing it across replicas at the same index).
    pub async fn prove(&mut self, key: &[u8]) -> Result<ProvenRead, ClientError> {
        let reply = self.execute(ClientOp::Prove(key.to_vec())).await?;
        let ClientReply::Proof { root, index, value, proof } = reply else {
            return Err(ClientError::Refused("unexpected answer to a proof request".into()));
        };
        let root: [u8; 32] = root
            .as_slice()
            .try_into()
            .map_err(|_| ClientError::BadProof("root is not 32 bytes".into()))?;
        let checked = match &value {
            Some(v) => {
                bavl_core::verify_membership::<bavl_core::Sha256>(&root, key, v, &proof).map(drop)
            }
            None => bavl_core::verify_absence::<bavl_core::Sha256>(&root, key, &proof).map(drop),
        };
        checked.map_err(|e| ClientError::BadProof(e.to_string()))?;
        Ok(ProvenRead { root, index, value })
    }

    async fn execute(&mut self, op: ClientOp) -> Result<ClientReply, ClientError> {
        self.stats.ops += 1;
        let key = op.key().ok_or_else(|| ClientError::Refused("no key".into()))?.to_vec();
        let write = matches!(op, ClientOp::Put(..) | ClientOp::Delete(_) | ClientOp::Batch(_));
        for attempt in 0..self.opts.max_attempts {
            if attempt > 0 {
                self.stats.retries += 1;
                tokio::time::sleep(self.opts.backoff * attempt.min(10)).await;
            }
            let Some(desc) = self.route(&key).await else { continue };
            if let ClientOp::Batch(ops) = &op {
                if !ops.iter().all(|o| desc.contains(o.key())) {
                    return Err(ClientError::CrossRange);
                }
            }
            if self.opts.spread_reads && !write {
                self.leaders.remove(&desc.id);
            }
            let target = self.target(&desc, attempt + self.stats.ops as u32);
            self.meet(target).await;
            let req = ClientRequest { group: desc.id, epoch: desc.epoch, op: op.clone() };
            let sent = tokio::time::timeout(
                self.opts.timeout,
                self.transport.send(self.id, target, Message::Client(req)),
            );
            let reply = match sent.await {
                Ok(Ok(Reply::Client(r))) => r,
                Ok(Err(NetError::Unreachable(_))) | Ok(Ok(Reply::Raft(_))) => {
                    self.leaders.remove(&desc.id);
                    continue;
                }
                Err(_) | Ok(Err(NetError::Timeout(_))) if write => {
                    return Err(ClientError::Unknown("timed out".into()))
                }
                Err(_) | Ok(Err(NetError::Timeout(_))) => {
                    self.leaders.remove(&desc.id);
                    continue;
                }
            };
            match reply {
                r @ (ClientReply::Value(_)
                | ClientReply::Done
                | ClientReply::Entries { .. }
                | ClientReply::Proof { .. }) => return Ok(r),
                ClientReply::Stale(current) => self.on_stale(&desc, current),
                ClientReply::NotLeader(hint) => {
                    self.stats.not_leader += 1;
                    match hint {
                        Some(h) if h != target => self.leaders.insert(desc.id, h),
                        _ => self.leaders.remove(&desc.id),
                    };
                }
                ClientReply::NoGroup => {
                    // The replica may have been moved away: ask the directory next time.
                    self.leaders.remove(&desc.id);
                    self.cache.remove(&desc.start);
                }
                ClientReply::Unknown(e) if write => return Err(ClientError::Unknown(e)),
                ClientReply::Unknown(_) => {}
                ClientReply::Refused(e) => return Err(ClientError::Refused(e)),
                other => return Err(ClientError::Refused(format!("unexpected answer {other:?}"))),
            }
        }
        Err(ClientError::GaveUp(self.opts.max_attempts))
    }

    /// The node to try: the known leader, else the replicas in turn.
    fn target(&mut self, desc: &RangeDesc, attempt: u32) -> NodeId {
        if let Some(l) = self.leaders.get(&desc.id) {
            return *l;
        }
        let replicas: Vec<NodeId> = desc.replicas.iter().copied().collect();
        let t = replicas[(attempt as usize + self.id as usize) % replicas.len().max(1)];
        self.leaders.insert(desc.id, t);
        t
    }

    fn on_stale(&mut self, used: &RangeDesc, current: RangeDesc) {
        self.stats.stale += 1;
        self.cache.remove(&used.start);
        if current.id == used.id && current.epoch.is_newer_than(&used.epoch) {
            self.insert(current);
        }
    }

    fn insert(&mut self, d: RangeDesc) {
        if self.opts.no_cache {
            return;
        }
        let overlapping: Vec<Vec<u8>> =
            self.cache.iter().filter(|(_, c)| overlaps(c, &d)).map(|(k, _)| k.clone()).collect();
        for k in overlapping {
            self.cache.remove(&k);
        }
        self.cache.insert(d.start.clone(), d);
    }

    /// The descriptor to route `key` by: from the cache, else from the directory.
    async fn route(&mut self, key: &[u8]) -> Option<RangeDesc> {
        if !self.opts.no_cache {
            if let Some((_, d)) = self.cache.range(..=key.to_vec()).next_back() {
                if d.contains(key) {
                    return Some(d.clone());
                }
            }
        }
        self.stats.directory_lookups += 1;
        self.turn += 1;
        let node = self.nodes[self.turn % self.nodes.len()];
        let req = ClientRequest {
            group: DIRECTORY_GROUP,
            epoch: Epoch::default(),
            op: ClientOp::Lookup(key.to_vec()),
        };
        let sent = tokio::time::timeout(
            self.opts.timeout,
            self.transport.send(self.id, node, Message::Client(req)),
        );
        match sent.await {
            Ok(Ok(Reply::Client(ClientReply::Desc(Some(d))))) => {
                self.insert(d.clone());
                Some(d)
            }
            _ => None,
        }
    }

    /// The directory's descriptors, read at the directory's leader.
    pub async fn ranges(&mut self) -> Option<Vec<RangeDesc>> {
        match self.directory(ClientOp::Ranges).await? {
            ClientReply::Ranges(r) => Some(r),
            _ => None,
        }
    }

    /// Sends a directory operation to each node in turn until one answers for sure (not
    /// `NotLeader`, `NoGroup` or `Unknown`), for up to `max_attempts` rounds.
    pub async fn directory(&mut self, op: ClientOp) -> Option<ClientReply> {
        for attempt in 0..self.opts.max_attempts * self.nodes.len() as u32 {
            if attempt > 0 && attempt % self.nodes.len() as u32 == 0 {
                tokio::time::sleep(self.opts.backoff).await;
            }
            self.turn += 1;
            let node = self.nodes[self.turn % self.nodes.len()];
            let req =
                ClientRequest { group: DIRECTORY_GROUP, epoch: Epoch::default(), op: op.clone() };
            let sent = self.transport.send(self.id, node, Message::Client(req));
            match tokio::time::timeout(self.opts.timeout, sent).await {
                Ok(Ok(Reply::Client(r))) if crate::dirroute::definite(&r) => return Some(r),
                _ => {}
            }
        }
        None
    }

    /// Tells the transport where node `id` listens (a node added after the client started;
    /// an empty address tells it nothing), and asks it for the directory too from now on.
    pub fn learn(&mut self, id: NodeId, addr: &str) {
        if !addr.is_empty() {
            self.transport.learn(id, addr);
        }
        self.met.insert(id);
        if !self.nodes.contains(&id) {
            self.nodes.push(id);
        }
    }

    /// The first time `node` is met: the directory's node list, every address in it
    /// learned (see the module doc). A node the list lacks is met all the same (it is not
    /// asked about again).
    async fn meet(&mut self, node: NodeId) {
        if !self.met.insert(node) {
            return;
        }
        if let Some(ClientReply::Nodes(list)) = self.directory(ClientOp::Nodes).await {
            for n in list {
                self.learn(n.id, &n.addr);
            }
        }
    }

    /// What node `node` holds of group `g` (no read barrier), if it answers.
    pub async fn info(&mut self, node: NodeId, g: GroupId) -> Option<ReplicaInfo> {
        match self.ask(node, g, ClientOp::Info).await {
            Some(ClientReply::Info(i)) => Some(i),
            _ => None,
        }
    }

    /// Sends one request for group `g` to node `node` alone (no routing, no retry): its
    /// answer, if any within the timeout.
    pub async fn ask(&mut self, node: NodeId, g: GroupId, op: ClientOp) -> Option<ClientReply> {
        let req = ClientRequest { group: g, epoch: Epoch::default(), op };
        let sent = self.transport.send(self.id, node, Message::Client(req));
        match tokio::time::timeout(self.opts.timeout, sent).await {
            Ok(Ok(Reply::Client(r))) => Some(r),
            _ => None,
        }
    }

    /// The cached descriptors, ordered by start key.
    pub fn cached(&self) -> Vec<RangeDesc> {
        self.cache.values().cloned().collect()
    }
}

fn overlaps(a: &RangeDesc, b: &RangeDesc) -> bool {
    let a_before_b_end = b.end.is_empty() || a.start < b.end;
    let b_before_a_end = a.end.is_empty() || b.start < a.end;
    a_before_b_end && b_before_a_end
}
