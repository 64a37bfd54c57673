//! Messages between nodes and from clients, and the transport that carries them.
//!
//! Every Raft message names its group ([`RaftRpc`] in a [`Message::Raft`]), so one transport
//! serves all groups of a node (multi-raft). Every client request names the group and the
//! epoch it was routed by. All types are serde, so a byte transport encodes them as JSON;
//! decoding is serde's, which bounds nothing by itself: a byte transport must cap a frame's
//! length before reading it.

use std::future::Future;
use std::pin::Pin;

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

pub use crate::fetch::{FetchRequest, Manifest};
use crate::load::RangeStats;
use crate::types::{
    typ, BatchOp, ChunkBytes, Epoch, GroupId, NodeId, NodeInfo, RangeDesc, SnapshotData, TypeConfig,
};

/// A Raft message for one group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum RaftRpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(Box<SnapshotRpc>),
    /// Chunks of a retained version, for a replica fetching a snapshot (see `fetch`).
    Fetch(FetchRequest),
}

/// A snapshot offered to a replica: its manifest, not its chunks; the replica fetches the
/// chunks from the group's voters (see `fetch`) and then installs it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotRpc {
    pub vote: typ::Vote,
    pub meta: typ::SnapshotMeta,
    pub manifest: Manifest,
}

/// The answer to a [`RaftRpc`].
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftReply {
    Append(AppendEntriesResponse<NodeId>),
    Vote(VoteResponse<NodeId>),
    Snapshot(SnapshotResponse<NodeId>),
    /// Answer to `Fetch`: consecutive chunks from the first asked for (at least one).
    Chunks(Vec<ChunkBytes>),
    /// The target does not host the group, or it refused (the string says why).
    Refused(String),
}

