//! Node heartbeats to the directory leader: which nodes are alive, and the size and load of
//! the ranges each leads.
//!
//! Every node, on every report tick (every fourth tick), sends the directory's leader one
//! `Heartbeat { node, ranges }` (one round over the directory's replicas, the known leader
//! first; no retry: the next heartbeat comes soon), `ranges` holding the [`RangeStats`] of
//! every range the node leads. The directory leader keeps in **memory only** (the
//! [`DirView`]): when it last heard from each node, and each group's latest stats. Nothing
//! of it is logged or replicated: liveness is a matter of the leader's clock, and stats are
//! overwritten every few ticks, so a new directory leader rebuilds both within one report
//! period (the view is reset when the directory's term changes; until a node's first
//! heartbeat, it counts as heard when the view began, so a new leader declares no node dead
//! before the timeout has passed under its own watch).
//!
//! A node not heard from for `dead_ticks` ticks is **dead** to the rebalancer (see `plan`):
//! its replicas are re-created elsewhere, one move at a time, and it receives none; heard
//! from again, it is a target again. The directory leader's own node is always alive.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::consensus::{Consensus, OpenraftGroup};
use crate::load::RangeStats;
use crate::msg::{ClientOp, ClientReply, ClientRequest};
use crate::node::Node;
use crate::plan::View;
use crate::types::{Epoch, GroupId, NodeId, NodeInfo, DIRECTORY_GROUP};

/// The directory leader's view of the nodes (see the module doc).
pub struct DirView {
    term: Option<u64>,
    since: Instant,
    heard: HashMap<NodeId, Instant>,
    stats: HashMap<GroupId, (RangeStats, Instant)>,
}

impl Default for DirView {
    fn default() -> Self {
        DirView { term: None, since: Instant::now(), heard: HashMap::new(), stats: HashMap::new() }
    }
}

impl DirView {
    /// Starts over if the directory's term is not the view's.
    fn at_term(&mut self, term: u64, now: Instant) {
        if self.term != Some(term) {
            *self = DirView { term: Some(term), since: now, ..DirView::default() };
        }
    }

    /// Records a heartbeat of `node` at `now`, in the directory's term `term`.
    pub fn heard(&mut self, term: u64, node: NodeId, ranges: &[RangeStats], now: Instant) {
        self.at_term(term, now);
        self.heard.insert(node, now);
        for r in ranges {
            self.stats.insert(r.group, (*r, now));
        }
    }

    /// The registered nodes other than `me` not heard from for longer than `limit`.
    pub fn dead(
        &mut self,
        term: u64,
        nodes: &[NodeInfo],
        me: NodeId,
        now: Instant,
        limit: Duration,
    ) -> BTreeSet<NodeId> {
        self.at_term(term, now);
        let last = |n: NodeId| self.heard.get(&n).copied().unwrap_or(self.since);
        let silent = |n: NodeId| now.saturating_duration_since(last(n)) > limit;
        nodes.iter().map(|n| n.id).filter(|n| *n != me && silent(*n)).collect()
    }

    /// The registered nodes other than `me` not heard from in this view.
    pub fn unheard(&self, nodes: &[NodeInfo], me: NodeId) -> BTreeSet<NodeId> {
        let unheard = |n: &NodeId| *n != me && !self.heard.contains_key(n);
        nodes.iter().map(|n| n.id).filter(unheard).collect()
    }

    /// The latest stats of each group, if heard within `limit` (older ones are dropped: the
    /// group's leader changed or stopped reporting).
    pub fn stats(&mut self, now: Instant, limit: Duration) -> BTreeMap<GroupId, RangeStats> {
        self.stats.retain(|_, (_, at)| now.saturating_duration_since(*at) <= limit);
        self.stats.iter().map(|(g, (s, _))| (*g, *s)).collect()
    }
}

impl Node {
    /// How long a node may stay silent before the directory leader counts it dead.
    pub(crate) fn dead_after(&self) -> Duration {
        Duration::from_millis(self.opts.tick_ms.saturating_mul(self.opts.load.dead_ticks))
    }

