//! Three nodes in one process over real TCP on loopback, with fsynced logs: writes, splits,
//! reads back, a node restarted from its files, and a fourth node joining (ranges move to
//! it, their snapshots' chunks fetched over TCP).

use std::time::Duration;

use crate::tcpnet::{client, options, transport, wait_ranges, Net};
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::node::Node;
use bavl_cluster::tcp::serve;
use bavl_cluster::types::NodeInfo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_cluster_splits_and_serves_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let Net { peers, mut nodes, mut servers } = Net::start(dir.path(), Default::default()).await;
    let opts = |id: u64| options(dir.path(), id, Default::default());
    let mut client = client(&peers);
    let key = |i: u32| format!("k{i:05}").into_bytes();
    for i in 0..150 {
        client.put(&key(i), &i.to_le_bytes()).await.unwrap();
    }
    // Restart node 1 from its files (its port is rebound).
    servers.remove(&1).unwrap().abort();
    nodes.remove(&1).unwrap().shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let node = Node::open(1, opts(1), transport(&peers)).await.unwrap();
    let listener = tokio::net::TcpListener::bind(peers[&1]).await.unwrap();
    servers.insert(1, tokio::spawn(serve(node.clone(), listener)));
    for i in 0..150 {
        assert_eq!(client.get(&key(i)).await.unwrap(), Some(i.to_le_bytes().to_vec()), "key {i}");
    }
    // Splits run on the leaders' ticks: wait for the ranges to settle below the threshold.
    let ranges = wait_ranges(&mut client, 100, |r| r.len() >= 3).await;
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
    let n4 = Node::open(4, opts(4), transport(&peers4)).await.unwrap();
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
