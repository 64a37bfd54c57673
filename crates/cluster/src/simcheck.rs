//! The simulation's invariant checks and its fault schedule (see [`crate::sim`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

use crate::node::Node;
use crate::sim::{node_options, SimOptions, SimReport};
use crate::simnet::SimNet;
use crate::types::{GroupId, NodeId, RangeDesc, DIRECTORY_GROUP};

/// The newest descriptor of every range group among the live replicas, without those a
/// descriptor of another group at a higher version overlaps (a range merged away whose
/// replicas are not retired yet: versions grow along every key's history).
pub fn newest_descs(net: &SimNet) -> BTreeMap<GroupId, RangeDesc> {
    let all = newest_per_group(net);
    let superseded = |d: &RangeDesc| {
        all.values().any(|h| {
            h.id != d.id && crate::range::overlap(h, d) && h.epoch.version > d.epoch.version
        })
    };
    all.iter().filter(|(_, d)| !superseded(d)).map(|(g, d)| (*g, d.clone())).collect()
}

/// The newest descriptor (highest `conf_ver`) of the directory group among its live
/// replicas that applied anything.
pub fn newest_directory(net: &SimNet) -> Option<RangeDesc> {
    let live = net.live();
    let replicas = live.iter().filter_map(|n| n.group(DIRECTORY_GROUP));
    let applied = replicas.filter(|g| g.sm.shared.lock().expect("ok").last_applied.is_some());
    applied.map(|g| g.sm.desc()).max_by_key(|d| d.epoch.conf_ver)
}

/// Whether the newest descriptors (of the ranges and of the directory) name `node`.
pub fn named(net: &SimNet, node: NodeId) -> Vec<RangeDesc> {
    let mut all: Vec<RangeDesc> = newest_descs(net).into_values().collect();
    all.extend(newest_directory(net));
    all.retain(|d| d.replicas.contains(&node) || d.learners.contains(&node));
    all
}

fn newest_per_group(net: &SimNet) -> BTreeMap<GroupId, RangeDesc> {
    let mut newest: BTreeMap<GroupId, RangeDesc> = BTreeMap::new();
    for node in net.live() {
        for g in node.groups() {
            let d = g.sm.desc();
            let empty = g.sm.shared.lock().expect("not poisoned").last_applied.is_none();
            if d.id == DIRECTORY_GROUP || empty {
                continue;
            }
            let newer = match newest.get(&d.id) {
                None => true,
                Some(h) => {
                    (d.epoch.version, d.epoch.conf_ver) > (h.epoch.version, h.epoch.conf_ver)
                }
            };
            if newer {
                newest.insert(d.id, d);
            }
        }
    }
    newest
}

/// Where the newest descriptors fail to tile the key space: `(overlaps, gaps)`.
pub fn tiling(descs: &[RangeDesc]) -> (Vec<String>, Vec<String>) {
    let mut descs = descs.to_vec();
    descs.sort_by(|a, b| a.start.cmp(&b.start));
    let (mut overlaps, mut gaps) = (Vec::new(), Vec::new());
    let mut expect: Vec<u8> = Vec::new();
    for (i, d) in descs.iter().enumerate() {
        if i > 0 && (d.start < expect || descs[i - 1].end.is_empty()) {
            overlaps.push(format!(
                "group {} starts at {} before the previous range ends",
                d.id,
                hex::encode(&d.start)
            ));
        } else if d.start != expect {
            gaps.push(format!("gap [{}, {})", hex::encode(&expect), hex::encode(&d.start)));
        }
        expect.clone_from(&d.end);
    }
    if descs.is_empty() {
        gaps.push("no range at all".into());
    } else if !expect.is_empty() {
        gaps.push(format!("gap from {} to the end", hex::encode(&expect)));
    }
    (overlaps, gaps)
}

/// One round of checks; `gaps` counts, per gap, the consecutive rounds it was seen in.
pub async fn check(net: &SimNet, gaps: &mut HashMap<String, u32>) -> Vec<String> {
    let descs: Vec<RangeDesc> = newest_descs(net).into_values().collect();
    let (mut out, seen) = tiling(&descs);
    let mut next = HashMap::new();
    for g in seen {
        let n = gaps.get(&g).copied().unwrap_or(0) + 1;
        if n >= 3 {
            out.push(format!("{g} persisted over {n} checks"));
        }
        next.insert(g, n);
    }
    *gaps = next;
    out.extend(check_roots(net));
    out
}

fn check_roots(net: &SimNet) -> Vec<String> {
    type Seen = ([u8; 32], u64, String);
    let mut roots: HashMap<(GroupId, u64), Seen> = HashMap::new();
    let mut out = Vec::new();
    for node in net.live() {
        for g in node.groups() {
            let mut s = g.sm.shared.lock().expect("not poisoned");
            let Some(applied) = s.last_applied else { continue };
            let root = s.state.tree.root_hash();
            let id = s.state.desc.id;
            let d = &s.state.desc;
            let what = format!(
                "log id {applied}, epoch {:?}, voters {:?}, learners {:?}, keys {}",
                d.epoch,
                d.replicas,
                d.learners,
                s.state.tree.len()
            );
            match roots.get(&(id, applied.index)) {
                Some((r, other, theirs)) if *r != root => out.push(format!(
                    "group {id} at index {}: node {} ({what}) and node {other} ({theirs}) hold different roots",
                    applied.index, node.id
                )),
                _ => {
                    roots.insert((id, applied.index), (root, node.id, what));
                }
            }
        }
    }
    out
}

