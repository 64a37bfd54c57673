//! The rebalancer's plan: a pure function of the directory's descriptors and node list, the
//! ranges' size and load, and the dead nodes, proposing at most one move.
//!
//! In order of urgency:
//! 0. a voter of the **directory** on a draining, dead or unregistered node: removed if the
//!    directory has more voters than the target, else moved to the lightest active node
//!    lacking one (the directory moves off leaving nodes only, never for balance, and its
//!    replica weighs nothing);
//! 1. a range with more voters than the target (a move interrupted after its promotion):
//!    drop the voter on a draining or dead node, else on the heaviest node (a node not
//!    heard from yet counts as the heaviest);
//! 2. a replica on a draining, dead or unregistered node: move it to the lightest active
//!    node lacking one;
//! 3. balance by **weight**. A range replica weighs
//!    `w(r) = 1 + keys(r) / K + load(r) / L`, where `K` is the mean keys of the ranges
//!    (at least [`KEY_FLOOR`]) and `L` their mean load in operations per second (at least
//!    [`LOAD_FLOOR`]); a range without stats counts as a mean one (its keys and load are
//!    the means of the others). A node weighs the sum over its replicas. For the active
//!    nodes from the heaviest down and the lightest up, the first pair `(A, B)` with
//!    `d = W(A) - W(B)` for which some range on A and not on B has
//!    `|d - 2 w(r)| <= d - MIN_GAIN` is balanced by moving the range with the smallest
//!    `|d - 2 w(r)|` (ties: fewer keys, then lower id) from A to B.
//!
//! **Hysteresis.** A move reduces the pair's difference by at least [`MIN_GAIN`] (one empty
//! range's weight), which is `0 < w < d` with room to spare: it strictly lowers the sum of
//! the squared node weights (by `2 w (d - w)`), so with fixed stats no sequence of planned
//! moves can come back to a placement, and moving `r` back from B to A would make their
//! difference `d` again, larger than after the move: never planned. With no stats at all
//! (every range weighs 1) the balance step moves a replica when the counts differ by more
//! than one, as the count-only rebalancer did. Load fluctuations below about one mean
//! range's load cannot trigger a move by themselves.
//!
//! Active nodes: registered, not draining, not dead, and heard from by the current
//! directory leader (a node it has not heard from yet is neither a target nor weighed: a
//! new leader does not take a node that died before its time for an empty one).

use std::collections::{BTreeMap, BTreeSet};

use crate::load::RangeStats;
use crate::types::{GroupId, NodeId, NodeInfo, RangeDesc};

/// The least key mean `K` of the weight: ranges of a few keys are not told apart.
pub const KEY_FLOOR: f64 = 64.0;
/// The least load mean `L` (operations per second): an idle cluster balances counts.
pub const LOAD_FLOOR: f64 = 10.0;
/// The least reduction of a pair's weight difference worth a move.
pub const MIN_GAIN: f64 = 1.0;

/// One planned move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub group: GroupId,
    pub from: NodeId,
    /// When already a voter (case 1 of the plan), the move only removes `from`.
    pub to: NodeId,
}

/// What the plan knows besides the descriptors and the node list.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub stats: BTreeMap<GroupId, RangeStats>,
    pub dead: BTreeSet<NodeId>,
    /// Nodes the directory leader has not heard from yet (it became leader recently): not
    /// dead, but neither a target nor weighed, until heard from.
    pub unheard: BTreeSet<NodeId>,
    /// The directory group's own descriptor (its voters), if it may move (case 0).
    pub directory: Option<RangeDesc>,
}

/// The weight of each range (see the module doc).
pub fn range_weights(
    descs: &[RangeDesc],
    stats: &BTreeMap<GroupId, RangeStats>,
) -> BTreeMap<GroupId, f64> {
    let known: Vec<&RangeStats> = descs.iter().filter_map(|d| stats.get(&d.id)).collect();
    let n = known.len().max(1) as f64;
    let mean_keys = known.iter().map(|s| s.keys as f64).sum::<f64>() / n;
    let mean_load = known.iter().map(|s| s.load() as f64).sum::<f64>() / n;
    let (k, l) = (mean_keys.max(KEY_FLOOR), mean_load.max(LOAD_FLOOR));
    descs
        .iter()
        .map(|d| {
            let (keys, load) = stats
                .get(&d.id)
                .map_or((mean_keys, mean_load), |s| (s.keys as f64, s.load() as f64));
            (d.id, 1.0 + keys / k + load / l)
        })
        .collect()
}

