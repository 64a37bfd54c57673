//! The rebalancer: a driver on the directory leader's node that keeps the number of range
//! replicas even across the registered, non-draining nodes, one move at a time.
//!
//! [`plan`] is a pure function of the directory's descriptors and node list; it proposes at
//! most one move, in this order of urgency:
//! 1. a range with more voters than the target (a move interrupted after its promotion):
//!    drop the voter on a draining node, else on the most loaded node;
//! 2. a replica on a draining node: move it to the least loaded active node that lacks one;
//! 3. balance: if the most loaded active node holds more than one replica more than the
//!    least loaded, move one replica of a range the first has and the second lacks.
//!
//! It balances replica counts only (not range sizes or load), and it does not detect dead
//! nodes: a node stays a target until it is drained. The directory group itself never
//! moves. The driver runs at most one move at a time (a flag on the node), sends it to the
//! range's leader (following not-leader hints) and waits for the answer; the plan is made
//! again from the directory on the next tick, so a lost answer only delays the next move.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::consensus::Consensus;
use crate::msg::{ClientOp, ClientReply, ClientRequest, Message, Reply};
use crate::node::Node;
use crate::types::{GroupId, NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

/// One planned move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub group: GroupId,
    pub from: NodeId,
    /// When already a voter (case 1 of the plan), the move only removes `from`.
    pub to: NodeId,
}

/// The next move, if any (see the module doc).
pub fn plan(descs: &[RangeDesc], nodes: &[NodeInfo], replicas: usize) -> Option<Move> {
    let draining = |n: NodeId| nodes.iter().any(|i| i.id == n && i.draining);
    let mut load: BTreeMap<NodeId, usize> =
        nodes.iter().filter(|n| !n.draining).map(|n| (n.id, 0)).collect();
    for d in descs {
        for n in &d.replicas {
            if let Some(l) = load.get_mut(n) {
                *l += 1;
            }
        }
    }
    let loaded = |n: &NodeId| (load.get(n).copied().unwrap_or(usize::MAX), *n);
    if let Some(d) = descs.iter().find(|d| d.replicas.len() > replicas.max(1)) {
        let from = d
            .replicas
            .iter()
            .copied()
            .filter(|n| draining(*n))
            .min()
            .or_else(|| d.replicas.iter().copied().max_by_key(|n| loaded(n)))?;
        let to = *d.replicas.iter().find(|n| **n != from)?;
        return Some(Move { group: d.id, from, to });
    }
    let least = |d: &RangeDesc| {
        load.iter().filter(|(n, _)| !d.replicas.contains(n)).min_by_key(|(n, l)| (**l, **n))
    };
    for d in descs {
        if let Some(from) = d.replicas.iter().copied().find(|n| draining(*n)) {
            if let Some((to, _)) = least(d) {
                return Some(Move { group: d.id, from, to: *to });
            }
        }
    }
    let (&max, &max_load) = load.iter().max_by_key(|(n, l)| (**l, std::cmp::Reverse(**n)))?;
    let (&min, &min_load) = load.iter().min_by_key(|(n, l)| (**l, **n))?;
    if max_load <= min_load + 1 {
        return None;
    }
    let d = descs.iter().find(|d| d.replicas.contains(&max) && !d.replicas.contains(&min))?;
    Some(Move { group: d.id, from: max, to: min })
}

impl Node {
    /// On the directory leader (with the rebalancer enabled and no move of its own under
    /// way), spawns one round of [`Node::rebalance_once`].
    pub(crate) fn maybe_rebalance(&self) {
        if !self.opts.rebalance {
            return;
        }
        let Some(dir) = self.group(DIRECTORY_GROUP) else { return };
        if dir.leader() != Some(self.id) || self.rebalancing.swap(true, Ordering::SeqCst) {
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
        let (descs, nodes) = {
            let s = dir.sm.shared.lock().expect("not poisoned");
            (s.state.descriptors(), s.state.nodes())
        };
        let m = plan(&descs, &nodes, self.opts.replicas)?;
        let desc = descs.iter().find(|d| d.id == m.group)?.clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(id: GroupId, replicas: &[NodeId]) -> RangeDesc {
        let mut d = RangeDesc::whole(id, replicas.iter().copied().collect());
        d.start = vec![id as u8];
        d
    }

    fn nodes(ids: &[NodeId], draining: &[NodeId]) -> Vec<NodeInfo> {
        let info = |id| NodeInfo { id, addr: String::new(), draining: draining.contains(&id) };
        ids.iter().map(|i| info(*i)).collect()
    }

    #[test]
    fn a_new_node_receives_replicas_until_the_counts_are_even() {
        let mut descs: Vec<RangeDesc> = (1..=4).map(|g| desc(g, &[1, 2, 3])).collect();
        let ns = nodes(&[1, 2, 3, 4], &[]);
        let mut moves = 0;
        while let Some(m) = plan(&descs, &ns, 3) {
            assert_eq!(m.to, 4, "{m:?}");
            let d = descs.iter_mut().find(|d| d.id == m.group).unwrap();
            d.replicas.remove(&m.from);
            d.replicas.insert(m.to);
            moves += 1;
            assert!(moves < 10);
        }
        // 12 replicas over 4 nodes: 3 each.
        assert_eq!(moves, 3);
        for n in 1..=4 {
            assert_eq!(descs.iter().filter(|d| d.replicas.contains(&n)).count(), 3);
        }
    }

    #[test]
    fn a_draining_node_loses_every_replica_and_extra_voters_go_first() {
        let mut descs = vec![desc(1, &[1, 2, 3]), desc(2, &[1, 2, 3, 4]), desc(3, &[2, 3, 4])];
        let ns = nodes(&[1, 2, 3, 4], &[1]);
        let first = plan(&descs, &ns, 3).unwrap();
        assert_eq!(first, Move { group: 2, from: 1, to: 2 });
        descs[1].replicas.remove(&1);
        let second = plan(&descs, &ns, 3).unwrap();
        assert_eq!(second, Move { group: 1, from: 1, to: 4 });
        descs[0].replicas.remove(&1);
        descs[0].replicas.insert(4);
        assert_eq!(plan(&descs, &ns, 3), None);
    }

    #[test]
    fn nothing_to_do_when_balanced_or_no_target() {
        let descs = vec![desc(1, &[1, 2, 3])];
        assert_eq!(plan(&descs, &nodes(&[1, 2, 3], &[]), 3), None);
        // Draining with no node to take the replica: no move.
        assert_eq!(plan(&descs, &nodes(&[1, 2, 3], &[2]), 3), None);
    }
}