    /// The stats of every range this node leads.
    pub fn led_stats(&self) -> Vec<RangeStats> {
        let load = self.load.lock().expect("not poisoned");
        let mut out = Vec::new();
        for g in self.groups() {
            if g.leader() != Some(self.id) {
                continue;
            }
            let s = g.sm.shared.lock().expect("not poisoned");
            let group = s.state.desc.id;
            if group == DIRECTORY_GROUP || s.last_applied.is_none() {
                continue;
            }
            let tree = s.state.tree.stats();
            let (reads, writes, _) = load.rates(group);
            out.push(RangeStats {
                group,
                keys: tree.keys,
                bytes: tree.payload_bytes,
                reads,
                writes,
            });
        }
        out
    }

    /// Sends this node's heartbeat to the directory's leader (one round, see the module doc)
    /// and records the directory's members its answer names (see `dirroute`).
    pub(crate) async fn heartbeat(&self) -> bool {
        let op = ClientOp::Heartbeat { node: self.id, ranges: self.led_stats() };
        let req = ClientRequest { group: DIRECTORY_GROUP, epoch: Epoch::default(), op };
        let hint = self.group(DIRECTORY_GROUP).and_then(|g| g.leader());
        let mut members = self.directory_members();
        members.sort_by_key(|n| Some(*n) != hint);
        for n in members {
            if let Some(ClientReply::Heard { directory, members }) =
                self.directory_try(n, &req).await
            {
                self.learn_directory(directory, members);
                return true;
            }
        }
        false
    }

    /// Serves a heartbeat on this node's directory replica: recorded if it leads, and
    /// answered with the directory's members (`Heard`).
    pub(crate) fn on_heartbeat(
        &self,
        dir: &OpenraftGroup,
        node: NodeId,
        ranges: &[RangeStats],
    ) -> ClientReply {
        let m = dir.raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return ClientReply::NotLeader(m.current_leader);
        }
        self.view.lock().expect("not poisoned").heard(m.current_term, node, ranges, Instant::now());
        let (directory, members) = Node::heard(dir);
        ClientReply::Heard { directory, members }
    }

    /// What the rebalancer knows beyond the directory's state: the stats of the ranges, the
    /// dead nodes and those not heard from yet, and the directory's own descriptor (this
    /// node must lead the directory).
    pub fn directory_view(&self, nodes: &[NodeInfo]) -> View {
        let dir = self.group(DIRECTORY_GROUP);
        let term = dir.as_ref().map_or(0, |g| g.raft.metrics().borrow().current_term);
        let limit = self.dead_after();
        let now = Instant::now();
        let mut view = self.view.lock().expect("not poisoned");
        let dead = view.dead(term, nodes, self.id, now, limit);
        let unheard = view.unheard(nodes, self.id);
        let unheard = unheard.difference(&dead).copied().collect();
        let directory = dir.map(|g| g.sm.desc());
        View { stats: view.stats(now, limit), dead, unheard, directory }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[NodeId]) -> Vec<NodeInfo> {
        ids.iter().map(|id| NodeInfo { id: *id, addr: String::new(), draining: false }).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_node_is_dead_after_the_limit_and_alive_when_heard_again() {
        let mut v = DirView::default();
        let limit = Duration::from_secs(3);
        let ns = nodes(&[1, 2, 3]);
        let t0 = Instant::now();
        // A new view declares nobody dead before the limit passed under its watch.
        assert!(v.dead(5, &ns, 1, t0, limit).is_empty());
        let stats = RangeStats { group: 9, keys: 10, ..Default::default() };
        v.heard(5, 2, &[stats], t0 + Duration::from_secs(2));
        let t = t0 + Duration::from_secs(4);
        assert_eq!(v.dead(5, &ns, 1, t, limit), BTreeSet::from([3]));
        assert_eq!(v.stats(t, limit).get(&9), Some(&stats));
        v.heard(5, 3, &[], t);
        assert!(v.dead(5, &ns, 1, t, limit).is_empty());
        assert!(v.unheard(&ns, 1).is_empty());
        let later = t0 + Duration::from_secs(6);
        assert_eq!(v.dead(5, &ns, 1, later, limit), BTreeSet::from([2]));
        assert!(v.stats(later, limit).is_empty(), "stale stats are dropped");
        // A new term starts the view over.
        assert!(v.dead(6, &ns, 1, later, limit).is_empty());
        assert_eq!(v.unheard(&ns, 1), BTreeSet::from([2, 3]));
    }
}
