//! A node: one process hosting replicas of many groups (the directory and ranges) over one
//! [`Transport`], serving Raft messages and client requests, and driving splits.
//!
//! Guarantees: a client request is checked against the replica's fence keys and epoch
//! before anything else (answering `Stale` with the current descriptor), and writes are
//! checked again when applied, in log order, so a write routed by an old epoch never lands
//! in the wrong range. A get is served only after a read barrier (a lease or read-index) and a re-check
//! of the fence keys. On start a node reopens every group whose files it holds.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use crate::consensus::{Consensus, OpenraftGroup, ProposeError};
use crate::log_store::Durability;
use crate::msg::{ClientOp, ClientReply, ClientRequest, Message, RaftReply, Reply, Transport};
use crate::range::RangeState;
use crate::sm::seed_group;
use crate::types::{Command, GroupId, NodeId, NodeInfo, RangeDesc, Response, DIRECTORY_GROUP};

/// How a node runs. [`NodeOptions::default`] is how `bavl-cluster node` runs unless its
/// flags say otherwise (the flags' defaults are these); `dir` and `seeds` have to be set.
#[derive(Clone)]
pub struct NodeOptions {
    /// Where the node keeps its groups' logs, snapshots and markers. Default: empty (the
    /// working directory), to be set.
    pub dir: PathBuf,
    /// Whether Raft log appends are fsynced. Default [`Durability::Fsync`]: an acknowledged
    /// write survives the machine going down, not only the process.
    pub durability: Durability,
    /// openraft's settings for every group. Default: [`raft_config`]`(`[`HEARTBEAT_MS`]`,
    /// `[`ELECTION_MIN_MS`]`, `[`SNAPSHOT_EVERY`]`)`.
    pub raft: Arc<openraft::Config>,
    /// A range leader splits its range once it holds more keys than this (keys). Default
    /// 1000: ranges stay small enough that a replica moved or restored moves a small
    /// snapshot, and a cluster of a few thousand keys already has several ranges to spread.
    pub split_keys: u64,
    /// Chunk capacity of the ranges this node bootstraps (entries per chunk, within
    /// `bavl_core::MIN_CAPACITY..=MAX_CAPACITY`). Default `bavl_core::DEFAULT_CAPACITY`
    /// (64), a tree's own default.
    pub capacity: u32,
    /// Fault injection for checking the checkers, never for use: serve gets from the local
    /// state of any replica, without a read barrier (stale reads). Default false.
    pub unsafe_local_reads: bool,
    /// Period of the leader duties ([`Node::tick`]), in milliseconds. Default 500: the
    /// duties (reports, attests, moves, garbage checks) run on a multiple of it, and the
    /// load window and `dead_ticks` count in it (a 10-tick window is 5 s, 15 dead ticks are
    /// 7.5 s).
    pub tick_ms: u64,
    /// Run the rebalancer when this node leads the directory (see `rebalance`). Default
    /// true.
    pub rebalance: bool,
    /// Replicas per range the rebalancer keeps (replicas). Default 3: a range survives one
    /// node down with a majority left.
    pub replicas: usize,
    /// Nodes to ask for the directory when this node holds no replica of it. Default
    /// none, to be set (`bavl-cluster node` gives its other peers).
    pub seeds: Vec<NodeId>,
    /// Load measurement, load splits, dead-node detection (see `load`, `liveness`).
    /// Default [`LoadOptions::default`](crate::load::LoadOptions::default).
    pub load: crate::load::LoadOptions,
}