/// A client's operation on one range (or on the directory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientOp {
    Get(#[serde(with = "crate::codec::bytes")] Vec<u8>),
    Put(
        #[serde(with = "crate::codec::bytes")] Vec<u8>,
        #[serde(with = "crate::codec::bytes")] Vec<u8>,
    ),
    Delete(#[serde(with = "crate::codec::bytes")] Vec<u8>),
    Batch(Vec<BatchOp>),
    /// Entries with `start <= key < end` (empty `end`: unbounded) within the range that
    /// holds `start`, at most `limit`.
    Scan {
        #[serde(with = "crate::codec::bytes")]
        start: Vec<u8>,
        #[serde(with = "crate::codec::bytes")]
        end: Vec<u8>,
        limit: u32,
    },
    /// A membership or absence proof of the key against the range's root.
    Prove(#[serde(with = "crate::codec::bytes")] Vec<u8>),
    /// Directory: the descriptor of the range holding this key.
    Lookup(#[serde(with = "crate::codec::bytes")] Vec<u8>),
    /// Directory: a fresh group id.
    AllocGroupId,
    /// Directory: record descriptors.
    Report(Vec<RangeDesc>),
    /// Directory: every descriptor held, ordered by start key.
    Ranges,
    /// Directory: register a node (its address for the TCP transport).
    AddNode(NodeInfo),
    /// Directory: mark a node as draining.
    Drain(NodeId),
    /// Directory: the registered nodes.
    Nodes,
    /// Directory leader: node `node` is alive and leads these ranges (see `liveness`);
    /// answered `Heard` by the directory's leader only (a replica that is not: `NotLeader`), and
    /// kept in its memory.
    Heartbeat {
        node: NodeId,
        ranges: Vec<RangeStats>,
    },
    /// To a range's leader: move the replica on `from` to `to` (see `moves`); answered
    /// `Moved` with the descriptor once the old replica is removed.
    Move {
        from: NodeId,
        to: NodeId,
    },
    /// To a node: drop its replica of the group (sent once a configuration without the node
    /// committed, at log index `index` and epoch `conf_ver`), unless the replica's
    /// `conf_ver` is newer or its log holds a configuration after `index` naming the node.
    Tombstone {
        conf_ver: u64,
        index: u64,
    },
    /// To any replica: what it holds (no read barrier: for status displays).
    Info,
    /// To the right range's leader: merge this range into its left neighbour `target`, at
    /// the target's version `target_version` (see `merge`); answered `Merged` with the
    /// target's descriptor after it, or `MergeRefused` when the target's log refused it
    /// (the range was then rolled back).
    Merge {
        target: GroupId,
        target_version: u64,
    },
    /// To the left range's leader: step 2 of a merge, `CommitMerge` in its log; answered
    /// `Merged` or `MergeRefused` (the decision, recorded in its log). `target` is the
    /// group the merge was planned into: the addressee, or a group it absorbed.
    CommitMerge {
        target: GroupId,
        target_version: u64,
        source: Box<SnapshotData>,
    },
    /// To a replica of a merged-away range: delete it, since `merged` (a newer descriptor
    /// of the target) covers it. Refused unless the replica is frozen and covered.
    Retire {
        merged: RangeDesc,
    },
    /// Directory: forget a drained node (refused while anything names it).
    RemoveNode(NodeId),
    /// Directory: an operation a node without a directory replica passes on to the
    /// directory's members it knows (see `dirroute`); served only by a node holding a
    /// replica, never passed on again. Only directory operations, so it cannot nest.
    Forwarded(DirectoryOp),
}

/// A directory operation as a node passes it on (`ClientOp::Forwarded`): the directory's
/// own operations, with their `ClientOp` fields, in this order (its own variant indexes).
/// Not a `ClientOp` inside a `ClientOp`: a forwarded operation cannot hold another, so no
/// input decodes to a nesting deeper than one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirectoryOp {
    Lookup(#[serde(with = "crate::codec::bytes")] Vec<u8>),
    AllocGroupId,
    Report(Vec<RangeDesc>),
    Ranges,
    AddNode(NodeInfo),
    Drain(NodeId),
    Nodes,
    Heartbeat { node: NodeId, ranges: Vec<RangeStats> },
    RemoveNode(NodeId),
}

impl DirectoryOp {
    /// The directory operation `op` is, if it is one.
    pub fn of(op: ClientOp) -> Option<DirectoryOp> {
        Some(match op {
            ClientOp::Lookup(k) => DirectoryOp::Lookup(k),
            ClientOp::AllocGroupId => DirectoryOp::AllocGroupId,
            ClientOp::Report(d) => DirectoryOp::Report(d),
            ClientOp::Ranges => DirectoryOp::Ranges,
            ClientOp::AddNode(n) => DirectoryOp::AddNode(n),
            ClientOp::Drain(n) => DirectoryOp::Drain(n),
            ClientOp::Nodes => DirectoryOp::Nodes,
            ClientOp::Heartbeat { node, ranges } => DirectoryOp::Heartbeat { node, ranges },
            ClientOp::RemoveNode(n) => DirectoryOp::RemoveNode(n),
            _ => return None,
        })
    }

    /// The same operation as a `ClientOp`.
    pub fn into_op(self) -> ClientOp {
        match self {
            DirectoryOp::Lookup(k) => ClientOp::Lookup(k),
            DirectoryOp::AllocGroupId => ClientOp::AllocGroupId,
            DirectoryOp::Report(d) => ClientOp::Report(d),
            DirectoryOp::Ranges => ClientOp::Ranges,
            DirectoryOp::AddNode(n) => ClientOp::AddNode(n),
            DirectoryOp::Drain(n) => ClientOp::Drain(n),
            DirectoryOp::Nodes => ClientOp::Nodes,
            DirectoryOp::Heartbeat { node, ranges } => ClientOp::Heartbeat { node, ranges },
            DirectoryOp::RemoveNode(n) => ClientOp::RemoveNode(n),
        }
    }
}

impl ClientOp {
    /// The key the request is routed by, for data operations.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            ClientOp::Get(k) | ClientOp::Put(k, _) | ClientOp::Delete(k) | ClientOp::Prove(k) => {
                Some(k)
            }
            ClientOp::Scan { start, .. } => Some(start),
            ClientOp::Batch(ops) => ops.first().map(|o| o.key()),
            _ => None,
        }
    }

    /// Whether the operation is a replica-administration one (not fenced by keys).
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            ClientOp::Move { .. }
                | ClientOp::Tombstone { .. }
                | ClientOp::Info
                | ClientOp::Merge { .. }
                | ClientOp::CommitMerge { .. }
                | ClientOp::Retire { .. }
        )
    }
}

