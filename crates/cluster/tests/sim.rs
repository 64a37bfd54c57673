//! Simulated clusters under faults, with splits: invariants hold and histories pass the
//! reads-from-writes check (the full linearizability check runs in lab/lincheck).

use bavl_cluster::history::{reads_from_writes, write_jsonl};
use bavl_cluster::sim::{run, SimOptions, SimReport};
use bavl_cluster::simnet::Faults;

fn options(seed: u64, dir: &std::path::Path, crashes: bool) -> SimOptions {
    SimOptions {
        seed,
        nodes: 3,
        clients: 4,
        ops: 150,
        keys: 300,
        split_keys: 60,
        capacity: 8,
        faults: Faults { loss: if crashes { 0.02 } else { 0.0 }, max_delay_ms: 5 },
        crashes,
        dir: dir.to_path_buf(),
        no_cache: false,
    }
}

fn assert_sound(r: &SimReport, label: &str) {
    assert!(r.violations.is_empty(), "{label}: violations: {:#?}", r.violations);
    let bad = reads_from_writes(&r.history);
    assert!(bad.is_empty(), "{label}: reads of values never written: {bad:#?}");
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
