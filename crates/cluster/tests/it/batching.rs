//! Client writes to one group that arrive together share log entries (see `propose`), and
//! each is still answered on its own.

use std::path::Path;
use std::time::Duration;

use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::consensus::OpenraftGroup;
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::simnet::Faults;

/// Three nodes holding one range that never splits (1 ms of delay at most per message), a
/// client that wrote once (so the directory knows the range and a leader was found), and
/// the range's leader.
async fn one_range(dir: &Path) -> (SimCluster, Client, OpenraftGroup) {
    let opts = SimOptions {
        split_keys: 1_000_000,
        faults: Faults { loss: 0.0, max_delay_ms: 1 },
        ..SimOptions::new(3, dir)
    };
    let cluster = SimCluster::start(opts).await.unwrap();
    let mut c = cluster.client(1000, ClientOptions::default());
    c.put(b"warm", b"up").await.unwrap();
    let (ranges, problems) = cluster.ranges();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    let (_, leader) = cluster.leader(ranges[0].id, Duration::from_secs(10)).await.unwrap();
    (cluster, c, leader)
}

/// `n` clients (ids 1 to `n`), each having written once: its routing cache is filled.
async fn warm_clients(cluster: &SimCluster, n: u64) -> Vec<Client> {
    let mut clients = Vec::new();
    for i in 0..n {
        let mut c = cluster.client(i + 1, ClientOptions::default());
        c.put(b"warm", b"up").await.unwrap();
        clients.push(c);
    }
    clients
}

#[test]
fn concurrent_writes_to_one_group_share_log_entries() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, mut c, leader) = one_range(dir.path()).await;
        let last = || leader.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let before = last();

        const WRITERS: u64 = 64;
        // Each client warmed up first (its routing cache filled), then all write at once.
        let clients = warm_clients(&cluster, WRITERS).await;
        let before_writes = last();
        let mut tasks = Vec::new();
        for (i, mut c) in (0..WRITERS).zip(clients) {
            tasks.push(tokio::spawn(async move {
                let key = format!("k{i:03}").into_bytes();
                c.put(&key, &i.to_be_bytes()).await.map(|()| key)
            }));
        }
        let mut keys = Vec::new();
        for t in tasks {
            keys.push(t.await.unwrap().expect("a batched write failed"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let entries = last() - before_writes;
        assert!(
            entries * 2 <= WRITERS,
            "{WRITERS} concurrent writes took {entries} log entries (warm-up: {})",
            before_writes - before
        );
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(c.get(key).await.unwrap(), Some((i as u64).to_be_bytes().to_vec()));
        }
        cluster.shutdown().await;
    });
}

/// Writers that each write again as soon as they are answered (a closed loop): a freed
/// proposer waits briefly for the callers its last entry answered (`propose::LINGER`), so
/// every round takes one entry. Proposing at once, as before, split them into two halves
/// that alternated, two entries a round (this test then fails: run it with
/// `BAVL_PROPOSE_LINGER_US=0`).
#[test]
fn writers_answered_together_come_back_into_one_entry() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, mut warm, leader) = one_range(dir.path()).await;
        let last = || leader.raft.metrics().borrow().last_log_index.unwrap_or(0);

        const WRITERS: u64 = 16;
        const ROUNDS: u64 = 20;
        let clients = warm_clients(&cluster, WRITERS).await;
        let before = last();
        let mut tasks = Vec::new();
        for (i, mut c) in (0..WRITERS).zip(clients) {
            tasks.push(tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let key = format!("w{i:02}-{round:02}").into_bytes();
                    c.put(&key, &round.to_be_bytes()).await?;
                }
                Ok::<_, bavl_cluster::client::ClientError>(())
            }));
        }
        for t in tasks {
            t.await.unwrap().expect("a write failed");
        }
        let entries = last() - before;
        // One entry a round, and a few more where a writer was late.
        assert!(
            entries <= ROUNDS + ROUNDS / 2,
            "{WRITERS} writers x {ROUNDS} rounds took {entries} log entries"
        );
        assert!(entries >= ROUNDS, "{entries} entries for {ROUNDS} rounds of writes");
        for i in 0..WRITERS {
            let key = format!("w{i:02}-{:02}", ROUNDS - 1).into_bytes();
            assert_eq!(warm.get(&key).await.unwrap(), Some((ROUNDS - 1).to_be_bytes().to_vec()));
        }
        cluster.shutdown().await;
    });
}