/// What one replica holds, for status displays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaInfo {
    pub node: NodeId,
    pub desc: RangeDesc,
    /// The leader this replica knows of.
    pub leader: Option<NodeId>,
    /// Keys in the replica's tree.
    pub keys: u64,
    /// Applied log index.
    pub applied: u64,
    #[serde(with = "crate::codec::bytes")]
    pub root: Vec<u8>,
}

/// A client request: the group and epoch it was routed by, and the operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientRequest {
    pub group: GroupId,
    pub epoch: Epoch,
    pub op: ClientOp,
}

/// The answer to a [`ClientRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientReply {
    Value(Option<Vec<u8>>),
    Done,
    /// The route was stale; this is the range as the replica holds it now.
    Stale(RangeDesc),
    NotLeader(Option<NodeId>),
    /// This node hosts no replica of the group.
    NoGroup,
    Desc(Option<RangeDesc>),
    GroupId(GroupId),
    Ranges(Vec<RangeDesc>),
    /// A scan's entries; `range_end` is the end of the range that served it (empty:
    /// unbounded); `more` says the limit cut the scan short.
    Entries {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        range_end: Vec<u8>,
        more: bool,
    },
    /// A proof for a key against the range's root at applied index `index`; `value` is the
    /// key's value (`None`: an absence proof).
    Proof {
        root: Vec<u8>,
        index: u64,
        value: Option<Vec<u8>>,
        proof: Vec<u8>,
    },
    Nodes(Vec<NodeInfo>),
    Info(ReplicaInfo),
    /// A move finished: the range's descriptor after it.
    Moved(RangeDesc),
    /// A merge was committed in the target's log: the target's descriptor after it.
    Merged(RangeDesc),
    /// The target's log refused the merge (for good).
    MergeRefused(String),
    /// The request may or may not have taken effect.
    Unknown(String),
    /// Refused for good (bad input).
    Refused(String),
    /// The directory leader's answer to a `Heartbeat`: the directory's own descriptor (its
    /// voters and learners at its `conf_ver`) and the registered nodes among them, with
    /// their addresses, so every node can find the directory after its replicas moved.
    Heard {
        directory: RangeDesc,
        members: Vec<NodeInfo>,
    },
}

/// Anything one node can send another.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Message {
    Raft { group: GroupId, from: NodeId, rpc: Box<RaftRpc> },
    Client(ClientRequest),
}

/// The answer to a [`Message`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Raft(RaftReply),
    Client(ClientReply),
}

/// Why a message got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// Certainly not delivered (no route, node down, partitioned).
    #[error("node {0} unreachable")]
    Unreachable(NodeId),
    /// Sent, but no answer in time: it may have been acted upon.
    #[error("no answer from node {0} in time")]
    Timeout(NodeId),
}

/// A boxed future, for object-safe async transports.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Carries a message to a node and brings back its reply.
pub trait Transport: Send + Sync + 'static {
    fn send(
        &self,
        from: NodeId,
        to: NodeId,
        msg: Message,
    ) -> BoxFuture<'_, Result<Reply, NetError>>;

    /// Learns (or updates) the address of node `id` (`host:port`); a transport without
    /// addresses ignores it.
    fn learn(&self, _id: NodeId, _addr: &str) {}
}