/// openraft's heartbeat period of a node by default, in milliseconds.
pub const HEARTBEAT_MS: u64 = 100;
/// The shortest election timeout of a node by default, in milliseconds (the longest is
/// twice that, see [`raft_config`]): six heartbeat periods, so a follower stands only after
/// several heartbeats in a row went missing. A leader's lease lasts 3/4 of it (see `lease`).
pub const ELECTION_MIN_MS: u64 = 600;
/// Raft log entries between two log-compaction snapshots of a group by default (each one
/// exports the whole range, serialises and fsyncs it).
pub const SNAPSHOT_EVERY: u64 = 2000;

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            dir: PathBuf::new(),
            durability: Durability::Fsync,
            raft: raft_config(HEARTBEAT_MS, ELECTION_MIN_MS, SNAPSHOT_EVERY),
            split_keys: 1000,
            capacity: bavl_core::DEFAULT_CAPACITY,
            unsafe_local_reads: false,
            tick_ms: 500,
            rebalance: true,
            replicas: 3,
            seeds: Vec::new(),
            load: crate::load::LoadOptions::default(),
        }
    }
}

/// openraft settings (milliseconds; a snapshot every `snapshot_every` log entries, a fifth
/// of that kept in the log after it): the election timeout lies in `election_min..2 *
/// election_min`.
pub fn raft_config(
    heartbeat: u64,
    election_min: u64,
    snapshot_every: u64,
) -> Arc<openraft::Config> {
    let c = openraft::Config {
        heartbeat_interval: heartbeat,
        election_timeout_min: election_min,
        election_timeout_max: election_min * 2,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: snapshot_every / 5,
        ..Default::default()
    };
    Arc::new(c.validate().expect("valid raft config"))
}

/// One node.
pub struct Node {
    pub id: NodeId,
    /// This node itself, for tasks spawned from `&self` methods.
    pub(crate) me: Weak<Node>,
    pub(crate) opts: NodeOptions,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) groups: Mutex<HashMap<GroupId, OpenraftGroup>>,
    /// Told of every group a split creates here.
    pub(crate) children: UnboundedSender<GroupId>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Set by [`Node::shutdown`]: from then on the node serves nothing and starts nothing.
    stopped: AtomicBool,
    /// Groups this node is moving a replica of (it leads them); see `moves`.
    pub(crate) moving: Mutex<HashSet<GroupId>>,
    /// Per led group with learners and no move here: the ticks they have been seen.
    pub(crate) learner_ticks: Mutex<HashMap<GroupId, u32>>,
    /// Set while the rebalancer's move is under way.
    pub(crate) rebalancing: AtomicBool,
    /// Replicas the last garbage check found removed (deleted if the next one agrees).
    pub(crate) garbage: Mutex<std::collections::BTreeSet<GroupId>>,
    /// Snapshot fetches under way and done (see `fetch`).
    pub(crate) fetch: crate::fetch::FetchState,
    /// Client operations served per group (see `load`).
    pub(crate) load: Mutex<crate::load::LoadTracker>,
    /// The directory leader's view of the nodes (see `liveness`).
    pub(crate) view: Mutex<crate::liveness::DirView>,
    /// Held while a group is being started (see [`Node::start_group`]).
    pub(crate) starting: tokio::sync::Mutex<()>,
    /// Frozen groups this node is finishing a merge of (it leads them); see `merge_driver`.
    pub(crate) merging: Mutex<HashSet<GroupId>>,
    /// The merge planner's candidate pair and the plans in a row it was seen in, and
    /// whether a planned merge is under way (see `merge_plan`).
    pub(crate) merge_plan: Mutex<crate::merge_plan::PlanState>,
    /// The directory's replicas as its leader last told this node (see `dirroute`).
    pub(crate) known_dir: Mutex<crate::dirroute::KnownDirectory>,
}

