//! The vocabulary shared by every replica, the directory and the client: ids, range
//! descriptors with their epochs, the commands a group's log carries and their answers,
//! and the openraft type configuration.
//!
//! Guarantees: a [`RangeDesc`] covers `[start, end)` where an empty `end` means "to the end
//! of the key space"; [`Epoch`] follows TiKV's region epoch (`conf_ver` bumped on a
//! membership change, `version` bumped on a split or merge), so two descriptors of one group
//! are ordered by their epochs.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

pub use crate::merge::MergeState;

/// A node (one process hosting replicas of many groups).
pub type NodeId = u64;
/// A replicated group (one key range, or the directory).
pub type GroupId = u64;

/// The directory's own group id; range groups have ids from 1 on.
pub const DIRECTORY_GROUP: GroupId = 0;

/// TiKV's region epoch.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Epoch {
    /// Bumped on every membership change.
    pub conf_ver: u64,
    /// Bumped on every split or merge.
    pub version: u64,
}

impl Epoch {
    /// True when `self` is at least as new as `other` in both counters and newer in one.
    pub fn is_newer_than(&self, other: &Epoch) -> bool {
        self.conf_ver >= other.conf_ver
            && self.version >= other.version
            && (self.conf_ver, self.version) != (other.conf_ver, other.version)
    }
}

/// A range descriptor: which group owns `[start, end)`, at which epoch, on which nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeDesc {
    pub id: GroupId,
    #[serde(with = "crate::codec::bytes")]
    pub start: Vec<u8>,
    /// Exclusive; empty means unbounded.
    #[serde(with = "crate::codec::bytes")]
    pub end: Vec<u8>,
    pub epoch: Epoch,
    /// The voters (during a joint configuration, the voters of both halves).
    pub replicas: BTreeSet<NodeId>,
    /// Non-voting replicas catching up (a move in progress); clients never route to them.
    #[serde(default)]
    pub learners: BTreeSet<NodeId>,
}

impl RangeDesc {
    /// The descriptor of the whole key space, for a cluster's first range group.
    pub fn whole(id: GroupId, replicas: BTreeSet<NodeId>) -> Self {
        RangeDesc {
            id,
            start: Vec::new(),
            end: Vec::new(),
            epoch: Epoch::default(),
            replicas,
            learners: BTreeSet::new(),
        }
    }

    /// Whether `key` lies within `[start, end)` (the fence keys).
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }

    /// Whether `key` may split this range (strictly inside it, so both halves are non-empty).
    pub fn can_split_at(&self, key: &[u8]) -> bool {
        key > self.start.as_slice() && self.contains(key)
    }
}

/// One write in a range group's log. Every command names the epoch the proposer routed by;
/// the state machine refuses it (answering [`Response::Stale`]) when the range has moved on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Put {
        epoch: Epoch,
        #[serde(with = "crate::codec::bytes")]
        key: Vec<u8>,
        #[serde(with = "crate::codec::bytes")]
        value: Vec<u8>,
    },
    Delete {
        epoch: Epoch,
        #[serde(with = "crate::codec::bytes")]
        key: Vec<u8>,
    },
    /// All-or-nothing: every key must be inside the range.
    Batch { epoch: Epoch, ops: Vec<BatchOp> },
    /// Split at `key` (a chunk boundary chosen by the leader); the right half becomes group
    /// `new_id` on the same replicas. Deterministic: every replica computes the same halves.
    Split {
        epoch: Epoch,
        #[serde(with = "crate::codec::bytes")]
        key: Vec<u8>,
        new_id: GroupId,
    },
    /// Directory only: record these descriptors (both halves of a split, or a leader's
    /// heartbeat), each only if newer than what is held for its start key.
    Report { descs: Vec<RangeDesc> },
    /// Directory only: hand out a fresh group id.
    AllocGroupId,
    /// Directory only: register a node (or change its address); a registered node receives
    /// replicas from the rebalancer.
    AddNode { node: NodeInfo },
    /// Directory only: mark a node as draining; the rebalancer moves every replica away.
    Drain { id: NodeId },
    /// Any group: the root of the group's tree after applying the entry at log index
    /// `index` (a sealed version, see `versions`), as the proposing leader computed it.
    /// Changes no state; every replica that still holds its own version at `index` compares
    /// roots, and a snapshot is built only from a version whose root a committed `Attest`
    /// named (the root a learner's fetched chunks are checked against).
    Attest {
        index: u64,
        #[serde(with = "crate::codec::bytes")]
        root: Vec<u8>,
    },
    /// Merge step 1, in the right range's log (see `merge`): freeze the range (every later
    /// write and read refused, `Stale`), bump its `version`, and name the left neighbour
    /// `target` that is to absorb it at the target's version `target_version`.
    PrepareMerge { epoch: Epoch, target: GroupId, target_version: u64 },
    /// Merge step 2, in the left range's log: absorb `source` (the right range's frozen
    /// state as chunks under the root its log attested, its descriptor in `source.desc`)
    /// if this range is still at `target_version` and ends where the source starts;
    /// otherwise refuse for good (the refusal is recorded: the source may roll back).
    /// `target` is the group the merge was planned into: this one, or one it absorbed
    /// (then answered in its stead; see `merge`).
    CommitMerge { target: GroupId, target_version: u64, source: Box<SnapshotData> },
    /// Merge undone, in the right range's log, once the left range's log refused the
    /// merge: the range is unfrozen at `version + 1`.
    RollbackMerge { epoch: Epoch },
    /// Client writes (`Put`, `Delete`, `Batch`) proposed together by the leader (see
    /// `propose`): applied in order, each as if it were its own entry (its own epoch and
    /// fence checks), each answered in [`Response::Each`]; any other command inside is
    /// refused on its own.
    Proposals(Vec<Command>),
    /// Directory only: forget node `id` (see `directory`): refused unless it is registered,
    /// draining, holds no replica of the directory and no descriptor names it.
    RemoveNode { id: NodeId },
}

