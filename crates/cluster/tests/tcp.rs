//! Three nodes in one process over real TCP on loopback, with fsynced logs: writes, splits,
//! reads back, a node restarted from its files, and a fourth node joining (ranges move to
//! it, their snapshots' chunks fetched over TCP).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::log_store::Durability;
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::node::{raft_config, Node, NodeOptions};
use bavl_cluster::tcp::{serve, TcpTransport};
use bavl_cluster::types::NodeInfo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_cluster_splits_and_serves_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut listeners = HashMap::new();
    let mut peers = HashMap::new();
    for id in 1..=3u64 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        peers.insert(id, l.local_addr().unwrap());
        listeners.insert(id, l);
    }
    let opts = |id: u64| NodeOptions {
        dir: dir.path().join(format!("node-{id}")),
        durability: Durability::Fsync,
        // Snapshots every 40 entries: a joining node gets snapshots past the origin.
        raft: raft_config(50, 300, 40),
        split_keys: 40,
        capacity: 8,
        unsafe_local_reads: false,
        tick_ms: 100,
        rebalance: true,
        replicas: 3,
        seeds: vec![1, 2, 3],
        load: Default::default(),
    };
    let members: BTreeSet<u64> = (1..=3).collect();
    let mut servers = HashMap::new();
    let mut nodes = HashMap::new();
    for id in 1..=3u64 {
        let node =
            Node::open(id, opts(id), TcpTransport::new(peers.clone(), Duration::from_secs(2)))
                .await
                .unwrap();
        node.bootstrap(&members).await.unwrap();
        servers.insert(id, tokio::spawn(serve(node.clone(), listeners.remove(&id).unwrap())));
        nodes.insert(id, node);
    }
    let copts = ClientOptions { max_attempts: 100, ..ClientOptions::default() };
    let mut client = Client::new(
        9,
        vec![1, 2, 3],
        TcpTransport::new(peers.clone(), Duration::from_secs(2)),
        copts,
    );
    let key = |i: u32| format!("k{i:05}").into_bytes();
    for i in 0..150 {
        client.put(&key(i), &i.to_le_bytes()).await.unwrap();
    }
    // Restart node 1 from its files (its port is rebound).
    servers.remove(&1).unwrap().abort();
    nodes.remove(&1).unwrap().shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let node = Node::open(1, opts(1), TcpTransport::new(peers.clone(), Duration::from_secs(2)))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind(peers[&1]).await.unwrap();
    servers.insert(1, tokio::spawn(serve(node.clone(), listener)));
    for i in 0..150 {
        assert_eq!(client.get(&key(i)).await.unwrap(), Some(i.to_le_bytes().to_vec()), "key {i}");
    }
    // Splits run on the leaders' ticks: wait for the ranges to settle below the threshold.
    let mut ranges = client.ranges().await.unwrap();
    for _ in 0..100 {
        if ranges.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ranges = client.ranges().await.unwrap();
    }
    assert!(ranges.len() >= 3, "expected splits, got {ranges:?}");
    // The restarted node hosts every range again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for d in &ranges {
        assert!(node.group(d.id).is_some(), "node 1 lacks group {} after restart", d.id);
    }
    // A fourth node joins: the others learn its address from the directory's node list, the
    // rebalancer moves replicas to it, and every key is still read back.
    let l4 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr4 = l4.local_addr().unwrap();
    let mut peers4 = peers.clone();
    peers4.insert(4, addr4);
    let n4 =
        Node::open(4, opts(4), TcpTransport::new(peers4, Duration::from_secs(2))).await.unwrap();
    servers.insert(4, tokio::spawn(serve(n4.clone(), l4)));
    client.learn(4, &addr4.to_string());
    let info = NodeInfo { id: 4, addr: addr4.to_string(), draining: false };
    assert_eq!(client.directory(ClientOp::AddNode(info)).await, Some(ClientReply::Done));
    let hosted = |n: &Node| n.groups().iter().filter(|g| g.sm.desc().id != 0).count();
    for _ in 0..300 {
        if hosted(&n4) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(hosted(&n4) >= 2, "node 4 received {} replicas", hosted(&n4));
    // Its replicas come as snapshots whose chunks it fetches over TCP (`fetch`).
    let with_chunks = |n: &Node| n.fetch_log().iter().any(|f| f.ok && f.chunks > 0);
    for _ in 0..100 {
        if with_chunks(&n4) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(with_chunks(&n4), "{:?}", n4.fetch_log());
    eprintln!("node 4 fetches: {:?}", n4.fetch_log());
    for i in 0..150 {
        assert_eq!(client.get(&key(i)).await.unwrap(), Some(i.to_le_bytes().to_vec()), "key {i}");
    }
    n4.shutdown().await;
    node.shutdown().await;
    for (_, n) in nodes {
        n.shutdown().await;
    }
    for (_, s) in servers {
        s.abort();
    }
}
