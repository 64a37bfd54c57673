//! A node's housekeeping around moves, run on its ticks: rolling back learners whose move
//! was abandoned, deleting replicas that were moved away and missed their tombstone, and
//! learning peers' addresses from the memberships and the directory's node list.
//!
//! Guarantees: a replica is deleted by the garbage check only when, on two checks in a row
//! (two report ticks apart), the directory's descriptor of its group leaves this node out,
//! the replica's own Raft membership (its log included, so a learner that has received its
//! `add learner` entry is safe) leaves it out too, and its `conf_ver` is not newer than the
//! directory's. For a replica of the directory itself, the descriptor compared with is the
//! one the directory's leader last answered this node's heartbeat with (see `dirroute`).
//! The two checks cover a learner that installed a snapshot older than its own `add
//! learner` entry: the entry follows the snapshot at once. An empty replica (created by
//! a message, never installed) is never deleted: it holds nothing, and deleting a learner
//! whose snapshot is on its way would look to the leader like a log gone backwards.

use std::collections::BTreeSet;
use std::sync::Arc;

use openraft::ChangeMembers;

use crate::consensus::{Consensus, OpenraftGroup};
use crate::moves::{in_membership, LEARNER_TICKS};
use crate::msg::{ClientOp, ClientReply, ClientRequest, Message, Reply};
use crate::node::Node;
use crate::types::{Epoch, RangeDesc, DIRECTORY_GROUP};

impl Node {
    /// Leader duty: learners that no move of this node waits for are removed after
    /// [`LEARNER_TICKS`] ticks. Returns whether the group has learners (no split then).
    pub(crate) async fn roll_back_learners(&self, group: &OpenraftGroup, desc: &RangeDesc) -> bool {
        let g = desc.id;
        let moving = self.moving.lock().expect("not poisoned").contains(&g);
        if desc.learners.is_empty() || moving {
            self.learner_ticks.lock().expect("not poisoned").remove(&g);
            return !desc.learners.is_empty();
        }
        let ticks = {
            let mut t = self.learner_ticks.lock().expect("not poisoned");
            let n = t.entry(g).or_insert(0);
            *n += 1;
            *n
        };
        if ticks > LEARNER_TICKS {
            self.learner_ticks.lock().expect("not poisoned").remove(&g);
            let change = ChangeMembers::RemoveNodes(desc.learners.clone());
            if let Err(e) = group.raft.change_membership(change, false).await {
                eprintln!("node {}: cannot remove the learners of group {g}: {e}", self.id);
            }
        }
        true
    }

    /// Learns every address named by a membership of a replica here, and by the directory's
    /// node list where this node holds a directory replica.
    pub(crate) fn learn_addresses(&self) {
        for group in self.groups() {
            let m = group.raft.metrics().borrow().membership_config.clone();
            for (id, node) in m.membership().nodes() {
                if !node.addr.is_empty() && *id != self.id {
                    self.transport.learn(*id, &node.addr);
                }
            }
            if group.sm.desc().id == DIRECTORY_GROUP {
                let nodes = group.sm.shared.lock().expect("not poisoned").state.nodes();
                for n in nodes.iter().filter(|n| !n.addr.is_empty() && n.id != self.id) {
                    self.transport.learn(n.id, &n.addr);
                }
            }
        }
    }

    /// Deletes the replicas here that were moved away (see the module doc). One round of
    /// directory calls at most; nothing is deleted if the directory does not answer.
    pub async fn collect_garbage(&self) -> usize {
        let candidates: Vec<OpenraftGroup> = self
            .groups()
            .into_iter()
            .filter(|g| {
                g.leader() != Some(self.id) || g.sm.shared.lock().expect("ok").state.is_frozen()
            })
            .collect();
        if candidates.is_empty() {
            return 0;
        }
        let Some(descs) = self.directory_ranges_once().await else { return 0 };
        let mut deleted = 0;
        let mut seen = BTreeSet::new();
        let before = std::mem::take(&mut *self.garbage.lock().expect("not poisoned"));
        for candidate in candidates {
            let id = candidate.sm.desc().id;
            // The replica now (it may have been replaced while the directory answered).
            let Some(group) = self.group(id) else { continue };
            if !Arc::ptr_eq(&group.sm.shared, &candidate.sm.shared)
                || group.sm.shared.lock().expect("not poisoned").last_applied.is_none()
            {
                continue;
            }
            let local = group.sm.desc();
            let d = if local.id == DIRECTORY_GROUP {
                // The directory's descriptor, as its leader last answered this node's
                // heartbeat (see `dirroute`): the directory holds no descriptor of itself.
                let Some(d) = self.known_directory() else { continue };
                d
            } else if crate::merge_driver::merged_away(&local, &descs) {
                // Merged away (a missed `Retire`, or down during the whole merge): a newer
                // descriptor of another group covers it (see `merge_driver`).
                seen.insert(local.id);
                if before.contains(&local.id) {
                    match self.retire_replica(local.id).await {
                        Ok(()) => deleted += 1,
                        Err(e) => {
                            eprintln!("node {}: cannot retire group {}: {e}", self.id, local.id)
                        }
                    }
                }
                continue;
            } else {
                let Some(d) = descs.iter().find(|d| d.id == local.id) else { continue };
                d.clone()
            };
            if d.replicas.contains(&self.id) || d.learners.contains(&self.id) {
                continue;
            }
            if in_membership(&group, self.id) || local.epoch.conf_ver > d.epoch.conf_ver {
                continue;
            }
            seen.insert(local.id);
            if !before.contains(&local.id) {
                continue;
            }
            match self.remove_replica(local.id).await {
                Ok(()) => deleted += 1,
                Err(e) => eprintln!("node {}: cannot delete group {}: {e}", self.id, local.id),
            }
        }
        *self.garbage.lock().expect("not poisoned") = seen;
        deleted
    }

    /// The directory's descriptors, asking each directory replica once.
    async fn directory_ranges_once(&self) -> Option<Vec<RangeDesc>> {
        let members = self.directory_members();
        let req =
            ClientRequest { group: DIRECTORY_GROUP, epoch: Epoch::default(), op: ClientOp::Ranges };
        for n in members {
            let reply = if n == self.id {
                self.handle_client(req.clone()).await
            } else {
                match self.transport.send(self.id, n, Message::Client(req.clone())).await {
                    Ok(Reply::Client(r)) => r,
                    _ => continue,
                }
            };
            if let ClientReply::Ranges(r) = reply {
                return Some(r);
            }
        }
        None
    }
}
