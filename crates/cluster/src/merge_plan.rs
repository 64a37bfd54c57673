//! The merge planner, on the directory leader's node (like the rebalancer): which two
//! neighbouring ranges to merge, from the directory's descriptors and the ranges' stats
//! (section 8.2 of `docs/cluster.md`), one merge at a time.
//!
//! A pair `L = [a, b)`, `R = [b, c)` qualifies when both have the same voters and no
//! learners (no move under way), both have stats, and each holds at most `merge_keys` keys
//! and serves at most `merge_load` operations per second over its load window. Of the
//! qualifying pairs, the one with the fewest keys together is planned (ties: lower left
//! start key). The same pair (same groups at the same versions) must be planned on
//! [`MERGE_ROUNDS`] report rounds in a row before it is merged: a range must stay small and
//! cold for a while, and a split or merge under way (which changes a version) starts the
//! count over. Off unless `LoadOptions::merge_keys` is set.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::consensus::Consensus;
use crate::load::RangeStats;
use crate::msg::ClientReply;
use crate::node::Node;
use crate::types::{GroupId, RangeDesc, DIRECTORY_GROUP};

/// Consecutive report rounds (every fourth tick) a pair must be planned in.
pub const MERGE_ROUNDS: u32 = 3;

/// The planner's memory on the directory leader's node.
#[derive(Debug, Default)]
pub struct PlanState {
    /// The pair last planned (ids and versions) and the rounds in a row it was.
    candidate: Option<([(GroupId, u64); 2], u32)>,
    /// A planned merge is under way.
    running: bool,
    /// Set by [`Node::hold_merges`]: leaders do not drive frozen ranges on their ticks.
    held: bool,
}

/// The pair to merge now, if any (see the module doc); `descs` in any order.
pub fn plan_merge(
    descs: &[RangeDesc],
    stats: &BTreeMap<GroupId, RangeStats>,
    merge_keys: u64,
    merge_load: u64,
) -> Option<(RangeDesc, RangeDesc)> {
    let mut descs = descs.to_vec();
    descs.sort_by(|a, b| a.start.cmp(&b.start));
    let small = |d: &RangeDesc| {
        stats.get(&d.id).is_some_and(|s| s.keys <= merge_keys && s.load() <= merge_load)
    };
    descs
        .windows(2)
        .filter(|w| {
            let (l, r) = (&w[0], &w[1]);
            !l.end.is_empty()
                && l.end == r.start
                && l.replicas == r.replicas
                && l.learners.is_empty()
                && r.learners.is_empty()
                && small(l)
                && small(r)
        })
        .min_by_key(|w| stats[&w[0].id].keys + stats[&w[1].id].keys)
        .map(|w| (w[0].clone(), w[1].clone()))
}

impl Node {
    /// Fault injection for crash tests: while held, this node's ticks neither plan merges
    /// nor finish the merges of the frozen ranges it leads (a test drives each step).
    pub fn hold_merges(&self, held: bool) {
        self.merge_plan.lock().expect("not poisoned").held = held;
    }

    /// A merge the planner started is under way (the rebalancer waits for it).
    pub(crate) fn merge_running(&self) -> bool {
        self.merge_plan.lock().expect("not poisoned").running
    }

    pub(crate) fn merges_held(&self) -> bool {
        self.merge_plan.lock().expect("not poisoned").held
    }

