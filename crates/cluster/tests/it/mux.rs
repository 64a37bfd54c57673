//! Many clients sharing one multiplexed connection per node (`mux::MuxTransport`), against
//! three real nodes over TCP: every write is read back by its writer and by the others,
//! and the clients go on after a node restarts under them (their connection to it breaks
//! and is opened again).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::tcpnet::{options, transport, Net};
use bavl_cluster::client::{Client, ClientError, ClientOptions};
use bavl_cluster::msg::Transport;
use bavl_cluster::mux::MuxTransport;
use bavl_cluster::node::Node;
use bavl_cluster::tcp::serve;

/// `n` clients on one transport; `multiplexed_only`: even a lone call multiplexed (else
/// it goes plain, and only concurrent calls share the connection).
fn clients(peers: &HashMap<u64, SocketAddr>, n: u64, multiplexed_only: bool) -> Vec<Client> {
    let t = Duration::from_secs(2);
    let shared: Arc<dyn Transport> = if multiplexed_only {
        MuxTransport::multiplexed_only(peers.clone(), t)
    } else {
        MuxTransport::new(peers.clone(), t)
    };
    let copts = ClientOptions { max_attempts: 100, ..ClientOptions::default() };
    (0..n).map(|i| Client::new(100 + i, vec![1, 2, 3], shared.clone(), copts.clone())).collect()
}

fn key(tag: &str, c: usize, i: u32) -> Vec<u8> {
    format!("{tag}-{c:02}-{i:03}").into_bytes()
}

/// A put, tried again while its outcome is unknown (a connection broke under it, or the
/// leader changed: putting the same value again is harmless).
async fn put(client: &mut Client, key: &[u8], value: &[u8]) {
    for _ in 0..5 {
        match client.put(key, value).await {
            Ok(()) => return,
            Err(ClientError::Unknown(_)) => continue,
            Err(e) => panic!("put: {e}"),
        }
    }
    panic!("put {key:?}: outcome unknown five times");
}

/// Each client writes its own keys, all at once, and then reads back its neighbour's.
async fn round(clients: Vec<Client>, tag: &'static str) -> Vec<Client> {
    let n = clients.len();
    let mut tasks = vec![];
    for (c, mut client) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..20u32 {
                put(&mut client, &key(tag, c, i), &i.to_le_bytes()).await;
                let got = client.get(&key(tag, c, i)).await.unwrap();
                assert_eq!(got, Some(i.to_le_bytes().to_vec()));
            }
            client
        }));
    }
    let mut clients = vec![];
    for t in tasks {
        clients.push(t.await.unwrap());
    }
    for (c, client) in clients.iter_mut().enumerate() {
        let other = (c + 1) % n;
        for i in 0..20u32 {
            let got = client.get(&key(tag, other, i)).await.unwrap();
            assert_eq!(got, Some(i.to_le_bytes().to_vec()), "{tag}: client {c} reads {other}/{i}");
        }
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sharing_connections_read_their_writes_across_a_restart() {
    across_a_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_always_multiplexed_read_their_writes_across_a_restart() {
    across_a_restart(true).await;
}

async fn across_a_restart(multiplexed_only: bool) {
    let dir = tempfile::tempdir().unwrap();
    let Net { peers, mut nodes, mut servers } = Net::start(dir.path(), Default::default()).await;
    let mut cs = clients(&peers, 16, multiplexed_only);
    // The groups elect their first leaders: wait for a write to go through.
    put(&mut cs[0], b"ready", b"").await;
    let cs = round(cs, "a").await;
    // Restart node 1 from its files on the same port: the shared connection to it breaks.
    servers.remove(&1).unwrap().abort();
    nodes.remove(&1).unwrap().shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let node = Node::open(1, options(dir.path(), 1, Default::default()), transport(&peers));
    let node = node.await.unwrap();
    let listener = tokio::net::TcpListener::bind(peers[&1]).await.unwrap();
    servers.insert(1, tokio::spawn(serve(node.clone(), listener)));
    nodes.insert(1, node);
    let cs = round(cs, "b").await;
    round(cs, "c").await;
    for (_, n) in nodes {
        n.shutdown().await;
    }
    for (_, s) in servers {
        s.abort();
    }
}
