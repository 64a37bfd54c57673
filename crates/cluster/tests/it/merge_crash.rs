//! A node killed at each step of a merge: the leaders' ticks finish the merge (a frozen
//! range's leader sends `CommitMerge` again until the left range's log decides), the
//! cluster converges to one range, the right range's replicas are retired everywhere, the
//! directory holds one descriptor, and every acknowledged write is read back.

use std::time::Duration;

use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::types::{BatchOp, NodeId, RangeDesc};

#[derive(Clone, Copy, Debug)]
enum Kill {
    /// The right range's leader (the merge's driver), after `PrepareMerge` committed.
    RightLeaderAfterPrepare,
    /// The left range's leader, after `PrepareMerge` committed in the right range.
    LeftLeaderAfterPrepare,
    /// The right range's leader, after `CommitMerge` committed and before retiring.
    RightLeaderAfterCommit,
    /// A node down for the whole merge (its right replica misses everything), restarted.
    NodeDownDuringMerge,
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

async fn split(cluster: &SimCluster) -> (RangeDesc, RangeDesc) {
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let split_key = group.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let new_id = leader.alloc_group_id().await.expect("an id");
    let (left, right) = leader.propose_split(&group, split_key, new_id).await.expect("split");
    assert!(leader.report(vec![left.clone(), right.clone()]).await);
    (left, right)
}

/// A cluster (simulation seed `seed`) of 160 keys split into two ranges, merges held.
async fn two_ranges(seed: u64) -> (tempfile::TempDir, SimCluster, Client, RangeDesc, RangeDesc) {
    let dir = tempfile::tempdir().unwrap();
    let opts = SimOptions { split_keys: u64::MAX, ..SimOptions::new(seed, dir.path()) };
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut client = cluster.client(1, ClientOptions { max_attempts: 200, ..Default::default() });
    let ops = (0..160).map(|i| BatchOp::Put(key(i), b"v0".to_vec())).collect();
    client.batch(ops).await.unwrap();
    let (left, right) = split(&cluster).await;
    hold(&cluster, true);
    (dir, cluster, client, left, right)
}

fn hold(cluster: &SimCluster, held: bool) {
    for n in cluster.net.live() {
        n.hold_merges(held);
    }
}

async fn bounce(cluster: &SimCluster, id: NodeId) {
    cluster.crash(id).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.restart(id).await.unwrap();
}

async fn scenario(kill: Kill) {
    let (_dir, cluster, mut client, left, right) = two_ranges(9).await;
    let (rl, rg) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
    let mut written = 160;
    if matches!(kill, Kill::NodeDownDuringMerge) {
        let down = (1..=3).find(|n| *n != rl.id).unwrap();
        cluster.crash(down).await;
        rl.prepare_merge_step(&rg, left.id, left.epoch.version).await.expect("prepared");
        hold(&cluster, false);
        // Writes to the right range's keys while it is frozen are retried until the left
        // range serves them.
        for i in 160..180 {
            client.put(&key(i), b"v1").await.unwrap();
        }
        written = 180;
        wait_one_range(&cluster, kill).await;
        cluster.restart(down).await.unwrap();
    } else {
        rl.prepare_merge_step(&rg, left.id, left.epoch.version).await.expect("prepared");
        match kill {
            Kill::RightLeaderAfterPrepare => bounce(&cluster, rl.id).await,
            Kill::LeftLeaderAfterPrepare => {
                let (ll, _) = cluster.leader(left.id, Duration::from_secs(5)).await.unwrap();
                bounce(&cluster, ll.id).await;
            }
            Kill::RightLeaderAfterCommit => {
                let (_, reply) = rl.commit_merge_step(&rg).await.expect("attested");
                assert!(matches!(reply, ClientReply::Merged(_)), "{reply:?}");
                cluster.crash(rl.id).await;
                // The left range serves the right's keys already.
                for i in [100, 159] {
                    assert_eq!(client.get(&key(i)).await.unwrap(), Some(b"v0".to_vec()));
                }
                tokio::time::sleep(Duration::from_millis(800)).await;
                cluster.restart(rl.id).await.unwrap();
            }
            Kill::NodeDownDuringMerge => unreachable!(),
        }
        hold(&cluster, false);
    }
    wait_one_range(&cluster, kill).await;
    cluster.converge(Duration::from_secs(30)).await.unwrap_or_else(|e| panic!("{kill:?}: {e}"));
    // Retired on every node, the one that was down included (by its garbage check).
    let start = tokio::time::Instant::now();
    while cluster.net.live().iter().any(|n| n.group(right.id).is_some()) {
        assert!(start.elapsed() < Duration::from_secs(30), "{kill:?}: right range not retired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = cluster.net.node(1).unwrap();
    let Some(ClientReply::Ranges(descs)) = node.directory_call(ClientOp::Ranges).await else {
        panic!("no directory answer")
    };
    assert_eq!(descs.len(), 1, "{kill:?}: {descs:?}");
    let mut cold = cluster.client(2, ClientOptions { max_attempts: 100, ..Default::default() });
    for i in 0..written {
        let want = if i < 160 { b"v0".to_vec() } else { b"v1".to_vec() };
        assert_eq!(cold.get(&key(i)).await.unwrap(), Some(want), "{kill:?}: key {i}");
    }
    cluster.shutdown().await;
}

/// Waits until the newest descriptors are one range for the whole key space.
async fn wait_one_range(cluster: &SimCluster, kill: Kill) {
    let start = tokio::time::Instant::now();
    loop {
        let (ranges, problems) = cluster.ranges();
        if problems.is_empty() && ranges.len() == 1 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{kill:?}: {ranges:?} {problems:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn killing_a_node_at_each_step_of_a_merge_loses_nothing() {
    for kill in [
        Kill::RightLeaderAfterPrepare,
        Kill::LeftLeaderAfterPrepare,
        Kill::RightLeaderAfterCommit,
        Kill::NodeDownDuringMerge,
    ] {
        runtime().block_on(scenario(kill));
    }
}

async fn refused_then_killed() {
    let (_dir, cluster, client, left, right) = two_ranges(10).await;
    // The left range splits after the merge was planned at its old version.
    let (ll, lg) = cluster.leader(left.id, Duration::from_secs(5)).await.unwrap();
    let k = lg.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let id = ll.alloc_group_id().await.unwrap();
    let (l2, mid) = ll.propose_split(&lg, k, id).await.expect("split");
    assert!(ll.report(vec![l2, mid]).await);
    let (rl, rg) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
    rl.prepare_merge_step(&rg, left.id, left.epoch.version).await.expect("prepared");
    let (_, reply) = rl.commit_merge_step(&rg).await.expect("attested");
    assert!(matches!(reply, ClientReply::MergeRefused(_)), "{reply:?}");
    // Killed after the refusal, before proposing the rollback: the next leader of the
    // frozen range asks again, gets the recorded refusal, and rolls back.
    bounce(&cluster, rl.id).await;
    hold(&cluster, false);
    rolled_back(cluster, client, &right, 3).await;
}

/// Waits until the right range `right` is rolled back (unfrozen, two versions on, with its
/// bounds) among `ranges` ranges, then writes one of its keys and reads every key back.
async fn rolled_back(cluster: SimCluster, mut client: Client, right: &RangeDesc, ranges: usize) {
    let start = tokio::time::Instant::now();
    let now = loop {
        let (all, problems) = cluster.ranges();
        let r = all.iter().find(|d| d.id == right.id).cloned();
        if let Some(r) = r.filter(|r| r.epoch.version == right.epoch.version + 2) {
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(all.len(), ranges, "{all:?}");
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "not rolled back: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((now.start, now.end), (right.start.clone(), right.end.clone()));
    client.put(&key(150), b"after").await.unwrap();
    cluster.converge(Duration::from_secs(30)).await.unwrap();
    let mut cold = cluster.client(2, ClientOptions { max_attempts: 100, ..Default::default() });
    for i in 0..160 {
        let want = if i == 150 { b"after".to_vec() } else { b"v0".to_vec() };
        assert_eq!(cold.get(&key(i)).await.unwrap(), Some(want), "key {i}");
    }
    cluster.shutdown().await;
}

#[test]
fn a_refused_merge_is_rolled_back_by_the_next_leader_after_a_kill() {
    runtime().block_on(refused_then_killed());
}

/// The left range is itself merged away while the right range waits frozen for it: the
/// range that absorbed it refuses in its stead, and the right range rolls back (before,
/// it stayed frozen for good: its `CommitMerge` found no group).
async fn target_merged_away() {
    let (_dir, cluster, client, left, right) = two_ranges(11).await;
    // Three ranges: [.., k) | mid = [k, b) | right = [b, ..).
    let (ll, lg) = cluster.leader(left.id, Duration::from_secs(5)).await.unwrap();
    let k = lg.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let id = ll.alloc_group_id().await.unwrap();
    let (l2, mid) = ll.propose_split(&lg, k, id).await.expect("split");
    assert!(ll.report(vec![l2.clone(), mid.clone()]).await);
    // The right range freezes for a merge into mid ...
    let (rl, rg) = cluster.leader(right.id, Duration::from_secs(5)).await.unwrap();
    rl.prepare_merge_step(&rg, mid.id, mid.epoch.version).await.expect("prepared");
    // ... and mid is merged into the left range first.
    let (ml, _) = cluster.leader(mid.id, Duration::from_secs(5)).await.unwrap();
    let merged = ml.merge_into(mid.id, l2.id, l2.epoch.version).await.expect("mid merged");
    assert_eq!((merged.start.as_slice(), merged.end.clone()), (&b""[..], right.start.clone()));
    // Before, the right range stayed frozen for good here: its `CommitMerge` found no group.
    hold(&cluster, false);
    rolled_back(cluster, client, &right, 2).await;
}

#[test]
fn a_range_frozen_for_a_target_that_was_merged_away_rolls_back() {
    runtime().block_on(target_merged_away());
}
