//! Merges of neighbouring ranges on a simulated 3-node cluster: a merge while clients
//! write and read both ranges (every read checked), a merge refused by the left range's
//! log and rolled back, and merges planned by the directory leader once ranges are small.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bavl_cluster::client::{ClientError, ClientOptions};
use bavl_cluster::load::LoadOptions;
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::types::{BatchOp, RangeDesc};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// A cluster whose one range holds keys `0..n` and was split in two (no automatic split).
async fn two_ranges(dir: &std::path::Path, n: u32) -> (SimCluster, RangeDesc, RangeDesc) {
    let opts = SimOptions { split_keys: u64::MAX, ..SimOptions::new(7, dir) };
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut client = cluster.client(90, ClientOptions::default());
    let ops = (0..n).map(|i| BatchOp::Put(key(i), b"v0".to_vec())).collect();
    client.batch(ops).await.unwrap();
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let split_key = group.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let new_id = leader.alloc_group_id().await.expect("an id");
    let (left, right) = leader.propose_split(&group, split_key, new_id).await.expect("split");
    assert!(leader.report(vec![left.clone(), right.clone()]).await);
    (cluster, left, right)
}

/// The values a key may hold: the last acknowledged write's, plus writes of unknown
/// outcome since.
type Possible = BTreeMap<u32, Vec<Vec<u8>>>;

/// Shared by the workers and the merge: rounds done, and whether the merge returned.
#[derive(Default)]
struct Progress {
    rounds: AtomicU32,
    done: AtomicBool,
}

/// One client owning the keys `i % 4 == id % 4`: writes and reads them in turn, each read
/// checked against what the key may hold, until `done` is set and `after` rounds more.
async fn worker(cluster: &SimCluster, id: u64, n: u32, sync: &Progress) -> (Possible, u32, u64) {
    let after = 40;
    let opts = ClientOptions { max_attempts: 200, ..Default::default() };
    let mut client = cluster.client(id, opts);
    let mine: Vec<u32> = (0..n).filter(|i| u64::from(*i) % 4 == id % 4).collect();
    let mut possible: Possible = mine.iter().map(|i| (*i, vec![b"v0".to_vec()])).collect();
    let (mut checked, mut left) = (0, after);
    for r in 0.. {
        if sync.done.load(Ordering::SeqCst) {
            if left == 0 {
                break;
            }
            left -= 1;
        }
        let k = mine[(r as usize * 7) % mine.len()];
        let v = format!("c{id}r{r}").into_bytes();
        match client.put(&key(k), &v).await {
            Ok(()) => possible.insert(k, vec![v]),
            Err(ClientError::Unknown(_)) => {
                possible.get_mut(&k).unwrap().push(v);
                None
            }
            Err(e) => panic!("client {id}: put of key {k}: {e:?}"),
        };
        let k = mine[(r as usize * 3 + 1) % mine.len()];
        let got = client.get(&key(k)).await.unwrap_or_else(|e| panic!("get {k}: {e:?}"));
        let got = got.expect("every key was written");
        assert!(possible[&k].contains(&got), "client {id}: key {k} read {got:?}");
        checked += 1;
        sync.rounds.fetch_add(1, Ordering::SeqCst);
    }
    (possible, checked, client.stats.stale)
}

async fn merge_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, left, right) = two_ranges(dir.path(), 160).await;
    let sync = Progress::default();
    let merge = async {
        // Once every client has routed a few requests by the epochs before the merge.
        while sync.rounds.load(Ordering::SeqCst) < 40 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (leader, _) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
        let reply = leader.request_merge(&left, &right).await;
        sync.done.store(true, Ordering::SeqCst);
        reply
    };
    // The workers run from 40 rounds before the merge until 40 rounds after it.
    let (reply, a, b, c, d) = tokio::join!(
        merge,
        worker(&cluster, 1, 160, &sync),
        worker(&cluster, 2, 160, &sync),
        worker(&cluster, 3, 160, &sync),
        worker(&cluster, 4, 160, &sync)
    );
    let ClientReply::Merged(merged) = reply else { panic!("not merged: {reply:?}") };
    assert_eq!((merged.id, &merged.start, &merged.end), (left.id, &left.start, &right.end));
    assert!(merged.epoch.version > right.epoch.version + 1, "{merged:?}");
    let checked = a.1 + b.1 + c.1 + d.1;
    let stale = a.2 + b.2 + c.2 + d.2;
    eprintln!("merged into {merged:?}; {checked} reads checked, {stale} stale answers");
    // The clients ran across the merge: requests routed by the old epochs met `Stale`.
    assert!(stale > 0, "no client request met the merge");
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    // The right range's replicas are retired on every node.
    assert_retired(&cluster, right.id).await;
    // The directory holds one descriptor, for the whole key space.
    let node = cluster.net.node(1).unwrap();
    let Some(ClientReply::Ranges(descs)) = node.directory_call(ClientOp::Ranges).await else {
        panic!("no directory answer")
    };
    assert_eq!(descs.len(), 1, "{descs:?}");
    assert_eq!((descs[0].id, descs[0].end.is_empty()), (left.id, true));
    // Every key reads back a value it may hold, through a cold client.
    let mut cold = cluster.client(9, ClientOptions { max_attempts: 100, ..Default::default() });
    for (k, vs) in a.0.iter().chain(&b.0).chain(&c.0).chain(&d.0) {
        let got = cold.get(&key(*k)).await.unwrap().expect("written");
        assert!(vs.contains(&got), "key {k}: {got:?}");
    }
    cluster.shutdown().await;
}

