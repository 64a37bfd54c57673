//! Driving a merge (see `merge` for the steps every replica applies): the right range's
//! leader freezes its range, waits for an `Attest` of the frozen state, sends that state as
//! chunks to the left range's leader for `CommitMerge`, then retires its replicas (or rolls
//! back if the left range's log refused).
//!
//! Guarantees: the decision is made once, in the left range's log; the driver only acts on
//! it. A frozen range's leader (any leader it gets after a crash: see `split::tick`) sends
//! `CommitMerge` again until it gets a decision, and a repeated `CommitMerge` gets the
//! recorded one, so a crash of either leader at any point ends with the merge either
//! committed (and the right range retired) or refused (and the right range unfrozen).
//! A rollback is proposed only after the left range's log refused, which it records:
//! the left range can never absorb that frozen version afterwards.

use std::time::Duration;

use crate::consensus::{Consensus, OpenraftGroup, ProposeError};
use crate::msg::{BoxFuture, ClientOp, ClientReply, ClientRequest, Message};
use crate::node::Node;
use crate::range::overlap;
use crate::types::{Command, Epoch, GroupId, NodeId, RangeDesc, Response, SnapshotData};

/// How long a driver waits for an `Attest` of the frozen state.
pub const ATTEST_LIMIT: Duration = Duration::from_secs(10);

/// Why a merge did not complete (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("no replica of group {0} on this node")]
    NoGroup(GroupId),
    #[error("not the leader (leader: {0:?})")]
    NotLeader(Option<NodeId>),
    #[error("stale route: the range is now {0:?}")]
    Stale(RangeDesc),
    #[error("a merge of group {0} is already being driven here")]
    Busy(GroupId),
    #[error("merge refused: {0}")]
    Refused(String),
    #[error("the target's log refused the merge (rolled back): {0}")]
    Aborted(String),
    #[error("outcome not known yet (retried by the range's leader): {0}")]
    Unknown(String),
}

/// Removes `g` from the node's set of merges being driven, however the drive ends.
struct Driving<'a>(&'a Node, GroupId);
impl Drop for Driving<'_> {
    fn drop(&mut self) {
        self.0.merging.lock().expect("not poisoned").remove(&self.1);
    }
}

fn propose_err(e: ProposeError) -> MergeError {
    match e {
        ProposeError::NotLeader(l) => MergeError::NotLeader(l),
        ProposeError::Unknown(e) => MergeError::Unknown(e),
    }
}

impl Node {
    /// Merges group `g` (led here) into its left neighbour `target`, planned at the
    /// target's version `target_version`: freezes `g` unless frozen already, then
    /// [`Node::finish_merge`]. Returns the target's descriptor after the merge.
    pub async fn merge_into(
        &self,
        g: GroupId,
        target: GroupId,
        target_version: u64,
    ) -> Result<RangeDesc, MergeError> {
        let group = self.group(g).ok_or(MergeError::NoGroup(g))?;
        if group.leader() != Some(self.id) {
            return Err(MergeError::NotLeader(group.leader()));
        }
        if !self.merging.lock().expect("not poisoned").insert(g) {
            return Err(MergeError::Busy(g));
        }
        let _driving = Driving(self, g);
        let frozen = group.sm.shared.lock().expect("not poisoned").state.merge.frozen;
        match frozen {
            Some(f) if f.target != target => {
                return Err(MergeError::Refused(format!("frozen for a merge into {}", f.target)))
            }
            Some(_) => {}
            None => {
                self.prepare_merge_step(&group, target, target_version).await?;
            }
        }
        self.finish_merge_led(&group).await
    }

