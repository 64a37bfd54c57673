//! Range moves by membership change, on a simulated 4-node cluster (3 replicas per range):
//! a follower's and the leader's replica moved to the spare node; the rebalancer spreading
//! ranges over an added node and emptying a drained one.

use std::time::Duration;

use bavl_cluster::client::{Client, ClientError, ClientOptions};
use bavl_cluster::consensus::Consensus;
use bavl_cluster::msg::{ClientOp, ClientReply, ClientRequest, DirectoryOp};
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::types::{NodeId, DIRECTORY_GROUP};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// Puts each key's value; a put of unknown outcome (its replica was removed by a move
/// while it was proposed: "raft stopped") is put again, which is safe since every put of
/// a key writes the same value. Any other error fails the test.
async fn write(cluster: &SimCluster, range: std::ops::Range<u32>) {
    let mut client = cluster.client(1, ClientOptions::default());
    for i in range {
        let mut unknown = 0;
        while let Err(e) = client.put(&key(i), &i.to_be_bytes()).await {
            unknown += 1;
            assert!(matches!(e, ClientError::Unknown(_)) && unknown < 5, "put {i}: {e:?}");
        }
    }
}

async fn read_back(cluster: &SimCluster, n: u32) {
    let mut cold =
        cluster.client(9, ClientOptions { max_attempts: 100, ..ClientOptions::default() });
    for i in 0..n {
        assert_eq!(cold.get(&key(i)).await.unwrap(), Some(i.to_be_bytes().to_vec()), "key {i}");
    }
}

async fn move_one(leader_moves_itself: bool) {
    let dir = tempfile::tempdir().unwrap();
    let opts = SimOptions { nodes: 4, split_keys: u64::MAX, ..SimOptions::new(3, dir.path()) };
    let cluster = SimCluster::start(opts).await.unwrap();
    write(&cluster, 0..100).await;
    let (leader, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
    let before = group.sm.desc();
    let from: NodeId = if leader_moves_itself {
        leader.id
    } else {
        *before.replicas.iter().find(|n| **n != leader.id).unwrap()
    };
    let after = leader.move_replica(1, from, 4).await.expect("the move completes");
    let mut expect = before.replicas.clone();
    expect.remove(&from);
    expect.insert(4);
    assert_eq!(after.replicas, expect);
    assert!(after.learners.is_empty());
    // Three configuration changes: learner added, promoted, old voter removed.
    assert_eq!(after.epoch.conf_ver, before.epoch.conf_ver + 3, "{after:?}");
    assert_eq!(after.epoch.version, before.epoch.version);
    // Writes go on, to the new replica set (through a client whose cache is stale).
    write(&cluster, 100..130).await;
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(ranges[0].replicas, expect);
    // The old replica stopped serving and its files are gone.
    let old = cluster.net.node(from).unwrap();
    assert!(old.group(1).is_none(), "node {from} still hosts group 1");
    let files = std::fs::read_dir(dir.path().join(format!("node-{from}"))).unwrap();
    let names: Vec<String> =
        files.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.contains("group-1")), "{names:?}");
    // The new replica holds every key; the directory knows the new descriptor.
    let new = cluster.net.node(4).unwrap().group(1).unwrap();
    assert_eq!(new.sm.shared.lock().unwrap().state.tree.len(), 130);
    let mut fresh = cluster.client(7, ClientOptions::default());
    let dir_ranges = fresh.ranges().await.unwrap();
    assert_eq!(dir_ranges[0].replicas, expect, "{dir_ranges:?}");
    read_back(&cluster, 130).await;
    // A repeated move finds the work done; an impossible one is refused.
    let (l2, _) = cluster.leader(1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(l2.move_replica(1, from, 4).await.unwrap().epoch, after.epoch);
    assert!(l2.move_replica(1, from, from).await.is_err());
    assert!(l2.group(1).unwrap().leader() == Some(l2.id));
    cluster.shutdown().await;
}

#[test]
fn a_follower_replica_moves_to_a_new_node() {
    runtime().block_on(move_one(false));
}

#[test]
fn the_leader_replica_moves_to_a_new_node() {
    runtime().block_on(move_one(true));
}

