//! The rebalancer's driver, on the directory leader's node: one move at a time, planned by
//! [`plan`] (a pure function, see `plan`) from the directory's descriptors and node list and
//! the leader's in-memory view (range stats and dead nodes, see `liveness`).
//!
//! The driver runs at most one move at a time (a flag on the node), sends it to the range's
//! leader (following not-leader hints) and waits for the answer; the plan is made again
//! from the directory on the next report tick, so a lost answer only delays the next move.
//! The directory group itself moves only off leaving nodes (case 0 of `plan`); that move
//! is driven by the directory's leader, this node, like any group's (`moves`).

use std::sync::atomic::Ordering;

use crate::consensus::Consensus;
use crate::msg::{ClientOp, ClientReply, ClientRequest, Message, Reply};
use crate::node::Node;
pub use crate::plan::{plan, Move, View};
use crate::types::{NodeId, RangeDesc, DIRECTORY_GROUP};

impl Node {
    /// On the directory leader (with the rebalancer enabled and no move of its own under
    /// way), spawns one round of [`Node::rebalance_once`].
    pub(crate) fn maybe_rebalance(&self) {
        if !self.opts.rebalance {
            return;
        }
        let Some(dir) = self.group(DIRECTORY_GROUP) else { return };
        if dir.leader() != Some(self.id) || self.merge_running() {
            return;
        }
        if self.rebalancing.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let task = tokio::spawn(async move {
            if let Some((m, reply)) = me.rebalance_once().await {
                if !matches!(reply, ClientReply::Moved(_)) {
                    eprintln!("node {}: rebalancer move {m:?}: {reply:?}", me.id);
                }
            }
            me.rebalancing.store(false, Ordering::SeqCst);
        });
        self.keep_task(task);
    }

    /// Plans one move from this node's directory replica and has it executed by the range's
    /// leader; returns the move and the leader's answer.
    pub async fn rebalance_once(&self) -> Option<(Move, ClientReply)> {
        let dir = self.group(DIRECTORY_GROUP)?;
        let (descs, nodes, own) = {
            let s = dir.sm.shared.lock().expect("not poisoned");
            (s.state.descriptors(), s.state.nodes(), s.state.desc.clone())
        };
        let m = plan(&descs, &nodes, self.opts.replicas, &self.directory_view(&nodes))?;
        let desc = if m.group == DIRECTORY_GROUP {
            own
        } else {
            descs.iter().find(|d| d.id == m.group)?.clone()
        };
        let reply = self.range_call(&desc, ClientOp::Move { from: m.from, to: m.to }).await;
        Some((m, reply))
    }

    /// Sends `op` to the leader of `desc`'s group: each replica in turn, following
    /// not-leader hints, for a few rounds.
    pub async fn range_call(&self, desc: &RangeDesc, op: ClientOp) -> ClientReply {
        let req = ClientRequest { group: desc.id, epoch: desc.epoch, op };
        let mut last = ClientReply::NoGroup;
        let mut targets: Vec<NodeId> = desc.replicas.iter().copied().collect();
        let mut sent = 0;
        while let Some(n) = targets.pop() {
            sent += 1;
            if sent > 3 * desc.replicas.len().max(1) {
                break;
            }
            let reply = if n == self.id {
                self.handle_client(req.clone()).await
            } else {
                match self.transport.send(self.id, n, Message::Client(req.clone())).await {
                    Ok(Reply::Client(r)) => r,
                    _ => continue,
                }
            };
            match reply {
                ClientReply::NotLeader(Some(l)) if l != n => targets.push(l),
                ClientReply::NotLeader(_) | ClientReply::NoGroup => {}
                r => return r,
            }
            last = ClientReply::NotLeader(None);
        }
        last
    }
}
