//! Range moves by Raft membership change (TiKV's way), driven by the range's leader, and
//! what happens to a replica that was moved away.
//!
//! The protocol ([`Node::move_replica`], each step also callable alone for crash tests):
//! 1. **add learner**: a membership entry adding the target as a learner (`conf_ver + 1`);
//!    the target node, on the group's first message, starts an empty replica;
//! 2. **catch up**: the leader sends the learner its snapshot (a group's log starts purged
//!    at `(0, 0)`, so an empty replica is always brought up by a snapshot); the learner
//!    verifies every chunk against the snapshot's root as it rebuilds the tree
//!    (`RangeState::import`), then receives the log after it; the leader waits until the
//!    learner has matched its log as it stood when the wait began;
//! 3. **promote**: a membership change making the learner a voter (joint, then uniform;
//!    `conf_ver + 1`);
//! 4. **remove**: a membership change dropping the old voter (`conf_ver + 1`), not kept as
//!    a learner; a leader that removes itself steps down once it commits;
//! 5. **report** the new descriptor to the directory, then **tombstone** the old replica.
//!
//! A step that finds its work done skips it, so re-running a move after any crash finishes
//! it. A removed replica is **deleted**: a marker `tombstone-<id>` is written (a split
//! re-applied after a restart does not seed the group again), its directory is renamed
//! `removed-group-<id>` and then removed (a crash in between leaves the renamed directory,
//! deleted on the next start). The marker keeps the replica's **vote** (Raft's rule that a
//! node never forgets its vote outlives the replica): a replica of the group re-created
//! empty here by a later message starts from it, so a leader deposed while this node
//! followed a newer one (cut off, it may not know yet) is refused, not followed: followed,
//! it would find the log it had counted as matched here gone (openraft's leader cannot
//! handle a follower's log going backwards) and could count the empty replica's
//! acknowledgements in its old configuration. It learns of its removal by a `Tombstone { conf_ver, index }`
//! message from the mover (refused if its replica is newer, empty, or its log names it in a
//! configuration after `index`) or, failing that, by the garbage check of its node
//! ([`Node::collect_garbage`]): a replica whose group's descriptor in the directory leaves
//! the node out, whose own Raft membership (log included) leaves it out, and whose
//! `conf_ver` is not newer than the directory's. Empty replicas refuse votes (see
//! `Node::handle`): deleting must never produce a voter with no memory of the group.
//!
//! A leader that finds learners in its group and no move of its own under way removes them
//! after [`LEARNER_TICKS`] ticks (a mover that crashed after step 1): moves are then simply
//! planned again. Splits wait while a group has learners.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};

use crate::consensus::{Consensus, OpenraftGroup};
use crate::msg::{BoxFuture, ClientOp, ClientReply, ClientRequest, Message, ReplicaInfo};
use crate::node::Node;
use crate::sm::group_dir;
use crate::types::{Epoch, GroupId, NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

/// Directory name prefix of a tombstoned replica being deleted.
pub const REMOVED_PREFIX: &str = "removed-group-";

/// Deletes `removed-group-<g>` (a replica being deleted) if present, after raising the
/// tombstone marker's vote to the one its log holds.
pub(crate) fn salvage_removed(node_dir: &std::path::Path, g: GroupId) -> std::io::Result<()> {
    let gone = node_dir.join(format!("{REMOVED_PREFIX}{g}"));
    if !gone.exists() {
        return Ok(());
    }
    let vote = crate::log_store::stored_vote(&gone.join(crate::sm::LOG_FILE))?;
    crate::sm::raise_tombstone(node_dir, g, vote)?;
    std::fs::remove_dir_all(&gone)
}

/// How long step 2 waits for the learner.
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(20);
/// Ticks after which a leader removes learners no move of its own is waiting for.
pub const LEARNER_TICKS: u32 = 10;

/// Why a move did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    #[error("no replica of group {0} on this node")]
    NoGroup(GroupId),
    #[error("not the leader (leader: {0:?})")]
    NotLeader(Option<NodeId>),
    #[error("neither the source nor the target is a voter: the range is now {0:?}")]
    Stale(RangeDesc),
    #[error("a move of group {0} is already under way on this node")]
    Busy(GroupId),
    #[error("invalid move: {0}")]
    Invalid(String),
    #[error("membership change failed (it may have taken effect): {0}")]
    Raft(String),
    #[error("the learner did not catch up within {0:?}")]
    CatchUp(Duration),
}

type WriteError = RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>;

fn raft_err(e: WriteError) -> MoveError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            MoveError::NotLeader(f.leader_id)
        }
        e => MoveError::Raft(e.to_string()),
    }
}

/// Whether the latest membership in the replica's log (applied or not) names `node`.
pub(crate) fn in_membership(group: &OpenraftGroup, node: NodeId) -> bool {
    let m = group.raft.metrics().borrow().membership_config.clone();
    let named = m.membership().nodes().any(|(n, _)| *n == node);
    named
}

/// The log index of the latest membership in the replica's log (applied or not).
pub(crate) fn membership_index(group: &OpenraftGroup) -> u64 {
    let m = group.raft.metrics().borrow().membership_config.clone();
    let index = m.log_id().map_or(0, |l| l.index);
    index
}

