//! A node's connections under their bounds (`limits::ConnLimits`, docs/cluster.md section 3,
//! "Bounds on a connection"), against a real node over TCP: a silent connection, a frame
//! dripped byte by byte, a peer that reads no replies and connections past the limit are
//! all closed by the node, on plain and multiplexed connections alike; and the clients'
//! side does not send on a connection the node closed.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::codec;
use bavl_cluster::limits::ConnLimits;
use bavl_cluster::load::LoadOptions;
use bavl_cluster::msg::{ClientOp, ClientRequest, Message, Transport};
use bavl_cluster::mux::HELLO;
use bavl_cluster::node::{Node, NodeOptions};
use bavl_cluster::tcp::{serve_with, Request, TcpTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One node, a cluster of its own, served under `limits`.
struct One {
    addr: SocketAddr,
    node: Arc<Node>,
    server: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl One {
    async fn start(limits: ConnLimits) -> One {
        let dir = tempfile::tempdir().unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let base = crate::tcpnet::options(dir.path(), 1, LoadOptions::default());
        let opts = NodeOptions { replicas: 1, seeds: vec![1], rebalance: false, ..base };
        let node = Node::open(1, opts, transport(addr)).await.unwrap();
        node.bootstrap(&BTreeSet::from([1])).await.unwrap();
        let server = tokio::spawn(serve_with(node.clone(), l, Arc::new(()), limits));
        One { addr, node, server, _dir: dir }
    }

    fn client(&self) -> Client {
        let copts = ClientOptions { max_attempts: 100, ..ClientOptions::default() };
        Client::new(9, vec![1], transport(self.addr), copts)
    }

    async fn stop(self) {
        self.node.shutdown().await;
        self.server.abort();
    }
}

fn transport(addr: SocketAddr) -> Arc<dyn Transport> {
    TcpTransport::new(HashMap::from([(1, addr)]), Duration::from_secs(2))
}

/// Bounds short enough for a test.
fn short() -> ConnLimits {
    ConnLimits {
        idle: Duration::from_millis(500),
        frame_base: Duration::from_millis(300),
        min_rate: 64 << 20,
        max_conns: 64,
    }
}

/// How long until the node closes `s` (reading and dropping whatever it sends); `None` if
/// it is still open after `wait`.
async fn closed_after(s: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = wait.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

/// The encoded plain request of a get of `key` in `group` at `epoch` (whatever the
/// answer: a value or `Stale`, it is an answer).
fn get_request(d: &bavl_cluster::types::RangeDesc, key: &[u8]) -> Vec<u8> {
    let op = ClientOp::Get(key.to_vec());
    let msg = Message::Client(ClientRequest { group: d.id, epoch: d.epoch, op });
    codec::encode(&Request { from: 9, msg }).unwrap()
}

fn tagged(id: u64, body: &[u8]) -> Vec<u8> {
    let mut f = ((body.len() + 8) as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&id.to_le_bytes());
    f.extend_from_slice(body);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_once_idle() {
    let one = One::start(short()).await;
    let mut plain = TcpStream::connect(one.addr).await.unwrap();
    let mut mux = TcpStream::connect(one.addr).await.unwrap();
    mux.write_all(&HELLO).await.unwrap();
    let wait = Duration::from_secs(5);
    let (a, b) = tokio::join!(closed_after(&mut plain, wait), closed_after(&mut mux, wait));
    for t in [a, b] {
        let t = t.expect("closed");
        assert!(t >= Duration::from_millis(400), "closed after {t:?}, before its idle time");
    }
    one.stop().await;
}

/// A frame whose bytes come one at a time, every 30 ms: its bound (300 ms and its length
/// at 64 MiB/s) passes long before its last byte, on either kind of connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_dripped_byte_by_byte_is_cut_off() {
    let one = One::start(ConnLimits { idle: Duration::from_secs(30), ..short() }).await;
    let body = vec![0u8; 200];
    let mut plain = (200u32.to_le_bytes().to_vec(), TcpStream::connect(one.addr).await.unwrap());
    plain.0.extend_from_slice(&body);
    let mut muxed = (HELLO.to_vec(), TcpStream::connect(one.addr).await.unwrap());
    muxed.0.extend(tagged(1, &body));
    for (bytes, s) in [&mut plain, &mut muxed] {
        let (mut r, mut w) = s.split();
        let drip = async {
            for b in bytes.iter() {
                if w.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            std::future::pending::<()>().await
        };
        let closed = async {
            let mut buf = [0u8; 64];
            let _ = r.read(&mut buf).await;
        };
        let started = Instant::now();
        tokio::select! {
            _ = drip => unreachable!(),
            _ = closed => {}
            _ = tokio::time::sleep(Duration::from_secs(5)) => panic!("a dripped frame was waited for"),
        }
        // 300 ms for the frame (and the hello, read first, is no part of it).
        let t = started.elapsed();
        assert!(t >= Duration::from_millis(250) && t < Duration::from_secs(3), "{t:?}");
    }
    one.stop().await;
}

/// A multiplexed peer that sends many requests for a large value and reads none of the
/// replies: once the node's write of them stalls past its bound, the node drops the
/// connection (and its replies), instead of holding them and a task forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_reads_no_replies_is_dropped() {
    let one = One::start(ConnLimits { idle: Duration::from_secs(30), ..short() }).await;
    let mut client = one.client();
    let big = vec![7u8; 64 << 10];
    client.put(b"big", &big).await.unwrap();
    let range = client.ranges().await.unwrap().remove(0);
    let request = get_request(&range, b"big");
    let mut s = TcpStream::connect(one.addr).await.unwrap();
    let mut out = HELLO.to_vec();
    let n = 600u64; // 600 x 64 KiB: about 39 MB of replies, far beyond socket buffers
    for id in 0..n {
        out.extend(tagged(id, &request));
    }
    s.write_all(&out).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(k)) => got += k,
        }
    };
    assert!(ended, "the node still held the connection after {got} bytes read");
    assert!(got < (n as usize) * big.len(), "every reply came ({got} bytes): nothing stalled");
    // The node serves on.
    assert_eq!(client.get(b"big").await.unwrap(), Some(big));
    one.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_closed_at_once() {
    let limits = ConnLimits { idle: Duration::from_secs(30), max_conns: 3, ..short() };
    let one = One::start(limits).await;
    let mut held = vec![];
    for _ in 0..3 {
        held.push(TcpStream::connect(one.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(one.addr).await.unwrap();
    let t = closed_after(&mut extra, Duration::from_secs(2)).await.expect("closed at once");
    assert!(t < Duration::from_secs(1), "{t:?}");
    for s in &mut held {
        assert!(closed_after(s, Duration::from_millis(200)).await.is_none(), "served on");
    }
    // One let go: its place is served again, a request answered.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut client = one.client();
    client.put(b"k", b"v").await.unwrap();
    assert_eq!(client.get(b"k").await.unwrap(), Some(b"v".to_vec()));
    one.stop().await;
}

/// The node closes a pooled connection once idle; the transport's next call does not
/// send on it (which would fail as `Timeout`, though nothing was delivered) but opens
/// another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_node_closed_is_not_reused() {
    let one = One::start(short()).await;
    let mut client = one.client();
    client.put(b"k", b"v").await.unwrap();
    let range = client.ranges().await.unwrap().remove(0);
    let t = TcpTransport::new(HashMap::from([(1, one.addr)]), Duration::from_secs(2));
    let op = ClientOp::Get(b"k".to_vec());
    let get =
        || Message::Client(ClientRequest { group: range.id, epoch: range.epoch, op: op.clone() });
    for round in 0..3 {
        t.send(9, 1, get()).await.unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        // Past the node's idle time: it closed the connection the transport pooled.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    one.stop().await;
}
