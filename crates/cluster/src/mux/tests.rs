//! The multiplexed transport against fake nodes: frames, ids, bounds, failures.

use super::*;
use crate::msg::{ClientOp, ClientReply, ClientRequest};
use crate::types::Epoch;
use tokio::net::TcpListener;

fn get(key: &[u8]) -> Message {
    let op = ClientOp::Get(key.to_vec());
    Message::Client(ClientRequest { group: 1, epoch: Epoch::default(), op })
}

fn value(reply: Reply) -> Vec<u8> {
    match reply {
        Reply::Client(ClientReply::Value(Some(v))) => v,
        other => panic!("unexpected {other:?}"),
    }
}

/// A fake node: after the hello it reads `n` requests, then answers the last `answer`
/// of them in reverse order, each with the key it asked for; then it closes the
/// connection if `close`.
async fn fake_node(
    n: usize,
    answer: usize,
    close: bool,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut r = BufReader::new(r);
        let mut hello = [0u8; 4];
        r.read_exact(&mut hello).await.unwrap();
        assert_eq!(hello, HELLO);
        let mut got = vec![];
        for _ in 0..n {
            let (id, body) = read_tagged(&mut r).await.unwrap().unwrap();
            let req: Request = codec::decode(&body).unwrap();
            let Message::Client(ClientRequest { op: ClientOp::Get(k), .. }) = req.msg else {
                panic!("not a get")
            };
            got.push((id, k));
        }
        let mut out = vec![];
        for (id, k) in got.into_iter().rev().take(answer) {
            let reply = codec::encode(&Reply::Client(ClientReply::Value(Some(k)))).unwrap();
            assert!(push_tagged(&mut out, id, &reply));
        }
        w.write_all(&out).await.unwrap();
        if !close {
            std::future::pending::<()>().await;
        }
    });
    (addr, task)
}

#[test]
fn the_hello_is_no_plain_frame_length() {
    assert!(u32::from_le_bytes(HELLO) as usize > MAX_FRAME);
}

#[tokio::test]
async fn tagged_lengths_out_of_bounds_are_refused_before_their_body() {
    for len in [0u32, 7, MAX_FRAME as u32 + 1, u32::MAX] {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&len.to_le_bytes()).await.unwrap();
        let e = read_tagged(&mut b).await.unwrap_err();
        assert!(e.to_string().contains("tagged frame"), "{len}: {e}");
    }
    let (mut a, mut b) = tokio::io::duplex(64);
    let mut out = vec![];
    assert!(push_tagged(&mut out, 5, b"abc"));
    assert_eq!(out, [11, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, b'a', b'b', b'c']);
    a.write_all(&out[..out.len() - 1]).await.unwrap();
    drop(a);
    assert!(read_tagged(&mut b).await.is_err(), "a cut frame is an error");
    // The node's side takes frames off a buffer: a cut one waits for more bytes.
    assert!(matches!(take_tagged(&out[..out.len() - 1]), Ok(None)));
    assert!(matches!(take_tagged(&out[..3]), Ok(None)));
    out.extend_from_slice(&[8, 0, 0, 0, 9]);
    let (id, body, taken) = take_tagged(&out).unwrap().unwrap();
    assert_eq!((id, body, taken), (5, &b"abc"[..], 15));
    assert!(matches!(take_tagged(&out[15..]), Ok(None)), "a second frame, cut");
    assert!(take_tagged(&7u32.to_le_bytes()).is_err(), "refused before its body");
}