async fn wait_for(cluster: &SimCluster, what: &str, ok: impl Fn(&[(NodeId, usize)]) -> bool) {
    let start = tokio::time::Instant::now();
    loop {
        let counts = cluster.replica_counts();
        if ok(&counts) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{what}: {counts:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn rebalance() {
    let dir = tempfile::tempdir().unwrap();
    // Node 4 starts empty and registered: the rebalancer moves replicas to it.
    let opts =
        SimOptions { nodes: 4, split_keys: 40, rebalance: true, ..SimOptions::new(4, dir.path()) };
    let cluster = SimCluster::start(opts).await.unwrap();
    write(&cluster, 0..200).await;
    let (ranges, _) = cluster.ranges();
    assert!(ranges.len() >= 4, "too few ranges: {ranges:?}");
    wait_for(&cluster, "spread over 4 nodes", |c| {
        let max = c.iter().map(|x| x.1).max().unwrap();
        let min = c.iter().map(|x| x.1).min().unwrap();
        max <= min + 1 && c.iter().any(|x| x.0 == 4 && x.1 > 0)
    })
    .await;
    cluster.drain(2).await.unwrap();
    write(&cluster, 200..230).await;
    wait_for(&cluster, "node 2 drained", |c| c.iter().any(|x| x.0 == 2 && x.1 == 0)).await;
    cluster.converge(Duration::from_secs(20)).await.unwrap();
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{problems:?}");
    assert!(ranges.iter().all(|d| d.replicas.len() == 3 && !d.replicas.contains(&2)));
    read_back(&cluster, 230).await;
    cluster.shutdown().await;
}

#[test]
fn the_rebalancer_fills_an_added_node_and_empties_a_drained_one() {
    runtime().block_on(rebalance());
}

/// A node is removed from the directory's list only once drained: its range replicas and,
/// a bootstrap member, its directory replica moved away. Removed, it receives nothing, the
/// cluster serves on, and a client that knows only the removed node (still running) is
/// served too: the node passes directory operations on to the members it learned, which it
/// also finds again after a restart (its `directory.json`), though its seeds are stale.
#[test]
fn a_drained_node_is_removed_and_receives_nothing_after() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let opts = SimOptions {
            nodes: 5,
            split_keys: 40,
            rebalance: true,
            ..SimOptions::new(6, dir.path())
        };
        let cluster = SimCluster::start(opts).await.unwrap();
        write(&cluster, 0..160).await;
        wait_for(&cluster, "node 5 holds ranges", |c| c.iter().any(|x| x.0 == 5 && x.1 > 0)).await;
        let refused = |r: std::io::Result<()>, why: &str| {
            let e = r.expect_err("refused").to_string();
            assert!(e.contains(why), "{e}");
        };
        refused(cluster.remove_node(2).await, "not draining");
        let before = cluster.directory().await.expect("the directory's descriptor");
        assert!(before.replicas.contains(&2), "{before:?}");
        cluster.drain(2).await.unwrap();
        refused(cluster.remove_node(2).await, "its drain has not finished");
        let node2 = cluster.net.node(2).unwrap();
        let start = tokio::time::Instant::now();
        while !node2.groups().is_empty() {
            let held: Vec<_> = node2.groups().iter().map(|g| g.sm.desc().id).collect();
            assert!(start.elapsed() < Duration::from_secs(120), "node 2 still holds {held:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        cluster.converge(Duration::from_secs(20)).await.unwrap();
        let after = cluster.directory().await.expect("the directory's descriptor");
        assert_eq!(after.replicas.len(), 3, "{after:?}");
        assert!(!after.replicas.contains(&2) && after.learners.is_empty(), "{after:?}");
        // Three configuration changes, as a range's move.
        assert_eq!(after.epoch.conf_ver, before.epoch.conf_ver + 3, "{after:?}");
        cluster.remove_node(2).await.unwrap();
        refused(cluster.remove_node(2).await, "not registered");
        // More keys, more splits, through a client that knows only node 2: nothing goes
        // to node 2 any more, and every directory request it sends node 2 passes on.
        let mut via2 = Client::new(8, vec![2], cluster.net.clone(), ClientOptions::default());
        for i in 160..260u32 {
            via2.put(&key(i), &i.to_be_bytes()).await.expect("a put through node 2");
        }
        assert!(via2.stats.directory_lookups > 0, "{:?}", via2.stats);
        // Passed on once only: a forwarded request is not passed on again (no loop,
        // whatever the nodes' lists say); the directory's leader serves it.
        let forwarded = ClientRequest {
            group: DIRECTORY_GROUP,
            epoch: Default::default(),
            op: ClientOp::Forwarded(DirectoryOp::Nodes),
        };
        assert_eq!(node2.handle_client(forwarded.clone()).await, ClientReply::NoGroup);
        let (leader, _) = cluster.leader(DIRECTORY_GROUP, Duration::from_secs(5)).await.unwrap();
        assert!(matches!(leader.handle_client(forwarded).await, ClientReply::Nodes(_)));
        cluster.converge(Duration::from_secs(20)).await.unwrap();
        let (ranges, problems) = cluster.ranges();
        assert!(problems.is_empty(), "{problems:?}");
        assert!(ranges.iter().all(|d| d.replicas.len() == 3 && !d.replicas.contains(&2)));
        assert!(node2.groups().is_empty(), "node 2 was given a replica after its removal");
        for i in 0..260 {
            let got = via2.get(&key(i)).await.unwrap();
            assert_eq!(got, Some(i.to_be_bytes().to_vec()), "key {i}");
        }
        // Restarted, node 2 finds the directory where it now is, not among its seeds.
        cluster.crash(2).await;
        cluster.restart(2).await.unwrap();
        let mut members = cluster.net.node(2).unwrap().directory_members();
        members.sort_unstable();
        let now = cluster.directory().await.unwrap();
        assert_eq!(members, now.replicas.iter().copied().collect::<Vec<_>>());
        let mut again = Client::new(9, vec![2], cluster.net.clone(), ClientOptions::default());
        // (At least the ranges seen before: splits may go on meanwhile.)
        let listed = again.ranges().await.map(|r| r.len());
        assert!(listed.is_some_and(|n| n >= ranges.len()), "{listed:?}");
        // Node 2 gone for good: the client given only node 2 met the others through the
        // directory's node list, and goes on without it.
        cluster.crash(2).await;
        let listed = via2.ranges().await.map(|r| r.len());
        assert!(listed.is_some_and(|n| n >= ranges.len()), "{listed:?}");
        via2.put(&key(260), b"after").await.expect("a put without node 2");
        assert_eq!(via2.get(&key(260)).await.unwrap(), Some(b"after".to_vec()));
        cluster.shutdown().await;
    });
}

/// A replica deleted after a move and re-created empty by a message of a leader already
/// deposed must not follow that leader. Before a deleted replica's vote was kept (in its
/// `tombstone-<id>` marker), the re-created replica had no vote, accepted the stale leader's
/// term and answered with an empty log, which that leader had counted as matched: a
/// follower's log gone backwards, which killed the stale leader's Raft task with openraft's
/// "attempt to subtract with overflow" (`calc_mid`) in the merges-with-moves sweeps, and
/// would let the stale leader count the empty replica's acknowledgements in its old
/// configuration.
#[test]
fn a_deleted_replica_re_created_by_a_stale_leader_keeps_its_vote() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let opts = SimOptions { nodes: 4, split_keys: u64::MAX, ..SimOptions::new(5, dir.path()) };
        let cluster = SimCluster::start(opts).await.unwrap();
        write(&cluster, 0..50).await;
        let (stale, group) = cluster.leader(1, Duration::from_secs(5)).await.expect("a leader");
        let stale_term = group.raft.metrics().borrow().vote.leader_id.term;
        // The leader is cut off (it goes on leading its term in its own view); the two others
        // elect a new leader, which moves the third replica to node 4: that replica is
        // deleted on its tombstone.
        cluster.net.isolate(stale.id, true);
        let start = tokio::time::Instant::now();
        let new = loop {
            let live = cluster.net.live().into_iter().filter(|n| n.id != stale.id);
            let led =
                live.into_iter().find(|n| n.group(1).is_some_and(|g| g.leader() == Some(n.id)));
            if let Some(n) = led {
                break n;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no new leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let third =
            *group.sm.desc().replicas.iter().find(|n| **n != stale.id && **n != new.id).unwrap();
        new.move_replica(1, third, 4).await.expect("the move completes");
        let deleted = cluster.net.node(third).unwrap();
        assert!(deleted.group(1).is_none(), "node {third} still hosts group 1");
        let node_dir = dir.path().join(format!("node-{third}"));
        let kept = bavl_cluster::sm::read_tombstone(&node_dir, 1).unwrap().expect("a marker");
        let kept = kept.vote.expect("the marker holds the vote");
        assert!(kept.leader_id.term > stale_term, "{kept} vs term {stale_term}");
        // Only the stale leader and the node that deleted its replica are left; the stale
        // leader reaches it again, and its messages re-create the replica there, empty.
        cluster.crash(new.id).await;
        cluster.crash(4).await;
        cluster.net.isolate(stale.id, false);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let recreated = deleted.group(1).expect("re-created by the stale leader's messages");
        let vote = recreated.raft.metrics().borrow().vote;
        assert!(vote.leader_id.term > stale_term, "the re-created replica forgot its vote: {vote}");
        let m = stale.group(1).unwrap().raft.metrics().borrow().clone();
        assert!(m.running_state.is_ok(), "the stale leader's Raft task: {:?}", m.running_state);
        assert!(m.vote.leader_id.term > stale_term, "the stale leader was not deposed: {}", m.vote);
        // The others come back: one group, every write there.
        cluster.restart(new.id).await.unwrap();
        cluster.restart(4).await.unwrap();
        cluster.converge(Duration::from_secs(30)).await.unwrap();
        read_back(&cluster, 50).await;
        cluster.shutdown().await;
    });
}
