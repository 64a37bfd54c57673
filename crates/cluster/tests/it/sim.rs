//! Simulated clusters under faults, with splits: invariants hold and histories pass the
//! reads-from-writes check (the full linearizability check runs in lab/lincheck).

use bavl_cluster::history::{reads_from_writes, write_jsonl};
use bavl_cluster::lincheck;
use bavl_cluster::load::LoadOptions;
use bavl_cluster::sim::{run, SimOptions, SimReport};
use bavl_cluster::simnet::Faults;

fn options(seed: u64, dir: &std::path::Path, crashes: bool) -> SimOptions {
    // BAVL_CLUSTER_OPS=n: operations per client (a longer run; the default is a smoke run).
    let ops = std::env::var("BAVL_CLUSTER_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    // BAVL_CLUSTER_SNAPSHOT_EVERY=n: snapshots more often (more snapshot fetches).
    let every = std::env::var("BAVL_CLUSTER_SNAPSHOT_EVERY").ok().and_then(|s| s.parse().ok());
    SimOptions {
        snapshot_every: every.unwrap_or(500),
        clients: 4,
        ops,
        keys: 300,
        faults: Faults { loss: if crashes { 0.02 } else { 0.0 }, max_delay_ms: 5 },
        crashes,
        ..SimOptions::new(seed, dir)
    }
}

/// `VAR=first..last` runs a longer sweep than a test's default seeds.
fn seeds_from_env(var: &str) -> Option<std::ops::Range<u64>> {
    let s = std::env::var(var).ok()?;
    let (a, b) = s.split_once("..")?;
    Some(a.parse().ok()?..b.parse().ok()?)
}

fn assert_sound(r: &SimReport, label: &str) {
    assert!(r.violations.is_empty(), "{label}: violations: {:#?}", r.violations);
    let bad = reads_from_writes(&r.history);
    assert!(bad.is_empty(), "{label}: reads of values never written: {bad:#?}");
    let verdict = lincheck::check(&r.history);
    assert!(
        verdict.violations.is_empty(),
        "{label}: not linearizable on keys {:?}",
        verdict.violations
    );
    assert!(verdict.undecided.is_empty(), "{label}: undecided keys {:?}", verdict.undecided);
    let done = r.history.iter().filter(|o| o.ret.is_some()).count();
    assert!(done > 100, "{label}: only {done} operations completed");
}

#[test]
fn quiet_network_splits_and_stays_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(options(1, dir.path(), false));
    eprintln!("ranges {} stats {:?} messages {}", r.ranges.len(), r.stats, r.messages);
    assert_sound(&r, "quiet");
    assert!(r.ranges.len() >= 2, "no split happened: {:?}", r.ranges);
    if let Ok(path) = std::env::var("BAVL_CLUSTER_HISTORY") {
        let mut f = std::fs::File::create(path).unwrap();
        write_jsonl(&r.history, &mut f).unwrap();
    }
}

#[test]
fn faults_crashes_and_partitions_keep_the_invariants() {
    // BAVL_CLUSTER_SEEDS=first..last runs a longer sweep (the default is a smoke run).
    let seeds = seeds_from_env("BAVL_CLUSTER_SEEDS");
    for seed in seeds.unwrap_or(7..10) {
        let dir = tempfile::tempdir().unwrap();
        let r = run(options(seed, dir.path(), true));
        eprintln!(
            "seed {seed}: ranges {} faults {} unknown {} stats {:?} messages {}",
            r.ranges.len(),
            r.faults_injected,
            r.unknown,
            r.stats,
            r.messages
        );
        assert_sound(&r, &format!("seed {seed}"));
        assert!(r.faults_injected > 0, "seed {seed}: no fault injected");
    }
}

#[test]
fn leaders_cut_from_their_peers_keep_reads_linearizable() {
    // A third of the faults cut a node's Raft messages only: a leader so cut still answers
    // the clients that reach it, from its lease (docs/cluster.md §6), while the others
    // elect a leader and write. A lease longer than the election timeout fails this test
    // (checked: 8x the election timeout failed; see docs/cluster.md §11).
    let seeds = seeds_from_env("BAVL_CLUSTER_CUT_SEEDS");
    for seed in seeds.unwrap_or(20..23) {
        let dir = tempfile::tempdir().unwrap();
        let r = run(SimOptions { peer_cuts: true, ..options(seed, dir.path(), true) });
        eprintln!(
            "seed {seed}: ranges {} faults {} unknown {} stats {:?}",
            r.ranges.len(),
            r.faults_injected,
            r.unknown,
            r.stats
        );
        assert_sound(&r, &format!("seed {seed}"));
    }
}