/// The next move, if any (see the module doc).
pub fn plan(descs: &[RangeDesc], nodes: &[NodeInfo], replicas: usize, view: &View) -> Option<Move> {
    // Leaving: dead, draining, or no longer registered (removed while a move to it was
    // under way, `RangeState::remove_node`).
    let out = |n: NodeId| {
        view.dead.contains(&n) || nodes.iter().find(|i| i.id == n).is_none_or(|i| i.draining)
    };
    let weights = range_weights(descs, &view.stats);
    let mut load: BTreeMap<NodeId, f64> = nodes
        .iter()
        .filter(|n| !out(n.id) && !view.unheard.contains(&n.id))
        .map(|n| (n.id, 0.0))
        .collect();
    for d in descs {
        for n in &d.replicas {
            if let Some(l) = load.get_mut(n) {
                *l += weights[&d.id];
            }
        }
    }
    let lightest = |d: &RangeDesc| {
        load.iter()
            .filter(|(n, _)| !d.replicas.contains(n))
            .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)))
            .map(|(n, _)| *n)
    };
    if let Some(dir) = &view.directory {
        if let Some(from) = dir.replicas.iter().copied().find(|n| out(*n)) {
            let to = if dir.replicas.len() > replicas.max(1) {
                dir.replicas.iter().copied().find(|n| *n != from)
            } else {
                lightest(dir)
            };
            if let Some(to) = to {
                return Some(Move { group: dir.id, from, to });
            }
        }
    }
    let heavier = |a: &NodeId, b: &NodeId| {
        let w = |n: &NodeId| load.get(n).copied().unwrap_or(f64::INFINITY);
        w(a).total_cmp(&w(b)).then(b.cmp(a))
    };
    if let Some(d) = descs.iter().find(|d| d.replicas.len() > replicas.max(1)) {
        let from = d
            .replicas
            .iter()
            .copied()
            .filter(|n| out(*n))
            .min()
            .or_else(|| d.replicas.iter().copied().max_by(heavier))?;
        let to = *d.replicas.iter().find(|n| **n != from)?;
        return Some(Move { group: d.id, from, to });
    }
    for d in descs {
        if let Some(from) = d.replicas.iter().copied().find(|n| out(*n)) {
            if let Some(to) = lightest(d) {
                return Some(Move { group: d.id, from, to });
            }
        }
    }
    let mut order: Vec<NodeId> = load.keys().copied().collect();
    order.sort_by(|a, b| heavier(b, a));
    for (i, &a) in order.iter().enumerate() {
        for &b in order[i + 1..].iter().rev() {
            let d = load[&a] - load[&b];
            if d < MIN_GAIN {
                break;
            }
            let best = descs
                .iter()
                .filter(|r| r.replicas.contains(&a) && !r.replicas.contains(&b))
                .map(|r| ((d - 2.0 * weights[&r.id]).abs(), r))
                .filter(|(after, _)| *after <= d - MIN_GAIN)
                .min_by(|x, y| {
                    let keys = |r: &RangeDesc| view.stats.get(&r.id).map_or(0, |s| s.keys);
                    x.0.total_cmp(&y.0).then(keys(x.1).cmp(&keys(y.1))).then(x.1.id.cmp(&y.1.id))
                });
            if let Some((_, r)) = best {
                return Some(Move { group: r.id, from: a, to: b });
            }
        }
    }
    None
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

    fn stats(list: &[(GroupId, u64, u64)]) -> BTreeMap<GroupId, RangeStats> {
        let s = |&(group, keys, load): &(GroupId, u64, u64)| {
            (group, RangeStats { group, keys, bytes: keys * 40, reads: load, writes: 0 })
        };
        list.iter().map(s).collect()
    }

    fn apply(descs: &mut [RangeDesc], m: &Move) {
        let d = descs.iter_mut().find(|d| d.id == m.group).unwrap();
        d.replicas.remove(&m.from);
        d.replicas.insert(m.to);
    }

    fn count(descs: &[RangeDesc], n: NodeId) -> usize {
        descs.iter().filter(|d| d.replicas.contains(&n)).count()
    }

    #[test]
    fn a_new_node_receives_replicas_until_the_counts_are_even() {
        let mut descs: Vec<RangeDesc> = (1..=4).map(|g| desc(g, &[1, 2, 3])).collect();
        let ns = nodes(&[1, 2, 3, 4], &[]);
        let mut moves = 0;
        while let Some(m) = plan(&descs, &ns, 3, &View::default()) {
            assert_eq!(m.to, 4, "{m:?}");
            apply(&mut descs, &m);
            moves += 1;
            assert!(moves < 10);
        }
        // 12 replicas over 4 nodes: 3 each.
        assert_eq!(moves, 3);
        for n in 1..=4 {
            assert_eq!(count(&descs, n), 3);
        }
    }

    #[test]
    fn a_draining_node_loses_every_replica_and_extra_voters_go_first() {
        let mut descs = vec![desc(1, &[1, 2, 3]), desc(2, &[1, 2, 3, 4]), desc(3, &[2, 3, 4])];
        let ns = nodes(&[1, 2, 3, 4], &[1]);
        let v = View::default();
        let first = plan(&descs, &ns, 3, &v).unwrap();
        assert_eq!(first, Move { group: 2, from: 1, to: 2 });
        descs[1].replicas.remove(&1);
        let second = plan(&descs, &ns, 3, &v).unwrap();
        assert_eq!(second, Move { group: 1, from: 1, to: 4 });
        apply(&mut descs, &second);
        assert_eq!(plan(&descs, &ns, 3, &v), None);
    }

    /// A node removed from the list while a replica on it was not yet reported (a move to
    /// it under way when it was drained): once reported, the replica leaves like a
    /// draining node's.
    #[test]
    fn a_replica_on_a_node_no_longer_registered_is_moved_away() {
        let descs = vec![desc(1, &[1, 2, 5]), desc(2, &[1, 2, 3])];
        let ns = nodes(&[1, 2, 3, 4], &[]);
        assert_eq!(plan(&descs, &ns, 3, &View::default()), Some(Move { group: 1, from: 5, to: 4 }));
    }

    #[test]
    fn nothing_to_do_when_balanced_or_no_target() {
        let descs = vec![desc(1, &[1, 2, 3])];
        let v = View::default();
        assert_eq!(plan(&descs, &nodes(&[1, 2, 3], &[]), 3, &v), None);
        // Draining with no node to take the replica: no move.
        assert_eq!(plan(&descs, &nodes(&[1, 2, 3], &[2]), 3, &v), None);
        // Balanced by size and load (equal ranges, equal counts): no move either.
        let descs: Vec<RangeDesc> =
            (1..=4).map(|g| desc(g, &[1, 2, 3, 4].map(|n| 1 + (n + g) % 4)[..3])).collect();
        let v = View {
            stats: stats(&[(1, 500, 40), (2, 500, 40), (3, 500, 40), (4, 500, 40)]),
            ..View::default()
        };
        assert!((1..=4).all(|n| count(&descs, n) == 3), "{descs:?}");
        assert_eq!(plan(&descs, &nodes(&[1, 2, 3, 4], &[]), 3, &v), None);
    }

    #[test]
    fn a_node_with_a_few_huge_hot_ranges_sheds_one_to_a_node_with_many_tiny_cold_ones() {
        // One replica per range (R = 1), to see the weights alone: node 1 holds two huge hot
        // ranges, node 2 ten tiny cold ones. By counts node 2 is the loaded one.
        let mut descs = vec![desc(1, &[1]), desc(2, &[1])];
        descs.extend((3..=12).map(|g| desc(g, &[2])));
        let mut list = vec![(1, 10_000, 400), (2, 9_000, 300)];
        list.extend((3..=12).map(|g| (g, 20, 0)));
        let v = View { stats: stats(&list), ..View::default() };
        let ns = nodes(&[1, 2], &[]);
        // The count-only plan would move tiny ranges from node 2 to node 1.
        assert_eq!(plan(&descs, &ns, 1, &View::default()).map(|m| m.from), Some(2));
        let m = plan(&descs, &ns, 1, &v).expect("a move");
        assert_eq!((m.from, m.to), (1, 2), "{m:?}");
        assert!(m.group <= 2, "a huge range moves: {m:?}");
        apply(&mut descs, &m);
        // Then only tiny ranges move (back towards node 1, evening the weights out); no huge
        // range moves again, and the plan ends.
        let mut more = 0;
        while let Some(m) = plan(&descs, &ns, 1, &v) {
            assert!(m.group > 2 && m.from == 2, "{m:?}");
            apply(&mut descs, &m);
            more += 1;
            assert!(more <= 10);
        }
        let w = range_weights(&descs, &v.stats);
        let node = |n: NodeId| -> f64 {
            descs.iter().filter(|d| d.replicas.contains(&n)).map(|d| w[&d.id]).sum()
        };
        assert!((node(1) - node(2)).abs() < 2.0 * MIN_GAIN, "{} vs {}", node(1), node(2));
        assert!(count(&descs, 1) > 1 && count(&descs, 2) > 1);
    }

    #[test]
    fn planned_moves_never_flap_and_always_end() {
        // Random-ish clusters: applying each planned move and planning again ends in a few
        // moves, and no range ever returns to a node it left.
        for seed in 0..40u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = |m: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % m
            };
            let n = 3 + next(4);
            let mut descs = Vec::new();
            let mut list = Vec::new();
            for g in 1..=(2 + next(12)) {
                let mut reps = BTreeSet::new();
                while reps.len() < 3 {
                    reps.insert(1 + next(n));
                }
                let mut d = desc(g, &[]);
                d.replicas = reps;
                descs.push(d);
                list.push((g, next(5000), next(3) * next(300)));
            }
            let v = View { stats: stats(&list), ..View::default() };
            let ns = nodes(&(1..=n).collect::<Vec<_>>(), &[]);
            let mut left: BTreeSet<(GroupId, NodeId)> = BTreeSet::new();
            let mut moves = 0;
            while let Some(m) = plan(&descs, &ns, 3, &v) {
                assert!(!left.contains(&(m.group, m.to)), "seed {seed}: {m:?} flaps back");
                left.insert((m.group, m.from));
                apply(&mut descs, &m);
                moves += 1;
                assert!(moves <= 3 * descs.len(), "seed {seed}: no end");
            }
        }
    }

    #[test]
    fn the_directory_moves_off_leaving_nodes_only_and_first() {
        let descs = vec![desc(1, &[1, 2, 3]), desc(2, &[2, 3, 4])];
        let dir = desc(0, &[1, 2, 3]);
        let with = |dead: &[NodeId]| View {
            directory: Some(dir.clone()),
            dead: dead.iter().copied().collect(),
            ..View::default()
        };
        // Unbalanced by counts (node 5 empty), but only ranges move for balance.
        let ns = nodes(&[1, 2, 3, 4, 5], &[]);
        let m = plan(&descs, &ns, 3, &with(&[])).expect("a balancing move");
        assert_ne!(m.group, 0, "{m:?}");
        // A draining directory member: its directory replica moves first, to the lightest
        // node lacking one (node 5, empty), before the range replicas on it.
        let draining = nodes(&[1, 2, 3, 4, 5], &[2]);
        assert_eq!(plan(&descs, &draining, 3, &with(&[])), Some(Move { group: 0, from: 2, to: 5 }));
        // Dead, likewise; and unregistered (removed while a replica was being added).
        assert_eq!(plan(&descs, &ns, 3, &with(&[3])), Some(Move { group: 0, from: 3, to: 5 }));
        let without_1 = nodes(&[2, 3, 4, 5], &[]);
        assert_eq!(plan(&descs, &without_1, 3, &with(&[])).map(|m| m.group), Some(0));
        // More voters than the target (bootstrapped on 5 nodes, or a move cut short after
        // its promotion): the leaving voter is only removed.
        let five = View { directory: Some(desc(0, &[1, 2, 3, 4, 5])), ..View::default() };
        assert_eq!(plan(&descs, &draining, 3, &five), Some(Move { group: 0, from: 2, to: 1 }));
        // Nowhere to go (every active node holds one): the ranges' moves go on.
        let three = nodes(&[1, 2, 3], &[3]);
        let m = plan(&[desc(1, &[1, 2, 3])], &three, 3, &with(&[]));
        assert_eq!(m, None);
        // No directory in the view (as before): nothing of it is planned.
        assert_eq!(plan(&descs, &draining, 3, &View::default()).map(|m| m.group), Some(1));
    }

    #[test]
    fn a_dead_node_is_treated_as_draining_and_a_target_again_when_alive() {
        let mut descs = vec![desc(1, &[1, 2, 3]), desc(2, &[1, 2, 3]), desc(3, &[2, 3, 4])];
        let ns = nodes(&[1, 2, 3, 4], &[]);
        let dead = View { dead: BTreeSet::from([3]), ..View::default() };
        let mut moves = Vec::new();
        while let Some(m) = plan(&descs, &ns, 3, &dead) {
            assert_eq!(m.from, 3, "{m:?}");
            assert_ne!(m.to, 3);
            apply(&mut descs, &m);
            moves.push(m);
            assert!(moves.len() < 10);
        }
        assert_eq!(moves.len(), 3, "{moves:?}");
        assert!(descs.iter().all(|d| d.replicas.len() == 3 && !d.replicas.contains(&3)));
        // Alive again, node 3 (now empty) receives replicas back by balance.
        let m = plan(&descs, &ns, 3, &View::default()).expect("a move to node 3");
        assert_eq!(m.to, 3);
        // Not heard from yet (a new directory leader): not a target, not a source.
        let unheard = View { unheard: BTreeSet::from([3]), ..View::default() };
        assert_eq!(plan(&descs, &ns, 3, &unheard), None);
        // A dead voter is dropped first from a range with an extra voter.
        let four = vec![desc(1, &[1, 2, 3, 4])];
        assert_eq!(plan(&four, &ns, 3, &dead), Some(Move { group: 1, from: 3, to: 1 }));
    }
}