/// Waits until no live node hosts a replica of `g`.
pub async fn assert_retired(cluster: &SimCluster, g: u64) {
    let start = tokio::time::Instant::now();
    while cluster.net.live().iter().any(|n| n.group(g).is_some()) {
        assert!(start.elapsed() < Duration::from_secs(20), "group {g} not retired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_merge_under_concurrent_writes_and_reads_loses_nothing() {
    runtime().block_on(merge_under_load());
}

async fn refused_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, left, right) = two_ranges(dir.path(), 160).await;
    // The left range splits after the merge was planned: its log refuses the merge.
    let (leader, group) = cluster.leader(left.id, Duration::from_secs(5)).await.unwrap();
    let key_l = group.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let id = leader.alloc_group_id().await.unwrap();
    let (l2, mid) = leader.propose_split(&group, key_l, id).await.expect("split");
    assert!(leader.report(vec![l2, mid]).await);
    let (leader, _) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
    let reply = leader.request_merge(&left, &right).await;
    assert!(matches!(reply, ClientReply::MergeRefused(_)), "{reply:?}");
    // The right range serves again, at a version past its frozen one.
    let (_, g) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
    let now = g.sm.desc();
    assert_eq!(now.epoch.version, right.epoch.version + 2);
    assert!(!g.sm.shared.lock().unwrap().state.is_frozen());
    let mut client = cluster.client(5, ClientOptions { max_attempts: 100, ..Default::default() });
    let k = key(150);
    assert!(right.contains(&k));
    client.put(&k, b"after").await.unwrap();
    assert_eq!(client.get(&k).await.unwrap(), Some(b"after".to_vec()));
    // A repeated CommitMerge of that frozen version is refused by the record, not retried.
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(ranges.len(), 3, "{ranges:?}");
    for i in 0..160 {
        let want = if i == 150 { b"after".to_vec() } else { b"v0".to_vec() };
        assert_eq!(client.get(&key(i)).await.unwrap(), Some(want), "key {i}");
    }
    cluster.shutdown().await;
}

#[test]
fn a_merge_the_left_range_refuses_is_rolled_back() {
    runtime().block_on(refused_and_rolled_back());
}

async fn planned_merges() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SimOptions {
        split_keys: 40,
        load: LoadOptions { merge_keys: 30, window_ticks: 5, ..Default::default() },
        // The rebalancer on, as `bavl-cluster node` runs by default: it must not keep the
        // planner from merging (it did, each tick, until merges were planned first).
        rebalance: true,
        ..SimOptions::new(8, dir.path())
    };
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut client = cluster.client(1, ClientOptions { max_attempts: 200, ..Default::default() });
    for i in 0..200 {
        client.put(&key(i), b"v").await.unwrap();
    }
    let wait = |pred: fn(usize) -> bool, what: &'static str| {
        let cluster = &cluster;
        async move {
            let start = tokio::time::Instant::now();
            loop {
                let (ranges, problems) = cluster.ranges();
                if problems.is_empty() && pred(ranges.len()) {
                    return ranges;
                }
                assert!(start.elapsed() < Duration::from_secs(120), "{what}: {ranges:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let split = wait(|n| n >= 4, "no splits").await;
    // Keep one key in ten: every range is small and cold now; the planner merges them.
    for i in (0..200).filter(|i| i % 10 != 0) {
        client.delete(&key(i)).await.unwrap();
    }
    let merged = wait(|n| n == 1, "not merged down to one range").await;
    eprintln!("{} ranges merged into {:?}", split.len(), merged[0]);
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    for i in 0..200 {
        let want = (i % 10 == 0).then(|| b"v".to_vec());
        assert_eq!(client.get(&key(i)).await.unwrap(), want, "key {i}");
    }
    for d in &split {
        if d.id != merged[0].id {
            assert_retired(&cluster, d.id).await;
        }
    }
    cluster.shutdown().await;
}

#[test]
fn small_cold_neighbours_are_merged_by_the_planner() {
    runtime().block_on(planned_merges());
}
