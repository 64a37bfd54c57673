//! A range leader's duties: splitting its range when it grows past the size threshold or
//! its load passes the load threshold, and reporting its descriptor to the directory
//! (TiKV's region heartbeat to PD).
//!
//! The split protocol: (1) the leader picks a key at a chunk boundary, near the middle of
//! its tree (size split) or near the median of the keys recently accessed (load split, see
//! `load`); (2) it asks the directory for a fresh group id; (3) it proposes one `Split` command
//! in its own log, carrying the epoch it read — every replica applies it identically: the
//! range keeps `[start, key)`, the right half becomes the new group on the same replicas,
//! both at `version + 1`, and each replica creates the child from the half it computed; (4)
//! it reports both descriptors to the directory in one command. A crash between (3) and (4)
//! leaves the directory stale, which clients survive (fence keys answer `Stale`) and the
//! next heartbeat report repairs. An id allocated in (2) but never used is simply skipped.

use std::sync::Arc;

use crate::consensus::{Consensus, OpenraftGroup};
use crate::msg::{ClientOp, ClientReply, ClientRequest};
use crate::node::Node;
use crate::types::{Command, Epoch, GroupId, RangeDesc, Response, DIRECTORY_GROUP};

impl Node {
    /// One round of leader duties; `report` also sends every led range's descriptor, and
    /// runs the node's housekeeping (addresses, garbage, the rebalancer: see `cleanup`).
    pub async fn tick(self: &Arc<Self>, split_keys: u64, report: bool) {
        self.load.lock().expect("not poisoned").rotate();
        for group in self.groups() {
            let desc = group.sm.desc();
            if group.sm.snapshot_due() && group.raft.trigger().snapshot().await.is_err() {
                group.sm.snapshot_not_triggered();
            }
            if group.leader() != Some(self.id) {
                continue;
            }
            attest(&group).await;
            if self.roll_back_learners(&group, &desc).await || desc.id == DIRECTORY_GROUP {
                continue;
            }
            if group.sm.shared.lock().expect("not poisoned").state.is_frozen() {
                // A merge to finish (after a crash of its driver, or under way).
                if !self.merges_held() {
                    self.spawn_finish_merge(&group);
                }
                if report {
                    self.report(vec![desc]).await;
                }
                continue;
            }
            let moving = self.moving.lock().expect("not poisoned").contains(&desc.id);
            let key = if moving { None } else { self.split_key(&group, split_keys) };
            if let Some(key) = key {
                self.split(&group, key).await;
            } else if report {
                self.report(vec![desc]).await;
            }
        }
        if report {
            self.heartbeat().await;
            self.learn_addresses();
            self.collect_garbage().await;
            // Merges first: the rebalancer's round marks itself under way before its task
            // runs, and a merge is planned only while no move is (nor a move while a merge is).
            self.maybe_merge();
            self.maybe_rebalance();
        }
    }

    /// Where to split a led range now, if at all: by size (more than `split_keys` keys:
    /// a chunk boundary near the middle of the tree) or else by load (more than the
    /// `split_load` option over a full window: a chunk boundary near the median of the
    /// sampled keys, see `load`).
    fn split_key(&self, group: &OpenraftGroup, split_keys: u64) -> Option<Vec<u8>> {
        let s = group.sm.shared.lock().expect("not poisoned");
        if s.state.tree.len() > split_keys {
            return s.state.split_key();
        }
        let limit = self.opts.load.split_load;
        let load = self.load.lock().expect("not poisoned");
        let (reads, writes, full) = load.rates(s.state.desc.id);
        if limit == u64::MAX || !full || reads.saturating_add(writes) <= limit {
            return None;
        }
        let floor = self.opts.load.split_load_floor_chunks;
        crate::load::load_split_key(&s.state, &load.samples(s.state.desc.id), floor)
    }

    async fn split(&self, group: &OpenraftGroup, key: Vec<u8>) {
        let Some(new_id) = self.alloc_group_id().await else { return };
        if let Some((left, right)) = self.propose_split(group, key, new_id).await {
            // The halves' load is measured afresh (the parent's samples are spent).
            self.load.lock().expect("not poisoned").reset(left.id);
            self.report(vec![left, right]).await;
        }
    }

    /// Step 2 of a split: a fresh group id from the directory.
    pub async fn alloc_group_id(&self) -> Option<GroupId> {
        match self.directory_call(ClientOp::AllocGroupId).await {
            Some(ClientReply::GroupId(id)) => Some(id),
            _ => None,
        }
    }

    /// Step 3 of a split: one `Split` command in the range's log, at the epoch held now.
    /// Returns both halves once applied here.
    pub async fn propose_split(
        &self,
        group: &OpenraftGroup,
        key: Vec<u8>,
        new_id: GroupId,
    ) -> Option<(RangeDesc, RangeDesc)> {
        let epoch = group.sm.desc().epoch;
        match group.propose(Command::Split { epoch, key, new_id }).await {
            Ok(Response::Split { left, right }) => Some((left, right)),
            _ => None,
        }
    }

    /// Step 4 of a split (and the heartbeat): tell the directory of these descriptors.
    pub async fn report(&self, descs: Vec<RangeDesc>) -> bool {
        matches!(self.directory_call(ClientOp::Report(descs)).await, Some(ClientReply::Done))
    }

    /// Sends a directory operation to the directory's leader (the known leader first, then
    /// every replica), in up to [`DIRECTORY_ROUNDS`] rounds with a growing pause between
    /// them (an election may be under way). `None` if no replica answered for sure.
    pub async fn directory_call(&self, op: ClientOp) -> Option<ClientReply> {
        let req = ClientRequest { group: DIRECTORY_GROUP, epoch: Epoch::default(), op };
        for round in 0..DIRECTORY_ROUNDS {
            if round > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(100 * u64::from(round))).await;
            }
            let hint = self.group(DIRECTORY_GROUP).and_then(|g| g.leader());
            let mut members = self.directory_members();
            members.sort_by_key(|n| Some(*n) != hint);
            for n in members {
                if let Some(r) = self.directory_try(n, &req).await {
                    return Some(r);
                }
            }
        }
        None
    }
}

/// Rounds of [`Node::directory_call`] over the directory's replicas.
pub const DIRECTORY_ROUNDS: u32 = 8;

/// Proposes `Attest` for the leader's latest sealed version if none named it yet (see
/// `versions`): snapshots are built only from attested versions. Waits at most 2 s (a
/// leader cut off from its quorum must not hold up the other duties); the next tick
/// proposes again if the entry did not commit.
async fn attest(group: &OpenraftGroup) {
    let pending = group.sm.shared.lock().expect("not poisoned").versions.to_attest();
    if let Some((index, root)) = pending {
        let propose = group.propose(Command::Attest { index, root: root.to_vec() });
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), propose).await;
    }
}
