//! Starting, stopping and feeding a node's replicas: a replica's start from its files (or
//! empty, created by a message), with the quiet time of a restarted voter (see `lease`),
//! and the Raft messages of its group.
//!
//! Guarantees: starts are serialized per node; an empty replica and a restarted one that
//! is still quiet refuse to vote; a replica retired by a merge is never re-created; a
//! replica deleted here is re-created with the vote it had (its tombstone marker).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::consensus::OpenraftGroup;
use crate::log_store::LogStore;
use crate::msg::{RaftReply, RaftRpc, SnapshotRpc};
use crate::node::Node;
use crate::raftnet::GroupNet;
use crate::sm::{group_dir, GroupSm, LOG_FILE, SNAPSHOT_FILE};
use crate::types::{typ, GroupId, NodeId, RangeDesc};

impl Node {
    /// Starts group `g` from its files (no-op if running). A group without a snapshot file
    /// is started only if `empty` (a replica created by a message, waiting for a snapshot).
    /// Starts are serialized: two messages of a new group arriving together must not both
    /// start a replica (the second would replace the first in the node's map while the
    /// first kept running, and what the first acknowledged, the second would not hold).
    pub(crate) async fn start_group(&self, g: GroupId, empty: bool) -> std::io::Result<()> {
        let _one_at_a_time = self.starting.lock().await;
        if self.is_stopped() {
            return Err(std::io::Error::other("the node is shut down"));
        }
        if self.group(g).is_some() {
            return Ok(());
        }
        let gdir = group_dir(&self.opts.dir, g);
        if !empty && !gdir.join(SNAPSHOT_FILE).exists() {
            return Ok(());
        }
        // Placeholder until the snapshot file (or an installed snapshot) replaces it.
        let desc = RangeDesc::whole(g, BTreeSet::new());
        // Snapshots are built from attested versions, triggered by the node (`split::tick`),
        // not by openraft's policy (see `versions`).
        let mut sm = GroupSm::open(&self.opts.dir, desc, self.children.clone())?;
        let mut config = (*self.opts.raft).clone();
        // Elections start off; `OpenraftGroup::new` turns them on (see `lease`).
        config.enable_elect = false;
        if let openraft::SnapshotPolicy::LogsSinceLast(n) = config.snapshot_policy {
            sm = sm.with_attested_snapshots(n);
            config.snapshot_policy = openraft::SnapshotPolicy::Never;
        }
        let log = LogStore::open(&gdir.join(LOG_FILE), self.opts.durability)?
            .with_snapshot_mark(sm.snapshot_mark());
        if empty && !gdir.join(SNAPSHOT_FILE).exists() {
            // A replica this node deleted before, re-created by a message: it must not
            // forget the vote it had, or it would follow a stale leader of an older term,
            // which would see the log it counted as matched here gone (see `moves`).
            if let Some(vote) = crate::sm::read_tombstone(&self.opts.dir, g)?.and_then(|t| t.vote) {
                log.raise_vote(vote).await?;
            }
        }
        let ever_voted = {
            use openraft::storage::RaftLogStorage;
            let mut probe = log.clone();
            let vote = probe.read_vote().await.map_err(std::io::Error::other)?;
            let state = probe.get_log_state().await.map_err(std::io::Error::other)?;
            vote.is_some_and(|v| v.leader_id().term > 0) || state.last_log_id.is_some()
        };
        let net = GroupNet { node: self.id, group: g, transport: self.transport.clone() };
        let raft = typ::Raft::new(self.id, Arc::new(config), net, log, sm.clone())
            .await
            .map_err(std::io::Error::other)?;
        let group = OpenraftGroup::new(raft, sm, self.id, ever_voted);
        self.groups.lock().expect("not poisoned").insert(g, group);
        Ok(())
    }

    /// Stops and forgets the replica of group `g` (its files are the caller's business).
    pub(crate) async fn stop_group(&self, g: GroupId) -> Option<OpenraftGroup> {
        let group = self.groups.lock().expect("not poisoned").remove(&g)?;
        let _ = group.raft.shutdown().await;
        Some(group)
    }

    pub(crate) async fn handle_raft(&self, g: GroupId, from: NodeId, rpc: RaftRpc) -> RaftReply {
        if let RaftRpc::Fetch(req) = &rpc {
            return self.serve_fetch(g, req);
        }
        if self.group(g).is_none() && !matches!(rpc, RaftRpc::Vote(_)) {
            // A replica that missed its group's creation (it installed the parent's snapshot
            // past the split, or was down), or a new learner of a range or of the directory
            // (a move, see `moves`): start it empty; the leader will send a snapshot.
            // Never a group merged away here (see `merge_driver`).
            if let Some(refused) = crate::merge_driver::refuse_retired(&self.opts.dir, self.id, g) {
                return refused;
            }
            if let Err(e) = self.start_group(g, true).await {
                return RaftReply::Refused(format!(
                    "node {} cannot create group {g}: {e}",
                    self.id
                ));
            }
        }
        let Some(group) = self.group(g) else {
            return RaftReply::Refused(format!("node {} hosts no group {g}", self.id));
        };
        if matches!(rpc, RaftRpc::Vote(_)) && group.quiet.now() {
            // Restarted, it forgot when it last heard from its leader: its vote could cut a
            // lease short (see `lease`).
            return RaftReply::Refused(format!("node {}: restarted, not voting yet", self.id));
        }
        if matches!(rpc, RaftRpc::Vote(_))
            && group.sm.shared.lock().expect("not poisoned").last_applied.is_none()
        {
            // An empty replica (created by a message, or after this node deleted its replica)
            // remembers nothing of the group: its vote could elect a candidate of a stale
            // configuration. It votes once it has installed a snapshot.
            return RaftReply::Refused(format!("node {}: an empty replica does not vote", self.id));
        }
        let refused = |e: &dyn std::fmt::Display| RaftReply::Refused(e.to_string());
        match rpc {
            RaftRpc::Append(r) => {
                group.raft.append_entries(r).await.map_or_else(|e| refused(&e), RaftReply::Append)
            }
            RaftRpc::Vote(r) => {
                group.raft.vote(r).await.map_or_else(|e| refused(&e), RaftReply::Vote)
            }
            RaftRpc::Fetch(_) => RaftReply::Refused("served above".into()),
            RaftRpc::Snapshot(s) => {
                let SnapshotRpc { vote, meta, manifest } = *s;
                let data = match self.fetch_snapshot(g, from, &meta, &manifest).await {
                    Ok(data) => data,
                    Err(e) => return refused(&e),
                };
                let snap = typ::Snapshot { meta, snapshot: Box::new(data) };
                group
                    .raft
                    .install_full_snapshot(vote, snap)
                    .await
                    .map_or_else(|e| refused(&e), RaftReply::Snapshot)
            }
        }
    }
}
