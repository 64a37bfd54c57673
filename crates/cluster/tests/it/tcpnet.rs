//! Nodes in one process over real TCP on loopback, with fsynced logs: what the TCP tests
//! share.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::load::LoadOptions;
use bavl_cluster::msg::Transport;
use bavl_cluster::node::{raft_config, Node, NodeOptions};
use bavl_cluster::tcp::{serve, TcpTransport};
use bavl_cluster::types::RangeDesc;
use tokio::task::JoinHandle;

/// Node `id`'s options: ranges split past 40 keys, a 100 ms tick, the rebalancer on.
pub fn options(dir: &Path, id: u64, load: LoadOptions) -> NodeOptions {
    NodeOptions {
        dir: dir.join(format!("node-{id}")),
        // Snapshots every 40 entries: a joining node gets snapshots past the origin.
        raft: raft_config(50, 300, 40),
        split_keys: 40,
        capacity: 8,
        tick_ms: 100,
        seeds: vec![1, 2, 3],
        load,
        // Fsynced logs, the rebalancer on, 3 replicas per range.
        ..NodeOptions::default()
    }
}

/// Three bootstrapped nodes serving on loopback ports.
pub struct Net {
    pub peers: HashMap<u64, SocketAddr>,
    pub nodes: HashMap<u64, Arc<Node>>,
    pub servers: HashMap<u64, JoinHandle<()>>,
}

impl Net {
    pub async fn start(dir: &Path, load: LoadOptions) -> Net {
        let mut listeners = HashMap::new();
        let mut peers = HashMap::new();
        for id in 1..=3u64 {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            peers.insert(id, l.local_addr().unwrap());
            listeners.insert(id, l);
        }
        let members: BTreeSet<u64> = (1..=3).collect();
        let (mut servers, mut nodes) = (HashMap::new(), HashMap::new());
        for id in 1..=3u64 {
            let node =
                Node::open(id, options(dir, id, load.clone()), transport(&peers)).await.unwrap();
            node.bootstrap(&members).await.unwrap();
            servers.insert(id, tokio::spawn(serve(node.clone(), listeners.remove(&id).unwrap())));
            nodes.insert(id, node);
        }
        Net { peers, nodes, servers }
    }

    pub fn client(&self) -> Client {
        client(&self.peers)
    }

    pub async fn stop(self) {
        for (_, n) in self.nodes {
            n.shutdown().await;
        }
        for (_, s) in self.servers {
            s.abort();
        }
    }
}

/// A client (id 9) that starts from nodes 1-3.
pub fn client(peers: &HashMap<u64, SocketAddr>) -> Client {
    let copts = ClientOptions { max_attempts: 100, ..ClientOptions::default() };
    Client::new(9, vec![1, 2, 3], transport(peers), copts)
}

/// The ranges `client` finds, polled every 100 ms (up to `tries` times) until `done` holds.
pub async fn wait_ranges(
    client: &mut Client,
    tries: u32,
    done: impl Fn(&[RangeDesc]) -> bool,
) -> Vec<RangeDesc> {
    let mut ranges = client.ranges().await.unwrap();
    for _ in 0..tries {
        if done(&ranges) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        ranges = client.ranges().await.unwrap();
    }
    ranges
}

pub fn transport(peers: &HashMap<u64, SocketAddr>) -> Arc<dyn Transport> {
    TcpTransport::new(peers.clone(), Duration::from_secs(2))
}