/// Removes `g` from the node's set of groups being moved, however the move ends.
struct Moving<'a>(&'a Node, GroupId);
impl Drop for Moving<'_> {
    fn drop(&mut self) {
        self.0.moving.lock().expect("not poisoned").remove(&self.1);
    }
}

impl Node {
    /// Moves group `g`'s replica on `from` to `to` (steps 1-5 of the module doc); this node
    /// must lead `g`. Returns the descriptor after the move.
    pub async fn move_replica(
        &self,
        g: GroupId,
        from: NodeId,
        to: NodeId,
    ) -> Result<RangeDesc, MoveError> {
        if from == to {
            return Err(MoveError::Invalid(format!("from = to = node {from}")));
        }
        let group = self.led_group(g)?;
        if !self.moving.lock().expect("not poisoned").insert(g) {
            return Err(MoveError::Busy(g));
        }
        let _moving = Moving(self, g);
        let desc = group.sm.desc();
        if !desc.replicas.contains(&to) {
            if !desc.replicas.contains(&from) {
                return Err(MoveError::Stale(desc));
            }
            self.move_add_learner(&group, to).await?;
            self.move_catch_up(&group, to, CATCH_UP_LIMIT).await?;
            self.move_promote(&group, to).await?;
        }
        if group.sm.desc().replicas.contains(&from) {
            self.move_remove(&group, from).await?;
        }
        let desc = group.sm.desc();
        let index = membership_index(&group);
        self.move_finish(from, &desc, index).await;
        Ok(desc)
    }