#[tokio::test]
async fn concurrent_calls_share_one_connection_and_get_their_own_replies() {
    let (addr, server) = fake_node(3, 3, false).await;
    let t = MuxTransport::multiplexed_only(HashMap::from([(1, addr)]), Duration::from_secs(5));
    let (a, b, c) =
        tokio::join!(t.send(9, 1, get(b"a")), t.send(9, 1, get(b"bb")), t.send(9, 1, get(b"c")));
    assert_eq!(value(a.unwrap()), b"a");
    assert_eq!(value(b.unwrap()), b"bb");
    assert_eq!(value(c.unwrap()), b"c");
    server.abort();
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_a_closed_one_fails_its_callers_at_once() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = l.local_addr().unwrap();
    drop(l);
    let t = MuxTransport::multiplexed_only(HashMap::from([(1, gone)]), Duration::from_secs(5));
    assert_eq!(t.send(9, 1, get(b"x")).await.unwrap_err(), NetError::Unreachable(1));
    // The fake node answers one of two requests and closes: the other caller fails
    // long before its 5 s timeout, as `Timeout` (the request may have been acted upon).
    let (addr, server) = fake_node(2, 1, true).await;
    t.learn(1, &addr.to_string());
    let started = std::time::Instant::now();
    let (first, second) = tokio::join!(t.send(9, 1, get(b"one")), t.send(9, 1, get(b"two")));
    assert_eq!(first.unwrap_err(), NetError::Timeout(1));
    assert_eq!(value(second.unwrap()), b"two");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    server.await.unwrap();
    // With nothing listening any more, the next call opens a new connection: refused.
    assert_eq!(t.send(9, 1, get(b"x")).await.unwrap_err(), NetError::Unreachable(1));
}

#[tokio::test]
async fn no_answer_is_a_timeout() {
    let (addr, server) = fake_node(2, 0, false).await;
    let t = MuxTransport::multiplexed_only(HashMap::from([(1, addr)]), Duration::from_millis(300));
    assert_eq!(t.send(9, 1, get(b"x")).await.unwrap_err(), NetError::Timeout(1));
    server.abort();
}

/// The worked frame of docs/cluster.md section 3: the known-answer request of `tcp.rs`
/// (from node 2, put `k` = `v` in group 7 at epoch `{ 1, 300 }`) sent with id 5.
#[test]
fn a_frame_encodes_as_the_docs_say() {
    let op = ClientOp::Put(b"k".to_vec(), b"v".to_vec());
    let msg =
        Message::Client(ClientRequest { group: 7, epoch: Epoch { conf_ver: 1, version: 300 }, op });
    let body = codec::encode(&Request { from: 2, msg }).unwrap();
    let mut out = vec![];
    assert!(push_tagged(&mut out, 5, &body));
    assert_eq!(hex::encode(&out), "130000000500000000000000".to_owned() + "02010701ac0201016b0176");
    assert_eq!(hex::encode(HELLO), "62764d58");
}

/// A fake node whose first connection wedges (it reads a request, sends 5 bytes of a
/// reply and then nothing, the connection left open) and whose later ones answer every
/// request with its key.
async fn wedging_node() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut wedged = vec![];
        for n in 0.. {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut r = BufReader::new(r);
            let mut hello = [0u8; 4];
            r.read_exact(&mut hello).await.unwrap();
            if n == 0 {
                let _ = read_tagged(&mut r).await.unwrap().unwrap();
                w.write_all(&[40, 0, 0, 0, 1]).await.unwrap();
                wedged.push((r, w));
                continue;
            }
            tokio::spawn(async move {
                while let Ok(Some((id, body))) = read_tagged(&mut r).await {
                    let req: Request = codec::decode(&body).unwrap();
                    let Message::Client(ClientRequest { op: ClientOp::Get(k), .. }) = req.msg
                    else {
                        panic!("not a get")
                    };
                    let reply = codec::encode(&Reply::Client(ClientReply::Value(Some(k)))).unwrap();
                    let mut out = vec![];
                    assert!(push_tagged(&mut out, id, &reply));
                    w.write_all(&out).await.unwrap();
                }
            });
        }
    });
    (addr, task)
}

/// A connection on which no reply came during a caller's whole wait is given up: the next
/// call opens another (a connection whose node's host vanished without a reset, or whose
/// reply stalled half-way, would otherwise time out every call sent on it, for good).
#[tokio::test]
async fn a_connection_that_answers_nothing_for_a_whole_wait_is_replaced() {
    let (addr, server) = wedging_node().await;
    let t = MuxTransport::multiplexed_only(HashMap::from([(1, addr)]), Duration::from_millis(300));
    assert_eq!(t.send(9, 1, get(b"x")).await.unwrap_err(), NetError::Timeout(1));
    for k in [&b"y"[..], b"z"] {
        assert_eq!(value(t.send(9, 1, get(k)).await.unwrap()), k);
    }
    server.abort();
}