impl Node {
    /// Opens the node, restarting every group found in its directory.
    pub async fn open(
        id: NodeId,
        opts: NodeOptions,
        transport: Arc<dyn Transport>,
    ) -> std::io::Result<Arc<Node>> {
        std::fs::create_dir_all(&opts.dir)?;
        let (tx, rx) = unbounded_channel();
        let load = crate::load::LoadTracker::new(opts.load.window_ticks as usize);
        let known = crate::dirroute::load_known(&opts.dir, id);
        for m in known.members.iter().filter(|m| !m.addr.is_empty() && m.id != id) {
            transport.learn(m.id, &m.addr);
        }
        let node = Arc::new_cyclic(|me| Node {
            id,
            me: me.clone(),
            opts,
            transport,
            groups: Mutex::default(),
            children: tx,
            tasks: Mutex::default(),
            stopped: AtomicBool::new(false),
            moving: Mutex::default(),
            learner_ticks: Mutex::default(),
            rebalancing: AtomicBool::new(false),
            garbage: Mutex::default(),
            fetch: Default::default(),
            load: Mutex::new(load),
            view: Mutex::default(),
            starting: tokio::sync::Mutex::new(()),
            merging: Mutex::default(),
            merge_plan: Mutex::default(),
            known_dir: Mutex::new(known),
        });
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&node.opts.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(g) = name.strip_prefix("group-").and_then(|g| g.parse::<GroupId>().ok()) {
                ids.push(g);
            } else if let Some(g) = name.strip_prefix(crate::moves::REMOVED_PREFIX) {
                // A tombstoned replica whose deletion a crash interrupted (its vote goes
                // to the marker first).
                match g.parse::<GroupId>() {
                    Ok(g) => crate::moves::salvage_removed(&node.opts.dir, g)?,
                    Err(_) => std::fs::remove_dir_all(entry.path())?,
                }
            }
        }
        ids.sort_unstable();
        for g in ids {
            node.start_group(g, false).await?;
        }
        let n = node.clone();
        let children = tokio::spawn(async move { n.run_children(rx).await });
        let n = node.clone();
        let ticker = tokio::spawn(async move { n.run_ticks().await });
        node.tasks.lock().expect("not poisoned").extend([children, ticker]);
        Ok(node)
    }

    /// Writes the first directory and the first range (the whole key space) on `members`,
    /// then starts them. Called once, on every node of a new cluster.
    pub async fn bootstrap(self: &Arc<Self>, members: &BTreeSet<NodeId>) -> std::io::Result<()> {
        let first = RangeDesc::whole(1, members.clone());
        let cap = self.opts.capacity;
        let mut dir = RangeState::new(RangeDesc::whole(DIRECTORY_GROUP, members.clone()), cap)
            .map_err(std::io::Error::other)?;
        dir.put_descriptor(&first);
        for &id in members {
            dir.apply(&Command::AddNode {
                node: NodeInfo { id, addr: String::new(), draining: false },
            });
        }
        dir.next_group_id = 2;
        let range = RangeState::new(first, cap).map_err(std::io::Error::other)?;
        for data in [dir.export(), range.export()] {
            seed_group(&self.opts.dir, &data)?;
        }
        for g in [DIRECTORY_GROUP, 1] {
            self.start_group(g, false).await?;
        }
        Ok(())
    }

    async fn run_children(self: Arc<Self>, mut rx: UnboundedReceiver<GroupId>) {
        while let Some(g) = rx.recv().await {
            if let Err(e) = self.start_group(g, false).await {
                eprintln!("node {}: cannot start group {g}: {e}", self.id);
            }
        }
    }

    async fn run_ticks(self: Arc<Self>) {
        let period = std::time::Duration::from_millis(self.opts.tick_ms);
        for round in 0u64.. {
            tokio::time::sleep(period).await;
            self.tick(self.opts.split_keys, round % 4 == 3).await;
        }
    }

    /// Keeps a spawned task, so that [`Node::shutdown`] aborts it.
    pub(crate) fn keep_task(&self, t: JoinHandle<()>) {
        self.tasks.lock().expect("not poisoned").push(t);
    }

    /// The replica of group `g` on this node.
    pub fn group(&self, g: GroupId) -> Option<OpenraftGroup> {
        self.groups.lock().expect("not poisoned").get(&g).cloned()
    }

    /// Every replica on this node.
    pub fn groups(&self) -> Vec<OpenraftGroup> {
        let mut v: Vec<_> = self.groups.lock().expect("not poisoned").values().cloned().collect();
        v.sort_by_key(|g| g.sm.desc().id);
        v
    }

    /// Stops every group and background task (a crash, as far as the others can tell).
    pub async fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for t in self.tasks.lock().expect("not poisoned").drain(..) {
            t.abort();
        }
        let groups: Vec<_> =
            self.groups.lock().expect("not poisoned").drain().map(|(_, g)| g).collect();
        for g in groups {
            let _ = g.raft.shutdown().await;
        }
    }

    /// Whether [`Node::shutdown`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Serves one message from the transport.
    pub async fn handle(&self, msg: Message) -> Reply {
        if self.is_stopped() {
            return match msg {
                Message::Raft { .. } => {
                    Reply::Raft(RaftReply::Refused(format!("node {} is shut down", self.id)))
                }
                Message::Client(_) => Reply::Client(ClientReply::NoGroup),
            };
        }
        match msg {
            Message::Raft { group, from, rpc } => {
                Reply::Raft(self.handle_raft(group, from, *rpc).await)
            }
            Message::Client(req) => Reply::Client(self.handle_client(req).await),
        }
    }

    /// Serves one client request (see the module doc for the checks).
    pub async fn handle_client(&self, req: ClientRequest) -> ClientReply {
        if req.op.is_admin() {
            return self.handle_admin(req.group, req.op).await;
        }
        if req.group == DIRECTORY_GROUP {
            // Any node answers, passing the operation on if need be (see `dirroute`).
            return self.serve_directory(req.op).await;
        }
        let Some(group) = self.group(req.group) else { return ClientReply::NoGroup };
        if group.sm.shared.lock().expect("not poisoned").last_applied.is_none() {
            return ClientReply::NoGroup;
        }
        let (desc, frozen) = {
            let s = group.sm.shared.lock().expect("not poisoned");
            (s.state.desc.clone(), s.state.is_frozen())
        };
        let fenced = |d: &RangeDesc| match &req.op {
            ClientOp::Batch(ops) => ops.iter().all(|o| d.contains(o.key())),
            op => op.key().is_some_and(|k| d.contains(k)),
        };
        if frozen || req.epoch.version != desc.epoch.version || !fenced(&desc) {
            // A range frozen for a merge serves nothing (see `merge`).
            return ClientReply::Stale(desc);
        }
        let key = req.op.key().map(<[u8]>::to_vec).unwrap_or_default();
        let (write, reply) = match req.op {
            op @ (ClientOp::Get(_) | ClientOp::Scan { .. } | ClientOp::Prove(_)) => {
                let version = req.epoch.version;
                let local = self.opts.unsafe_local_reads;
                (false, crate::read::read(&group, op, version, local).await)
            }
            ClientOp::Put(key, value) => {
                (true, answer(group.propose(Command::Put { epoch: req.epoch, key, value }).await))
            }
            ClientOp::Delete(key) => {
                (true, answer(group.propose(Command::Delete { epoch: req.epoch, key }).await))
            }
            ClientOp::Batch(ops) => {
                (true, answer(group.propose(Command::Batch { epoch: req.epoch, ops }).await))
            }
            _ => return ClientReply::Refused("directory operation sent to a range".into()),
        };
        if matches!(
            reply,
            ClientReply::Value(_)
                | ClientReply::Done
                | ClientReply::Entries { .. }
                | ClientReply::Proof { .. }
        ) {
            self.load.lock().expect("not poisoned").record(req.group, &key, write);
        }
        reply
    }
}

pub(crate) fn answer(r: Result<Response, ProposeError>) -> ClientReply {
    match r {
        Ok(Response::Done) | Ok(Response::Split { .. }) | Ok(Response::Merge(_)) => {
            ClientReply::Done
        }
        Ok(Response::Stale(d)) => ClientReply::Stale(d),
        Ok(Response::Refused(e)) => ClientReply::Refused(e),
        Ok(Response::GroupId(g)) => ClientReply::GroupId(g),
        // Only `Command::Proposals` is answered so, and the batcher splits its answers.
        Ok(Response::Each(_)) => ClientReply::Unknown("unsplit answers of a batch".into()),
        Err(ProposeError::NotLeader(l)) => ClientReply::NotLeader(l),
        Err(ProposeError::Unknown(e)) => ClientReply::Unknown(e),
    }
}