    /// On the directory leader with merges on: one round of planning; a pair planned
    /// [`MERGE_ROUNDS`] rounds in a row is merged by a spawned task (one at a time).
    pub(crate) fn maybe_merge(&self) {
        let merge_keys = self.opts.load.merge_keys;
        if merge_keys == 0 || self.merges_held() {
            return;
        }
        let Some(dir) = self.group(DIRECTORY_GROUP) else { return };
        if dir.leader() != Some(self.id) || self.rebalancing.load(Ordering::SeqCst) {
            return;
        }
        let (descs, nodes) = {
            let s = dir.sm.shared.lock().expect("not poisoned");
            (s.state.descriptors(), s.state.nodes())
        };
        let stats = self.directory_view(&nodes).stats;
        let pair = plan_merge(&descs, &stats, merge_keys, self.opts.load.merge_load);
        let mut plan = self.merge_plan.lock().expect("not poisoned");
        if plan.running {
            return;
        }
        let Some((left, right)) = pair else {
            plan.candidate = None;
            return;
        };
        let key = [(left.id, left.epoch.version), (right.id, right.epoch.version)];
        let rounds = match plan.candidate {
            Some((k, n)) if k == key => n + 1,
            _ => 1,
        };
        plan.candidate = Some((key, rounds));
        if rounds < MERGE_ROUNDS {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        plan.running = true;
        plan.candidate = None;
        let task = tokio::spawn(async move {
            let reply = me.request_merge(&left, &right).await;
            if !matches!(reply, ClientReply::Merged(_)) {
                eprintln!("node {}: merge of {} into {}: {reply:?}", me.id, right.id, left.id);
            }
            me.merge_plan.lock().expect("not poisoned").running = false;
        });
        self.keep_task(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(id: GroupId, start: &str, end: &str, replicas: &[u64]) -> RangeDesc {
        let mut d = RangeDesc::whole(id, replicas.iter().copied().collect());
        d.start = start.as_bytes().to_vec();
        d.end = end.as_bytes().to_vec();
        d
    }

    fn stats(list: &[(GroupId, u64, u64)]) -> BTreeMap<GroupId, RangeStats> {
        list.iter()
            .map(|&(group, keys, reads)| {
                (group, RangeStats { group, keys, reads, ..Default::default() })
            })
            .collect()
    }

    #[test]
    fn the_smallest_cold_neighbours_on_the_same_voters_are_planned() {
        let descs = vec![
            desc(3, "m", "t", &[1, 2, 3]),
            desc(1, "", "f", &[1, 2, 3]),
            desc(2, "f", "m", &[1, 2, 3]),
            desc(4, "t", "", &[1, 2, 3]),
        ];
        let s = stats(&[(1, 10, 0), (2, 5, 0), (3, 4, 0), (4, 100, 0)]);
        let (l, r) = plan_merge(&descs, &s, 20, 1).unwrap();
        assert_eq!((l.id, r.id), (2, 3));
        // Too many keys, or too hot: not planned.
        assert_eq!(plan_merge(&descs, &s, 3, 1), None);
        let hot = stats(&[(1, 10, 50), (2, 5, 50), (3, 4, 50), (4, 100, 0)]);
        assert_eq!(plan_merge(&descs, &hot, 20, 1), None);
        // No stats for a range: not planned with it.
        let partial = stats(&[(1, 10, 0), (2, 5, 0)]);
        assert_eq!(plan_merge(&descs, &partial, 20, 1).map(|(l, r)| (l.id, r.id)), Some((1, 2)));
    }

    #[test]
    fn other_voters_learners_or_a_gap_prevent_a_merge() {
        let s = stats(&[(1, 1, 0), (2, 1, 0)]);
        let other = vec![desc(1, "", "f", &[1, 2, 3]), desc(2, "f", "", &[1, 2, 4])];
        assert_eq!(plan_merge(&other, &s, 20, 1), None);
        let mut moving = vec![desc(1, "", "f", &[1, 2, 3]), desc(2, "f", "", &[1, 2, 3])];
        moving[1].learners.insert(4);
        assert_eq!(plan_merge(&moving, &s, 20, 1), None);
        let gap = vec![desc(1, "", "e", &[1, 2, 3]), desc(2, "f", "", &[1, 2, 3])];
        assert_eq!(plan_merge(&gap, &s, 20, 1), None);
        let ok = vec![desc(1, "", "f", &[1, 2, 3]), desc(2, "f", "", &[1, 2, 3])];
        assert!(plan_merge(&ok, &s, 20, 1).is_some());
    }
}
