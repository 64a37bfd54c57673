//! Snapshots fetched as chunks from several replicas (`fetch`), against roots attested in
//! the log (`versions`): a move's learner takes chunks from more than one voter; a voter
//! serving corrupted chunks is refused and the fetch completes from the others; a replica
//! whose root differs from an attested one reports divergence and serves no chunk. (The
//! rules of retained versions themselves are tested in `versions`.)

use std::time::Duration;

use bavl_cluster::client::ClientOptions;
use bavl_cluster::fetch::FetchStats;
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::types::{NodeId, RangeDesc};

const KEYS: u32 = 400;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// Four nodes, one range that never splits, chunks of 4 entries, a snapshot every 40
/// entries.
fn four_nodes(seed: u64, dir: &std::path::Path) -> SimOptions {
    SimOptions {
        nodes: 4,
        split_keys: u64::MAX,
        capacity: 4,
        snapshot_every: 40,
        ..SimOptions::new(seed, dir)
    }
}

/// Writes `KEYS` keys to one range of chunk capacity 4 (about a hundred chunks), moves the
/// replica of a follower to node 4 (with `corrupt` another follower serves bad chunks),
/// checks the data, and returns node 4's fetches of group 1 and the corrupt node.
async fn move_with_fetch(corrupt: bool) -> (Vec<FetchStats>, Option<NodeId>) {
    let dir = tempfile::tempdir().unwrap();
    let opts = four_nodes(5, dir.path());
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut client = cluster.client(1, ClientOptions::default());
    for i in 0..KEYS {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    // Leader ticks attest the latest sealed versions; later writes build snapshots of them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..60 {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let desc: RangeDesc = group.sm.desc();
    let followers: Vec<NodeId> =
        desc.replicas.iter().copied().filter(|n| *n != leader.id).collect();
    let (from, bad) = (followers[0], corrupt.then_some(followers[1]));
    if let Some(b) = bad {
        cluster.net.node(b).unwrap().corrupt_served_chunks(true);
    }
    let after = leader.move_replica(1, from, 4).await.expect("the move completes");
    assert!(after.replicas.contains(&4) && !after.replicas.contains(&from), "{after:?}");
    if let Some(b) = bad {
        cluster.net.node(b).unwrap().corrupt_served_chunks(false);
    }
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    let new = cluster.net.node(4).unwrap();
    let g = new.group(1).unwrap();
    {
        let s = g.sm.shared.lock().unwrap();
        assert_eq!(s.state.tree.len(), u64::from(KEYS));
        assert_eq!(s.versions.diverged, 0);
    }
    let mut cold = cluster.client(9, ClientOptions { max_attempts: 100, ..Default::default() });
    for i in 0..KEYS {
        assert_eq!(cold.get(&key(i)).await.unwrap(), Some(i.to_be_bytes().to_vec()), "key {i}");
    }
    for n in cluster.net.live() {
        if let Some(g) = n.group(1) {
            assert_eq!(g.sm.shared.lock().unwrap().versions.diverged, 0, "node {}", n.id);
        }
    }
    let log = new.fetch_log().into_iter().filter(|f| f.group == 1).collect();
    cluster.shutdown().await;
    (log, bad)
}

/// The successful fetch of a real (non-origin) snapshot among `log`.
fn installed(log: &[FetchStats]) -> &FetchStats {
    log.iter()
        .rev()
        .find(|f| f.ok && f.index > 0)
        .unwrap_or_else(|| panic!("no fetch of a snapshot past the origin: {log:?}"))
}

#[test]
fn a_learner_fetches_chunks_from_several_replicas() {
    let (log, _) = runtime().block_on(move_with_fetch(false));
    let f = installed(&log);
    eprintln!("{f:?}");
    assert!(f.chunks >= 32, "{f:?}");
    assert_eq!(f.served.values().sum::<u64>(), f.chunks, "{f:?}");
    // Every replica holds the snapshot's version (a snapshot point), so none is dropped.
    assert!(f.dropped.is_empty(), "a source was dropped: {f:?}");
    assert_eq!(f.served.len(), 3, "chunks came from fewer replicas than hold them: {f:?}");
    assert!(f.refused.is_empty(), "{f:?}");
}

#[test]
fn a_corrupted_chunk_is_refused_and_fetched_from_another_replica() {
    let (log, bad) = runtime().block_on(move_with_fetch(true));
    let bad = bad.unwrap();
    let f = installed(&log);
    eprintln!("{f:?}");
    assert!(f.refused.get(&bad).copied().unwrap_or(0) >= 1, "{f:?}");
    assert!(f.dropped.contains_key(&bad), "{f:?}");
    assert!(!f.served.contains_key(&bad), "{f:?}");
    assert_eq!(f.served.len(), 2, "the other two replicas serve the rest: {f:?}");
    assert_eq!(f.served.values().sum::<u64>(), f.chunks, "{f:?}");
}

/// A follower whose tree is changed behind the log's back: the next `Attest` flags it, its
/// versions no longer match the attested roots, so it serves no chunk of a snapshot, and a
/// learner's snapshot holds none of its change.
async fn diverged_follower() {
    let dir = tempfile::tempdir().unwrap();
    let opts = four_nodes(6, dir.path());
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut client = cluster.client(1, ClientOptions::default());
    for i in 0..100 {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let followers: Vec<NodeId> =
        group.sm.desc().replicas.iter().copied().filter(|n| *n != leader.id).collect();
    let (from, bad) = (followers[0], followers[1]);
    let rogue = b"zzz-rogue".to_vec();
    let bad_group = cluster.net.node(bad).unwrap().group(1).unwrap();
    bad_group.sm.shared.lock().unwrap().state.tree.insert(&rogue, b"x").unwrap();
    for i in 100..KEYS {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..60 {
        client.put(&key(i), &i.to_be_bytes()).await.unwrap();
    }
    assert!(bad_group.sm.shared.lock().unwrap().versions.diverged > 0, "divergence unseen");
    for n in [leader.id, from] {
        let g = cluster.net.node(n).unwrap().group(1).unwrap();
        assert_eq!(g.sm.shared.lock().unwrap().versions.diverged, 0, "node {n}");
    }
    leader.move_replica(1, from, 4).await.expect("the move completes");
    let new = cluster.net.node(4).unwrap();
    let f = installed(&new.fetch_log()).clone();
    eprintln!("{f:?}");
    assert!(!f.served.contains_key(&bad) && f.dropped.contains_key(&bad), "{f:?}");
    let g = new.group(1).unwrap();
    {
        let s = g.sm.shared.lock().unwrap();
        assert_eq!(s.state.tree.get(&rogue).unwrap(), None);
        assert_eq!(s.state.tree.len(), u64::from(KEYS));
    }
    cluster.shutdown().await;
}

#[test]
fn a_diverged_replica_is_flagged_and_serves_no_chunk() {
    runtime().block_on(diverged_follower());
}
