//! A node killed at each step of a split (leader or follower): the cluster converges, the
//! ranges tile the key space, the directory learns the split, and every acknowledged write
//! is read back.

use std::time::Duration;

use bavl_cluster::client::ClientOptions;
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::types::NodeId;

#[derive(Clone, Copy, Debug)]
enum Kill {
    /// The leader, after it got a group id and before it proposed the split.
    LeaderAfterAlloc,
    /// The leader, after the split was applied and before it reported to the directory.
    LeaderBeforeReport,
    /// A follower, down while the split is proposed and applied; it catches up after.
    FollowerDuringSplit,
}

fn options(dir: &std::path::Path) -> SimOptions {
    // No automatic split: the test drives each step.
    SimOptions { split_keys: u64::MAX, ..SimOptions::new(5, dir) }
}

async fn scenario(kill: Kill) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = SimCluster::start(options(dir.path())).await.unwrap();
    let mut client = cluster.client(1, ClientOptions::default());
    let key = |i: u32| format!("key{i:04}").into_bytes();
    for i in 0..120 {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let split_key = group.sm.shared.lock().unwrap().state.split_key().expect("several chunks");
    let follower: NodeId = (1..=3).find(|n| *n != leader.id).unwrap();
    let new_id = leader.alloc_group_id().await.expect("an id");
    match kill {
        Kill::LeaderAfterAlloc => {
            cluster.crash(leader.id).await;
            tokio::time::sleep(Duration::from_millis(800)).await;
            cluster.restart(leader.id).await.unwrap();
            // Someone (maybe another node) completes a split afterwards, with a fresh id.
            let (l2, g2) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
            let id2 = l2.alloc_group_id().await.expect("an id");
            let (left, right) = l2.propose_split(&g2, split_key.clone(), id2).await.expect("split");
            assert!(l2.report(vec![left, right]).await);
        }
        Kill::LeaderBeforeReport => {
            leader.propose_split(&group, split_key.clone(), new_id).await.expect("split");
            cluster.crash(leader.id).await;
            tokio::time::sleep(Duration::from_millis(800)).await;
            cluster.restart(leader.id).await.unwrap();
        }
        Kill::FollowerDuringSplit => {
            cluster.crash(follower).await;
            let (left, right) =
                leader.propose_split(&group, split_key.clone(), new_id).await.expect("split");
            assert!(leader.report(vec![left, right]).await);
            for i in 120..140 {
                client.put(&key(i), &i.to_be_bytes()).await.unwrap();
            }
            cluster.restart(follower).await.unwrap();
        }
    }
    cluster.converge(Duration::from_secs(30)).await.unwrap_or_else(|e| panic!("{kill:?}: {e}"));
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{kill:?}: {problems:?}");
    assert_eq!(ranges.len(), 2, "{kill:?}: {ranges:?}");
    assert!(ranges.iter().any(|d| d.start == split_key));
    // Every acknowledged write is there, through a cold client (directory lookups).
    let written = if matches!(kill, Kill::FollowerDuringSplit) { 140 } else { 120 };
    let mut cold =
        cluster.client(2, ClientOptions { max_attempts: 100, ..ClientOptions::default() });
    for i in 0..written {
        assert_eq!(
            cold.get(&key(i)).await.unwrap(),
            Some(i.to_be_bytes().to_vec()),
            "{kill:?}: key {i}"
        );
    }
    // The directory learned the split (reported, or repaired by a leader's heartbeat).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut fresh =
            cluster.client(3, ClientOptions { no_cache: true, ..ClientOptions::default() });
        fresh.get(&split_key).await.unwrap();
        if fresh.stats.stale == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{kill:?}: the directory never learned the split"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster.shutdown().await;
}

#[test]
fn killing_a_node_at_each_step_of_a_split_loses_nothing() {
    for kill in [Kill::LeaderAfterAlloc, Kill::LeaderBeforeReport, Kill::FollowerDuringSplit] {
        runtime().block_on(scenario(kill));
    }
}
