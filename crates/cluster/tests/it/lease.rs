//! Leader leases (`lease.rs`, docs/cluster.md §6): reads inside a lease start no round, a
//! lease ends 3/4 of `election_timeout_min` after its round started, and a restarted
//! replica neither votes nor stands for `election_timeout_min`.

use std::time::Duration;

use bavl_cluster::consensus::Consensus;
use bavl_cluster::msg::{Message, RaftReply, RaftRpc, Reply};
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::simnet::Faults;
use bavl_cluster::types::DIRECTORY_GROUP;

/// The simulation's `election_timeout_min` (`sim.rs`).
const ELECTION_MIN: Duration = Duration::from_millis(300);

/// The range group every cluster starts with (`Node::bootstrap`).
const FIRST_RANGE: u64 = 1;

fn options(dir: &std::path::Path) -> SimOptions {
    SimOptions { faults: Faults { loss: 0.0, max_delay_ms: 2 }, ..SimOptions::new(3, dir) }
}

#[test]
fn reads_inside_a_lease_start_no_round_and_the_lease_ends() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = SimCluster::start(options(dir.path())).await.unwrap();
        // A range group: the directory's replicas read it in the background (liveness, the
        // rebalancer), and a round of theirs just before `t` would lend this test its lease.
        let (_, group) = cluster.leader(FIRST_RANGE, Duration::from_secs(10)).await.unwrap();
        // Past any lease the election or the start-up reads earned.
        tokio::time::sleep(ELECTION_MIN).await;
        let before = group.read_rounds();
        let t = tokio::time::Instant::now();
        group.read_barrier().await.unwrap();
        assert_eq!(group.read_rounds(), before + 1, "no lease yet: a round");
        for _ in 0..50 {
            group.read_barrier().await.unwrap();
        }
        assert_eq!(group.read_rounds(), before + 1, "inside the lease: no round");
        // The lease is 225 ms from the round's start.
        tokio::time::sleep_until(t + Duration::from_millis(220)).await;
        group.read_barrier().await.unwrap();
        assert_eq!(group.read_rounds(), before + 1, "220 ms after the start: still inside");
        tokio::time::sleep_until(t + Duration::from_millis(226)).await;
        group.read_barrier().await.unwrap();
        assert_eq!(group.read_rounds(), before + 2, "past 225 ms: a round again");
        cluster.shutdown().await;
    });
}

#[test]
fn a_restarted_replica_keeps_quiet_for_an_election_timeout() {
    // Without the quiet time, a restarted follower would grant any up-to-date candidate
    // its vote at once, and a candidate that has not heard from the leader (cut off from
    // it only) could win while the leader's lease lasts.
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = SimCluster::start(options(dir.path())).await.unwrap();
        let (leader, _) = cluster.leader(DIRECTORY_GROUP, Duration::from_secs(10)).await.unwrap();
        let follower = (1..=3).find(|&n| n != leader.id).unwrap();
        cluster.crash(follower).await;
        cluster.restart(follower).await.unwrap();
        let node = cluster.net.node(follower).unwrap();
        let replica = node.group(DIRECTORY_GROUP).unwrap();
        assert!(replica.quiet.now(), "restarted with a vote: quiet");
        // A candidate of a higher term with the replica's own log: openraft alone would
        // grant it (a restarted replica has no lease on its leader).
        let m = replica.raft.metrics().borrow().clone();
        let candidate = (1..=3).find(|&n| n != leader.id && n != follower).unwrap();
        let ask = || Message::Raft {
            group: DIRECTORY_GROUP,
            from: candidate,
            rpc: Box::new(RaftRpc::Vote(openraft::raft::VoteRequest::new(
                openraft::Vote::new(m.current_term + 5, candidate),
                replica.raft.metrics().borrow().last_applied,
            ))),
        };
        let refused = matches!(node.handle(ask()).await, Reply::Raft(RaftReply::Refused(_)));
        assert!(refused, "a quiet replica refuses to vote");
        tokio::time::sleep(ELECTION_MIN).await;
        assert!(!replica.quiet.now(), "quiet for election_timeout_min only");
        let answered = matches!(node.handle(ask()).await, Reply::Raft(RaftReply::Vote(_)));
        assert!(answered, "after its quiet time openraft answers the vote");
        cluster.shutdown().await;
    });
}