    /// [`Node::merge_into`] as a boxed future (it calls back into `handle_client` through
    /// the directory, so its type must be named to be spawned from there).
    fn merge_boxed(
        self: std::sync::Arc<Self>,
        g: GroupId,
        target: GroupId,
        target_version: u64,
    ) -> BoxFuture<'static, Result<RangeDesc, MergeError>> {
        Box::pin(async move { self.merge_into(g, target, target_version).await })
    }

    /// Steps 2-3 for a frozen group this node leads, unless a drive is under way here
    /// (called by the leader's tick: a merge interrupted by a crash is finished so).
    pub(crate) fn spawn_finish_merge(&self, group: &OpenraftGroup) {
        let g = group.sm.desc().id;
        if !self.merging.lock().expect("not poisoned").insert(g) {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            self.merging.lock().expect("not poisoned").remove(&g);
            return;
        };
        let group = group.clone();
        let task = tokio::spawn(async move {
            let _driving = Driving(&me, g);
            if let Err(e) = me.finish_merge_led(&group).await {
                eprintln!("node {}: merge of group {g}: {e}", me.id);
            }
        });
        self.keep_task(task);
    }

    /// Step 1 alone: `PrepareMerge` in the log of `group` (led here) at its epoch now;
    /// returns the frozen descriptor.
    pub async fn prepare_merge_step(
        &self,
        group: &OpenraftGroup,
        target: GroupId,
        target_version: u64,
    ) -> Result<RangeDesc, MergeError> {
        let epoch = group.sm.desc().epoch;
        let cmd = Command::PrepareMerge { epoch, target, target_version };
        match group.propose(cmd).await.map_err(propose_err)? {
            Response::Merge(d) => Ok(d),
            Response::Stale(d) => Err(MergeError::Stale(d)),
            r => Err(MergeError::Refused(format!("{r:?}"))),
        }
    }

    /// Step 2 alone: the attested frozen state of `group` (led here) sent to the target's
    /// leader for `CommitMerge`; returns this range's descriptor and the target's answer.
    pub async fn commit_merge_step(
        &self,
        group: &OpenraftGroup,
    ) -> Result<(RangeDesc, ClientReply), MergeError> {
        let (desc, source, f) = self.frozen_source(group).await?;
        let addressee = self.target_desc(f.target, &desc).await;
        let op =
            ClientOp::CommitMerge { target: f.target, target_version: f.target_version, source };
        Ok((desc, self.range_call(&addressee, op).await))
    }

    /// Steps 2-3 (the caller holds the drive's guard): `CommitMerge` of the attested frozen
    /// state at the target's leader; then retire this range, or roll it back.
    async fn finish_merge_led(&self, group: &OpenraftGroup) -> Result<RangeDesc, MergeError> {
        let (desc, reply) = self.commit_merge_step(group).await?;
        match reply {
            ClientReply::Merged(merged) => {
                self.report(vec![merged.clone()]).await;
                self.retire_all(&desc, &merged).await;
                Ok(merged)
            }
            ClientReply::MergeRefused(why) => {
                let cmd = Command::RollbackMerge { epoch: desc.epoch };
                if let Response::Merge(d) = group.propose(cmd).await.map_err(propose_err)? {
                    self.report(vec![d]).await;
                }
                Err(MergeError::Aborted(why))
            }
            other => Err(MergeError::Unknown(format!("target answered {other:?}"))),
        }
    }

    /// The frozen state of `group` as chunks under a root a committed `Attest` named,
    /// waiting up to [`ATTEST_LIMIT`] for the leader's tick to attest it.
    async fn frozen_source(
        &self,
        group: &OpenraftGroup,
    ) -> Result<(RangeDesc, Box<SnapshotData>, crate::merge::Frozen), MergeError> {
        let start = tokio::time::Instant::now();
        loop {
            {
                let s = group.sm.shared.lock().expect("not poisoned");
                let desc = s.state.desc.clone();
                let Some(f) = s.state.merge.frozen else {
                    return Err(MergeError::Refused("the range is not frozen".into()));
                };
                let frozen = |v: &crate::versions::Version| {
                    v.merge.frozen == Some(f) && v.desc.epoch.version == desc.epoch.version
                };
                if let Some(v) = s.versions.newest_attested(frozen) {
                    let mut data = v.data();
                    // The source's descriptor as it is now (its voters may have changed).
                    data.desc = Some(desc.clone());
                    return Ok((desc, Box::new(data), f));
                }
            }
            if group.leader() != Some(self.id) {
                return Err(MergeError::NotLeader(group.leader()));
            }
            if start.elapsed() > ATTEST_LIMIT {
                return Err(MergeError::Unknown("the frozen state was not attested".into()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Where to send `CommitMerge` for `target`: its descriptor from the directory; if the
    /// directory no longer holds it (merged away), this range's left neighbour there (which
    /// absorbed it, and answers in its stead: see `merge`); else a descriptor of the target
    /// naming this range's voters (a merge is planned between ranges on the same voters;
    /// the target's leader is found by not-leader hints).
    async fn target_desc(&self, target: GroupId, own: &RangeDesc) -> RangeDesc {
        if let Some(ClientReply::Ranges(descs)) = self.directory_call(ClientOp::Ranges).await {
            if let Some(d) = descs.iter().find(|d| d.id == target) {
                return d.clone();
            }
            if let Some(d) = descs.into_iter().find(|d| d.end == own.start && d.id != own.id) {
                return d;
            }
        }
        RangeDesc { id: target, epoch: Epoch::default(), ..own.clone() }
    }

    /// Tells every replica of the merged-away range to delete itself, this one last.
    async fn retire_all(&self, desc: &RangeDesc, merged: &RangeDesc) {
        let req = ClientRequest {
            group: desc.id,
            epoch: Epoch::default(),
            op: ClientOp::Retire { merged: merged.clone() },
        };
        // This replica first: a leader stops replicating to the replicas it retires.
        self.retire(desc.id, merged).await;
        for n in desc.replicas.iter().chain(&desc.learners).filter(|n| **n != self.id) {
            let _ = self.transport.send(self.id, *n, Message::Client(req.clone())).await;
        }
    }

    /// Deletes the replica of a merged-away group, leaving a `retired-<id>` marker: a
    /// message of the group never starts an empty replica of it here again (group ids are
    /// never reused, and a merged-away group never comes back).
    pub(crate) async fn retire_replica(&self, g: GroupId) -> std::io::Result<()> {
        bavl_store::write_file_atomic(&retired_file(&self.opts.dir, g), b"")?;
        self.remove_replica(g).await
    }

    /// Deletes this node's replica of `g` if `merged` (a descriptor of the group that
    /// absorbed it) covers it at a newer version.
    async fn retire(&self, g: GroupId, merged: &RangeDesc) -> ClientReply {
        let Some(group) = self.group(g) else { return ClientReply::Done };
        let (desc, applied) = {
            let s = group.sm.shared.lock().expect("not poisoned");
            (s.state.desc.clone(), s.last_applied.is_some())
        };
        if !applied {
            return ClientReply::Done;
        }
        let covers = merged.start <= desc.start
            && (merged.end.is_empty() || (!desc.end.is_empty() && desc.end <= merged.end));
        if merged.id == g || !covers || merged.epoch.version <= desc.epoch.version {
            return ClientReply::Refused("the merged range does not supersede this one".into());
        }
        match self.retire_replica(g).await {
            Ok(()) => ClientReply::Done,
            Err(e) => ClientReply::Refused(format!("cannot delete the replica: {e}")),
        }
    }

    /// Serves `Merge`, `CommitMerge` and `Retire` for group `g`.
    pub(crate) async fn handle_merge_op(&self, g: GroupId, op: ClientOp) -> ClientReply {
        match op {
            ClientOp::Merge { target, target_version } => {
                let Some(me) = self.me.upgrade() else { return ClientReply::NoGroup };
                // A task of its own: the merge goes on if the caller stops waiting.
                let task = tokio::spawn(me.merge_boxed(g, target, target_version));
                match task.await {
                    Ok(Ok(d)) => ClientReply::Merged(d),
                    Ok(Err(MergeError::NotLeader(l))) => ClientReply::NotLeader(l),
                    Ok(Err(MergeError::NoGroup(_))) => ClientReply::NoGroup,
                    Ok(Err(MergeError::Stale(d))) => ClientReply::Stale(d),
                    Ok(Err(MergeError::Aborted(e))) => ClientReply::MergeRefused(e),
                    Ok(Err(e @ (MergeError::Busy(_) | MergeError::Refused(_)))) => {
                        ClientReply::Refused(e.to_string())
                    }
                    Ok(Err(e)) => ClientReply::Unknown(e.to_string()),
                    Err(e) => ClientReply::Unknown(format!("the merge task ended: {e}")),
                }
            }
            ClientOp::CommitMerge { target, target_version, source } => {
                let Some(group) = self.group(g) else { return ClientReply::NoGroup };
                match group.propose(Command::CommitMerge { target, target_version, source }).await {
                    Ok(Response::Merge(d)) => ClientReply::Merged(d),
                    // Recorded in the target's log: the decision.
                    Ok(Response::Refused(e)) => ClientReply::MergeRefused(e),
                    Ok(r) => ClientReply::Unknown(format!("unexpected answer {r:?}")),
                    Err(ProposeError::NotLeader(l)) => ClientReply::NotLeader(l),
                    Err(ProposeError::Unknown(e)) => ClientReply::Unknown(e),
                }
            }
            ClientOp::Retire { merged } => self.retire(g, &merged).await,
            _ => ClientReply::Refused("not an administration operation".into()),
        }
    }

    /// Asks the leader of `right` to merge it into `left` (for tests and the planner).
    pub async fn request_merge(&self, left: &RangeDesc, right: &RangeDesc) -> ClientReply {
        let op = ClientOp::Merge { target: left.id, target_version: left.epoch.version };
        self.range_call(right, op).await
    }
}

/// The marker of a group merged away from this node.
pub fn retired_file(node_dir: &std::path::Path, g: GroupId) -> std::path::PathBuf {
    node_dir.join(format!("retired-{g}"))
}

/// A refusal if group `g` was merged away from node `me` (see [`Node::retire_replica`]).
pub(crate) fn refuse_retired(
    node_dir: &std::path::Path,
    me: NodeId,
    g: GroupId,
) -> Option<crate::msg::RaftReply> {
    let retired = retired_file(node_dir, g).exists();
    retired.then(|| crate::msg::RaftReply::Refused(format!("node {me}: group {g} was merged")))
}

/// Whether `local` (a replica's descriptor) is absent from the directory's `descs` and
/// covered there by a descriptor of another group at a higher version. Versions grow
/// along every key's history, so the range no longer holds those keys; only a merge ends a
/// group: it was merged away (the garbage check of `cleanup` retires it).
pub(crate) fn merged_away(local: &RangeDesc, descs: &[RangeDesc]) -> bool {
    !descs.iter().any(|d| d.id == local.id)
        && descs.iter().any(|d| overlap(d, local) && d.epoch.version > local.epoch.version)
}