/// A node as the directory knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// `host:port` for the TCP transport (empty in the simulation).
    pub addr: String,
    /// Set by `Drain`: the node receives no new replicas and loses the ones it has.
    pub draining: bool,
}

/// One operation of an atomic batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchOp {
    Put(
        #[serde(with = "crate::codec::bytes")] Vec<u8>,
        #[serde(with = "crate::codec::bytes")] Vec<u8>,
    ),
    Delete(#[serde(with = "crate::codec::bytes")] Vec<u8>),
}

impl BatchOp {
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put(k, _) | BatchOp::Delete(k) => k,
        }
    }
}

/// The answer of the state machine to one applied entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Applied (blank and membership entries answer this too).
    Done,
    /// Not applied: the proposer's epoch or key is outside this range; here is the range now.
    Stale(RangeDesc),
    /// Not applied: the command is malformed for this group (kept in the log, a no-op).
    Refused(String),
    /// A split was applied: the two halves.
    Split { left: RangeDesc, right: RangeDesc },
    /// A group id handed out by the directory.
    GroupId(GroupId),
    /// A merge step was applied (or had been): the descriptor after it.
    Merge(RangeDesc),
    /// The answers to [`Command::Proposals`], one per command, in order.
    Each(Vec<Response>),
}

/// What moves as a Raft snapshot: the range descriptor and the bavl tree as its chunks,
/// each verified against `root` on arrival.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotData {
    pub desc: Option<RangeDesc>,
    #[serde(with = "crate::codec::bytes")]
    pub root: Vec<u8>,
    pub capacity: u32,
    /// Exported chunks in index order (`Snapshot::export_chunk`).
    pub chunks: Vec<ChunkBytes>,
    /// Directory only: the next group id to hand out.
    pub next_group_id: u64,
    /// The log id of the committed `Attest` entry that named `root` (none for a group's
    /// origin snapshot at `(0, 0)`, whose state the group's creation determines).
    #[serde(default)]
    pub attested: Option<openraft::LogId<NodeId>>,
    /// Range groups: the merge state (frozen for a merge, merges decided; see `merge`).
    #[serde(default)]
    pub merge: MergeState,
}

/// One exported chunk, hex in JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkBytes(#[serde(with = "crate::codec::bytes")] pub Vec<u8>);

openraft::declare_raft_types!(
    /// openraft's type configuration for every group (ranges and the directory).
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Shorthands for openraft's generic types under [`TypeConfig`].
pub mod typ {
    use super::{NodeId, TypeConfig};
    use openraft::BasicNode;

    pub type Raft = openraft::Raft<TypeConfig>;
    pub type Vote = openraft::Vote<NodeId>;
    pub type LogId = openraft::LogId<NodeId>;
    pub type Entry = openraft::Entry<TypeConfig>;
    pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, BasicNode>;
    pub type Snapshot = openraft::Snapshot<TypeConfig>;
    pub type StoredMembership = openraft::StoredMembership<NodeId, BasicNode>;
    pub type StorageError = openraft::StorageError<NodeId>;
    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<NodeId, E>;
    pub type RPCError<E = openraft::error::Infallible> =
        openraft::error::RPCError<NodeId, BasicNode, RaftError<E>>;
}