    /// [`Node::move_replica`] as a boxed future (it calls back into `handle_client`
    /// through the directory, so its type must be named to be spawned from there).
    fn move_boxed(
        self: std::sync::Arc<Self>,
        g: GroupId,
        from: NodeId,
        to: NodeId,
    ) -> BoxFuture<'static, Result<RangeDesc, MoveError>> {
        Box::pin(async move { self.move_replica(g, from, to).await })
    }

    /// The replica of `g` here, if this node leads it.
    pub fn led_group(&self, g: GroupId) -> Result<OpenraftGroup, MoveError> {
        let group = self.group(g).ok_or(MoveError::NoGroup(g))?;
        match group.leader() {
            Some(l) if l == self.id => Ok(group),
            l => Err(MoveError::NotLeader(l)),
        }
    }

    /// Step 1: `to` (a node registered in the directory) joins as a learner.
    pub async fn move_add_learner(
        &self,
        group: &OpenraftGroup,
        to: NodeId,
    ) -> Result<(), MoveError> {
        let info = self.node_info(to).await?;
        if !info.addr.is_empty() {
            self.transport.learn(to, &info.addr);
        }
        let node = BasicNode::new(info.addr);
        group.raft.add_learner(to, node, false).await.map(drop).map_err(raft_err)
    }

    /// Step 2: waits until `to` has matched this leader's log as it stands now.
    pub async fn move_catch_up(
        &self,
        group: &OpenraftGroup,
        to: NodeId,
        limit: Duration,
    ) -> Result<(), MoveError> {
        let target = group.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let start = tokio::time::Instant::now();
        loop {
            let m = group.raft.metrics().borrow().clone();
            if m.current_leader != Some(self.id) {
                return Err(MoveError::NotLeader(m.current_leader));
            }
            let matched = m.replication.as_ref().and_then(|r| r.get(&to).copied().flatten());
            if matched.is_some_and(|l| l.index >= target) {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(MoveError::CatchUp(limit));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Step 3: the learner `to` becomes a voter.
    pub async fn move_promote(&self, group: &OpenraftGroup, to: NodeId) -> Result<(), MoveError> {
        let change = ChangeMembers::AddVoterIds(BTreeSet::from([to]));
        group.raft.change_membership(change, false).await.map(drop).map_err(raft_err)
    }

    /// Step 4: the voter `from` leaves (not kept as a learner).
    pub async fn move_remove(&self, group: &OpenraftGroup, from: NodeId) -> Result<(), MoveError> {
        let change = ChangeMembers::RemoveVoters(BTreeSet::from([from]));
        group.raft.change_membership(change, false).await.map(drop).map_err(raft_err)
    }

    /// Step 5: the directory learns the descriptor, and `from` is told to drop its replica
    /// (best effort: the garbage check repairs a lost message, the heartbeat a lost report).
    /// `index` is the log index of the configuration without `from`. The directory's own
    /// descriptor is not a range's: it is not reported, this node records it (see
    /// `dirroute`), and the others learn it from their heartbeats' answers.
    pub async fn move_finish(&self, from: NodeId, desc: &RangeDesc, index: u64) {
        if desc.id == DIRECTORY_GROUP {
            if let Some(dir) = self.group(DIRECTORY_GROUP) {
                let (directory, members) = Node::heard(&dir);
                self.learn_directory(directory, members);
            }
        } else {
            self.report(vec![desc.clone()]).await;
        }
        let op = ClientOp::Tombstone { conf_ver: desc.epoch.conf_ver, index };
        if from == self.id {
            self.tombstone(desc.id, desc.epoch.conf_ver, index).await;
        } else {
            let req = ClientRequest { group: desc.id, epoch: Epoch::default(), op };
            let _ = self.transport.send(self.id, from, Message::Client(req)).await;
        }
    }

    /// A registered node, from the directory.
    async fn node_info(&self, id: NodeId) -> Result<NodeInfo, MoveError> {
        match self.directory_call(ClientOp::Nodes).await {
            Some(ClientReply::Nodes(nodes)) => nodes
                .into_iter()
                .find(|n| n.id == id)
                .ok_or_else(|| MoveError::Invalid(format!("node {id} is not registered"))),
            _ => Err(MoveError::Raft("the directory did not answer".into())),
        }
    }

    /// Serves `Move`, `Tombstone` and `Info` for group `g`.
    pub(crate) async fn handle_admin(&self, g: GroupId, op: ClientOp) -> ClientReply {
        match op {
            ClientOp::Info => match self.group(g) {
                Some(group) => ClientReply::Info(self.info(&group)),
                None => ClientReply::NoGroup,
            },
            ClientOp::Tombstone { conf_ver, index } => self.tombstone(g, conf_ver, index).await,
            ClientOp::Move { from, to } => {
                let Some(me) = self.me.upgrade() else { return ClientReply::NoGroup };
                // A task of its own: the move goes on if the caller stops waiting.
                let task = tokio::spawn(me.move_boxed(g, from, to));
                match task.await {
                    Ok(Ok(desc)) => ClientReply::Moved(desc),
                    Ok(Err(MoveError::NotLeader(l))) => ClientReply::NotLeader(l),
                    Ok(Err(MoveError::NoGroup(_))) => ClientReply::NoGroup,
                    Ok(Err(MoveError::Stale(d))) => ClientReply::Stale(d),
                    Ok(Err(e @ (MoveError::Raft(_) | MoveError::CatchUp(_)))) => {
                        ClientReply::Unknown(e.to_string())
                    }
                    Ok(Err(e)) => ClientReply::Refused(e.to_string()),
                    Err(e) => ClientReply::Unknown(format!("the move task ended: {e}")),
                }
            }
            op => self.handle_merge_op(g, op).await,
        }
    }

    fn info(&self, group: &OpenraftGroup) -> ReplicaInfo {
        let leader = group.leader();
        let mut s = group.sm.shared.lock().expect("not poisoned");
        ReplicaInfo {
            node: self.id,
            desc: s.state.desc.clone(),
            leader,
            keys: s.state.tree.len(),
            applied: s.last_applied.map_or(0, |l| l.index),
            root: s.state.tree.root_hash().to_vec(),
        }
    }

    /// Drops this node's replica of `g` unless it is newer than `conf_ver`, empty, or its
    /// log names this node in a configuration after `index` (it was added back).
    async fn tombstone(&self, g: GroupId, conf_ver: u64, index: u64) -> ClientReply {
        let Some(group) = self.group(g) else { return ClientReply::Done };
        let (desc, applied) = {
            let s = group.sm.shared.lock().expect("not poisoned");
            (s.state.desc.clone(), s.last_applied.is_some())
        };
        if !applied {
            // Empty: nothing to delete, and it may be a learner whose snapshot is on its way
            // (a late tombstone after the node was added again).
            return ClientReply::Done;
        }
        if in_membership(&group, self.id) && membership_index(&group) > index {
            // Its log holds a configuration after the removal naming this node: it was
            // added back since (a late tombstone).
            return ClientReply::Refused("the replica's log names this node again".into());
        }
        if desc.epoch.conf_ver > conf_ver {
            return ClientReply::Refused(format!(
                "replica at conf_ver {} is newer than the tombstone's {conf_ver}",
                desc.epoch.conf_ver
            ));
        }
        match self.remove_replica(g).await {
            Ok(()) => ClientReply::Done,
            Err(e) => ClientReply::Refused(format!("cannot delete the replica: {e}")),
        }
    }

    /// Deletes the replica of `g`: leave a tombstone marker holding the replica's vote (a
    /// split re-applied after a restart does not create the group again; a replica
    /// re-created empty by a message starts from that vote), rename its directory (from
    /// then on a restart does not see it), stop it, raise the marker's vote to the one the
    /// stopped replica's log holds, delete the renamed directory. A crash before the last
    /// step leaves the renamed directory, whose vote the next start moves to the marker
    /// before deleting it ([`salvage_removed`]).
    pub(crate) async fn remove_replica(&self, g: GroupId) -> std::io::Result<()> {
        let dir = group_dir(&self.opts.dir, g);
        let gone = self.opts.dir.join(format!("{REMOVED_PREFIX}{g}"));
        let vote = self.group(g).map(|group| group.raft.metrics().borrow().vote);
        crate::sm::raise_tombstone(&self.opts.dir, g, vote)?;
        salvage_removed(&self.opts.dir, g)?;
        if dir.exists() {
            std::fs::rename(&dir, &gone)?;
        }
        self.stop_group(g).await;
        salvage_removed(&self.opts.dir, g)
    }
}