/// Checks every 100 ms of virtual time until aborted.
pub(crate) async fn check_loop(net: Arc<SimNet>, report: Arc<Mutex<SimReport>>) {
    let mut gaps = HashMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let v = check(&net, &mut gaps).await;
        report.lock().expect("not poisoned").violations.extend(v);
    }
}

/// Isolates or crashes one node at a time (or, with `peer_cuts`, cuts it from its peers
/// only), then heals or restarts it, until `done`.
pub(crate) async fn chaos(
    net: Arc<SimNet>,
    opts: SimOptions,
    report: Arc<Mutex<SimReport>>,
    done: Arc<AtomicBool>,
) {
    while !done.load(Ordering::SeqCst) {
        let (pause, victim, crash, down) = net.draw(|r| {
            (
                r.gen_range(300..1500),
                r.gen_range(1..=opts.nodes),
                r.gen_bool(0.5),
                r.gen_range(300..2000),
            )
        });
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if opts.kills.iter().any(|(k, _)| *k == victim) {
            continue; // stopped for good by the run, never restarted here
        }
        report.lock().expect("not poisoned").faults_injected += 1;
        if opts.peer_cuts && net.draw(|r| r.gen_bool(1.0 / 3.0)) {
            net.cut_from_peers(victim, true);
            tokio::time::sleep(Duration::from_millis(down)).await;
            net.cut_from_peers(victim, false);
        } else if crash {
            let Some(node) = net.detach(victim) else { continue };
            node.shutdown().await;
            tokio::time::sleep(Duration::from_millis(down)).await;
            let node = Node::open(victim, node_options(&opts, victim), net.clone())
                .await
                .expect("node reopens");
            net.attach(node);
        } else {
            net.isolate(victim, true);
            tokio::time::sleep(Duration::from_millis(down)).await;
            net.isolate(victim, false);
        }
    }
}

/// Moves a random replica of a random group (a range, or the directory) to a random other
/// node, one move at a time, every 0.5-2 s (virtual), until `done`; a move is abandoned
/// after 10 s.
pub(crate) async fn mover(
    net: Arc<SimNet>,
    opts: SimOptions,
    report: Arc<Mutex<SimReport>>,
    done: Arc<AtomicBool>,
) {
    while !done.load(Ordering::SeqCst) {
        let (pause, pick) = net.draw(|r| (r.gen_range(500..2000), r.gen::<u64>()));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let mut descs: Vec<RangeDesc> = newest_descs(&net).into_values().collect();
        descs.extend(newest_directory(&net));
        let Some(d) = descs.get(pick as usize % descs.len().max(1)) else { continue };
        let voters: Vec<NodeId> = d.replicas.iter().copied().collect();
        let targets: Vec<NodeId> = (1..=opts.nodes).filter(|n| !d.replicas.contains(n)).collect();
        if voters.is_empty() || targets.is_empty() {
            continue;
        }
        let from = voters[(pick >> 16) as usize % voters.len()];
        let to = targets[(pick >> 32) as usize % targets.len()];
        let leader = net.live().into_iter().find(|n| {
            n.group(d.id).is_some_and(|g| crate::consensus::Consensus::leader(&g) == Some(n.id))
        });
        let Some(leader) = leader else { continue };
        report.lock().expect("not poisoned").moves_tried += 1;
        let moved =
            tokio::time::timeout(Duration::from_secs(10), leader.move_replica(d.id, from, to))
                .await;
        if matches!(moved, Ok(Ok(_))) {
            let mut r = report.lock().expect("not poisoned");
            r.moves_done += 1;
            r.directory_moves += u64::from(d.id == DIRECTORY_GROUP);
        }
    }
}

/// Whether every replica named by the newest descriptors (the directory's too) hosts its
/// group at one applied index with one root.
fn converged(net: &SimNet) -> Result<(), String> {
    let mut descs: Vec<RangeDesc> = newest_descs(net).into_values().collect();
    descs.extend(newest_directory(net));
    for d in &descs {
        let mut states = Vec::new();
        let mut seen = Vec::new();
        for n in &d.replicas {
            let Some(g) = net.node(*n).and_then(|node| node.group(d.id)) else {
                return Err(format!("group {} has no replica on node {n}", d.id));
            };
            let m = g.raft.metrics().borrow().clone();
            let mut s = g.sm.shared.lock().expect("not poisoned");
            let root = s.state.tree.root_hash();
            states.push((s.last_applied.map(|l| l.index), root));
            // What a failed convergence says of each replica, to tell why it lags.
            seen.push(format!(
                "node {n}: applied {:?} root {} {:?} term {} leader {:?} last log {:?} \
                 snapshot {:?} purged {:?} membership {:?} running {} replication {:?}",
                s.last_applied.map(|l| l.index),
                hex::encode(&root[..4]),
                m.state,
                m.current_term,
                m.current_leader,
                m.last_log_index,
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index),
                m.membership_config.membership(),
                m.running_state.is_ok(),
                m.replication,
            ));
        }
        if states.windows(2).any(|w| w[0] != w[1]) {
            return Err(format!("group {} {:?} replicas differ: {seen:#?}", d.id, d.epoch));
        }
    }
    Ok(())
}

/// Waits (virtual time) until [`converged`] holds, or says why it did not within `limit`.
pub(crate) async fn converge(net: &SimNet, limit: Duration) -> Result<(), String> {
    let start = tokio::time::Instant::now();
    loop {
        match converged(net) {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > limit => {
                return Err(format!("no convergence after {limit:?}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