#[test]
fn injected_stale_reads_are_caught() {
    let mut caught = 0;
    for seed in [11, 12, 13] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options(seed, dir.path(), false);
        o.inject_stale_reads = true;
        o.keys = 20;
        o.faults.max_delay_ms = 20;
        let r = run(o);
        let v = lincheck::check(&r.history);
        eprintln!(
            "seed {seed}: {} keys not linearizable of {}",
            v.violations.len(),
            v.keys_checked
        );
        caught += usize::from(!v.violations.is_empty());
    }
    assert!(caught > 0, "stale reads went unnoticed on every seed");
}

#[test]
fn a_node_cut_off_during_splits_catches_up_by_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(21, dir.path(), false);
    o.lagging_node = true;
    o.snapshot_every = 40;
    let r = run(o);
    eprintln!("lagging: ranges {} stats {:?}", r.ranges.len(), r.stats);
    assert_sound(&r, "lagging node");
    assert!(r.ranges.len() >= 3, "too few splits to test: {:?}", r.ranges);
}

#[test]
fn without_a_cache_every_request_asks_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(31, dir.path(), false);
    o.no_cache = true;
    let r = run(o);
    assert_sound(&r, "no cache");
    assert!(r.stats.directory_lookups >= r.stats.ops, "{:?}", r.stats);
    let dir = tempfile::tempdir().unwrap();
    let cached = run(options(31, dir.path(), false));
    assert!(
        cached.stats.directory_lookups * 10 < r.stats.directory_lookups,
        "{:?} vs {:?}",
        cached.stats,
        r.stats
    );
}

#[test]
fn random_moves_under_faults_keep_the_invariants() {
    // A fourth node: every range can move; crashes, partitions and loss as above.
    let seeds = seeds_from_env("BAVL_CLUSTER_MOVE_SEEDS");
    let mut moved = 0;
    for seed in seeds.unwrap_or(41..43) {
        let dir = tempfile::tempdir().unwrap();
        let o = SimOptions { nodes: 4, moves: true, ..options(seed, dir.path(), true) };
        let r = run(o);
        eprintln!(
            "seed {seed}: ranges {} faults {} moves {}/{} ({} of the directory) unknown {} \
             fetches {} ({} multi-source, {} failed) stats {:?}",
            r.ranges.len(),
            r.faults_injected,
            r.moves_done,
            r.moves_tried,
            r.directory_moves,
            r.unknown,
            r.fetches,
            r.fetches_multi_source,
            r.fetches_failed,
            r.stats
        );
        assert_sound(&r, &format!("moves, seed {seed}"));
        moved += r.moves_done;
        // BAVL_CLUSTER_MOVES_HISTORY=path: the last seed's history, for lab/lincheck.
        if let Ok(path) = std::env::var("BAVL_CLUSTER_MOVES_HISTORY") {
            let mut f = std::fs::File::create(path).unwrap();
            write_jsonl(&r.history, &mut f).unwrap();
        }
    }
    assert!(moved > 0, "no move completed");
}

/// Nodes `kills` stop for good, one after the other (each once the one before is
/// forgotten); every range and the directory end on 3 replicas, none on a stopped node.
fn dead_nodes(seeds: std::ops::Range<u64>, nodes: u64, kills: &[(u64, u64)]) -> usize {
    let mut ranges = 0;
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        // BAVL_CLUSTER_DEAD_FAULTS=1: crashes, partitions and loss too (never of a victim).
        let faults = std::env::var_os("BAVL_CLUSTER_DEAD_FAULTS").is_some();
        let mut o = SimOptions { nodes, rebalance: true, ..options(seed, dir.path(), faults) };
        o.kills = kills.to_vec();
        o.load.dead_ticks = 10;
        let r = run(o);
        eprintln!(
            "dead nodes {kills:?}, seed {seed}: ranges {} directory {:?} unknown {} stats {:?}",
            r.ranges.len(),
            r.directory.as_ref().map(|d| &d.replicas),
            r.unknown,
            r.stats
        );
        assert_sound(&r, &format!("dead nodes, seed {seed}"));
        let directory = r.directory.clone().expect("a live directory replica");
        for d in r.ranges.iter().chain([&directory]) {
            assert_eq!(d.replicas.len(), 3, "seed {seed}: {d:?}");
            assert!(kills.iter().all(|(k, _)| !d.replicas.contains(k)), "seed {seed}: {d:?}");
        }
        // Served after the last death: every final read (one per key) at least.
        let last = r.killed_at.last().expect("the victims were stopped").1;
        let after = r.history.iter().filter(|o| o.ret.is_some() && o.call > last).count();
        assert!(after as u64 >= o_keys(), "seed {seed}: {after} operations after the last death");
        ranges += r.ranges.len();
    }
    ranges
}

/// Keys of the options above (each read once at the end of a run).
fn o_keys() -> u64 {
    options(0, std::path::Path::new("."), false).keys
}

#[test]
fn a_dead_node_is_replaced_and_its_ranges_re_replicated() {
    // Four nodes, three replicas per range; node 3 (a bootstrap member, holding a replica
    // of every range and of the directory) stops for good 1.5 s into the workload. The
    // directory leader counts it dead after 10 ticks (2 s) of silence, and the rebalancer
    // re-creates each of its replicas elsewhere, the directory's first, one move at a time,
    // while the clients run. BAVL_CLUSTER_DEAD_SEEDS=first..last runs a sweep.
    let seeds = seeds_from_env("BAVL_CLUSTER_DEAD_SEEDS");
    let ranges = dead_nodes(seeds.unwrap_or(51..53), 4, &[(3, 1500)]);
    assert!(ranges >= 4, "too few ranges to say much");
}

#[test]
fn two_directory_members_die_one_after_the_other_and_the_cluster_serves_on() {
    // Five nodes; nodes 3 and then 2, both bootstrap members of the directory and of the
    // first range, stop for good (node 2 once nothing names node 3 any more). With the
    // directory's replicas fixed, the second death left the directory without a quorum
    // (1 of 3) and the cluster without routing, moves or splits; re-created elsewhere
    // after the first, the directory and every range keep a quorum and end on nodes 1, 4
    // and 5. The clients know only nodes 1-3, so after the second death every directory
    // request they send goes to node 1 (or through it, if the directory left it).
    // BAVL_CLUSTER_DEAD2_SEEDS=first..last runs a sweep.
    let seeds = seeds_from_env("BAVL_CLUSTER_DEAD2_SEEDS");
    let ranges = dead_nodes(seeds.unwrap_or(81..82), 5, &[(3, 1500), (2, 500)]);
    assert!(ranges >= 2, "too few ranges to say much");
}

#[test]
fn merges_and_splits_under_faults_keep_the_invariants() {
    // Ranges split above 60 keys and neighbours of at most 45 keys each merge (load
    // ignored), so ranges split and merge back over and over, under crashes, partitions
    // and loss. BAVL_CLUSTER_MERGE_SEEDS=a..b runs a sweep.
    let seeds = seeds_from_env("BAVL_CLUSTER_MERGE_SEEDS");
    let (mut merges, mut refused) = (0, 0);
    for seed in seeds.unwrap_or(61..65) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options(seed, dir.path(), true);
        o.ops = o.ops.max(400);
        o.load = LoadOptions { merge_keys: 45, merge_load: u64::MAX, ..LoadOptions::default() };
        let r = run(o);
        eprintln!(
            "seed {seed}: ranges {} faults {} merges {} refused {} unknown {} stats {:?}",
            r.ranges.len(),
            r.faults_injected,
            r.merges,
            r.merges_refused,
            r.unknown,
            r.stats
        );
        assert_sound(&r, &format!("seed {seed}"));
        merges += r.merges;
        refused += r.merges_refused;
    }
    eprintln!("merges {merges}, refused {refused}");
    assert!(merges > 0, "no merge happened");
}

#[test]
fn merges_with_random_moves_under_faults_keep_the_invariants() {
    // The merge test's settings with a fourth node and the random mover of the moves test:
    // merges and moves of the same ranges interleave. BAVL_CLUSTER_MERGE_MOVE_SEEDS=a..b.
    let seeds = seeds_from_env("BAVL_CLUSTER_MERGE_MOVE_SEEDS");
    let (mut merges, mut moves) = (0, 0);
    for seed in seeds.unwrap_or(71..77) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = SimOptions { nodes: 4, moves: true, ..options(seed, dir.path(), true) };
        o.ops = o.ops.max(400);
        o.load = LoadOptions { merge_keys: 45, merge_load: u64::MAX, ..LoadOptions::default() };
        let r = run(o);
        eprintln!(
            "seed {seed}: ranges {} faults {} merges {} refused {} moves {}/{} unknown {}",
            r.ranges.len(),
            r.faults_injected,
            r.merges,
            r.merges_refused,
            r.moves_done,
            r.moves_tried,
            r.unknown
        );
        assert_sound(&r, &format!("seed {seed}"));
        merges += r.merges;
        moves += r.moves_done;
    }
    assert!(merges > 0 && moves > 0, "merges {merges} moves {moves}");
}
