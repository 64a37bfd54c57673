//! The real transport: length-prefixed binary frames over TCP.
//!
//! Frame: `len: u32 LE | body`, the body the binary encoding ([`crate::codec`]) of a
//! request `Request { from: node, msg: Message }` or of the answer, a `Reply`. A frame
//! longer than [`MAX_FRAME`] is refused before anything is allocated and the connection is
//! dropped; a frame that does not decode drops the connection too. Connections are kept
//! in a small pool per peer and reused.
//!
//! Delivery semantics for the callers: a refused connection is `Unreachable` (nothing was
//! delivered); anything after the request was written (I/O error, no answer within the
//! timeout) is `Timeout` (it may have been acted upon).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::codec;
use crate::limits::{by, ConnLimits, POOL_IDLE};
use crate::msg::{BoxFuture, ClientOp, Message, NetError, RaftRpc, Reply, Transport};
use crate::node::Node;
use crate::types::NodeId;

/// Largest frame accepted (64 MiB: a snapshot of a large range is one frame).
pub const MAX_FRAME: usize = 64 << 20;

/// What a frame to a node holds (public for the lab's counting server).
#[derive(Serialize, Deserialize)]
pub struct Request {
    pub from: NodeId,
    pub msg: Message,
}

/// Reads one frame; `None` at a clean end of stream. Give it a buffered reader (as
/// [`serve`] and the transport do), so a frame costs one `recv`, not two.
pub async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    read_body(s, len).await.map(Some)
}

/// Reads the body of a frame whose 4 length bytes were read (refused over [`MAX_FRAME`]).
async fn read_body<S: AsyncRead + Unpin>(s: &mut S, len: [u8; 4]) -> std::io::Result<Vec<u8>> {
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes over the {MAX_FRAME} limit"
        )));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Writes one frame (refused if longer than [`MAX_FRAME`]) with one write: the length and
/// the body leave in one segment (two writes on a `TCP_NODELAY` socket are two segments and
/// can wake the reader twice).
pub async fn write_frame<S: AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).ok().filter(|l| (*l as usize) <= MAX_FRAME);
    let len = len.ok_or_else(|| std::io::Error::other("frame too large to send"))?;
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(bytes);
    s.write_all(&frame).await?;
    s.flush().await
}

/// What a server does beside serving (the lab counts messages through it): `before` sees
/// each request and its size on the wire, `after` the size of its reply.
pub trait ServeHook: Send + Sync + 'static {
    type Tag: Send + 'static;
    /// The answer to a plain frame that is one of the hook's own queries, not a request.
    fn query(&self, _frame: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn before(&self, msg: &Message, wire_in: usize) -> Self::Tag;
    fn after(&self, tag: Self::Tag, wire_out: usize);
}

impl ServeHook for () {
    type Tag = ();
    fn before(&self, _: &Message, _: usize) {}
    fn after(&self, _: (), _: usize) {}
}

/// Serves `node` on `listener` until the task is dropped: plain connections (one
/// exchange at a time) and multiplexed ones (they open with [`crate::mux::HELLO`]), under
/// the default [`ConnLimits`].
pub async fn serve(node: Arc<Node>, listener: TcpListener) {
    serve_with(node, listener, Arc::new(()), ConnLimits::default()).await
}

/// [`serve`], with a hook and limits.
pub async fn serve_with<H: ServeHook>(
    node: Arc<Node>,
    listener: TcpListener,
    hook: Arc<H>,
    limits: ConnLimits,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_conns));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, most likely: wait for some to close, not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Past the limit the connection is closed at once (dropped).
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let _ = stream.set_nodelay(true);
        let (node, hook) = (node.clone(), hook.clone());
        tokio::spawn(async move {
            serve_conn(node, stream, hook, limits).await;
            drop(slot);
        });
    }
}

/// The encoded reply to one encoded request; `None` (drop the connection) if the node
/// stopped or the request does not decode. `overhead`: the framing bytes around a body.
pub(crate) async fn answer<H: ServeHook>(
    node: &Node,
    hook: &H,
    frame: &[u8],
    overhead: usize,
) -> Option<Vec<u8>> {
    if node.is_stopped() {
        return None;
    }
    let req = codec::decode::<Request>(frame).ok()?;
    let tag = hook.before(&req.msg, frame.len() + overhead);
    let bytes = codec::encode(&node.handle(req.msg).await).ok()?;
    hook.after(tag, bytes.len() + overhead);
    Some(bytes)
}

async fn serve_conn<H: ServeHook>(
    node: Arc<Node>,
    stream: TcpStream,
    hook: Arc<H>,
    limits: ConnLimits,
) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut first = true;
    while let Some((head, begun)) = next_head(&mut r, &limits).await {
        if std::mem::take(&mut first) && head == crate::mux::HELLO {
            return crate::mux::serve(node, r, w, hook, limits).await;
        }
        let len = u32::from_le_bytes(head) as usize;
        let Ok(f) = by(begun + limits.frame_time(len), read_body(&mut r, head)).await else {
            return;
        };
        let bytes = match hook.query(&f) {
            Some(b) => b,
            None => match answer(&node, &*hook, &f, 4).await {
                Some(b) => b,
                None => return,
            },
        };
        let taken = Instant::now() + limits.frame_time(bytes.len());
        if by(taken, write_frame(&mut w, &bytes)).await.is_err() {
            return;
        }
    }
}

/// The 4 length bytes of the next frame, and when its first byte was there: waits at most
/// `limits.idle` for a first byte, then [`ConnLimits::frame_base`] for the other three;
/// `None` at the end of the stream, on an error or past a bound.
async fn next_head<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    limits: &ConnLimits,
) -> Option<([u8; 4], Instant)> {
    let there = by(Instant::now() + limits.idle, r.fill_buf()).await.ok()?.len();
    if there == 0 {
        return None;
    }
    let begun = Instant::now();
    let mut head = [0u8; 4];
    by(begun + limits.frame_base, r.read_exact(&mut head)).await.ok()?;
    Some((head, begun))
}

/// How long a `Move` request may take (it waits for a snapshot transfer and three
/// membership changes), instead of the transport's timeout.
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether a message moves a range's data (a `Move`, a snapshot offer): it may take
/// [`MOVE_TIMEOUT`], and the multiplexed transport sends it over a plain connection.
pub(crate) fn is_bulk(msg: &Message) -> bool {
    matches!(msg, Message::Client(r) if matches!(r.op, ClientOp::Move { .. }))
        || matches!(msg, Message::Raft { rpc, .. } if matches!(**rpc, RaftRpc::Snapshot(_)))
}

/// A connection to reuse, and when it was last used.
type Pooled = (BufReader<TcpStream>, Instant);

/// A TCP transport to a set of peers, which grows as addresses are learned.
pub struct TcpTransport {
    peers: Mutex<HashMap<NodeId, SocketAddr>>,
    pool: Mutex<HashMap<NodeId, Vec<Pooled>>>,
    timeout: Duration,
}

/// Whether a pooled connection is still open: it holds no unread byte, and the node has
/// not closed it (a non-blocking peek at the socket itself, not at tokio's cached readiness,
/// which may not have seen the node's close yet). A call on a connection the node closed
/// would fail as `Timeout` though nothing was delivered.
fn still_open(s: &BufReader<TcpStream>) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    s.buffer().is_empty()
        && matches!(socket2::SockRef::from(s.get_ref()).peek(&mut byte),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

impl TcpTransport {
    pub fn new(peers: HashMap<NodeId, SocketAddr>, timeout: Duration) -> Arc<Self> {
        Arc::new(TcpTransport { peers: Mutex::new(peers), pool: Mutex::default(), timeout })
    }

    async fn call(&self, from: NodeId, to: NodeId, msg: Message) -> Result<Reply, NetError> {
        let addr = self.peers.lock().expect("not poisoned").get(&to).copied();
        let addr = addr.ok_or(NetError::Unreachable(to))?;
        // A snapshot offer is answered once the receiver fetched every chunk.
        let timeout = if is_bulk(&msg) { MOVE_TIMEOUT } else { self.timeout };
        let mut stream = match self.pooled(to) {
            Some(s) => s,
            None => {
                let s = tokio::time::timeout(self.timeout, TcpStream::connect(addr)).await;
                let s = s
                    .map_err(|_| NetError::Unreachable(to))?
                    .map_err(|_| NetError::Unreachable(to))?;
                let _ = s.set_nodelay(true);
                BufReader::new(s)
            }
        };
        let bytes = codec::encode(&Request { from, msg }).map_err(|_| NetError::Unreachable(to))?;
        let exchange = async {
            write_frame(&mut stream, &bytes).await?;
            read_frame(&mut stream).await
        };
        let frame = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(Some(f))) => f,
            _ => return Err(NetError::Timeout(to)),
        };
        let reply = codec::decode(&frame).map_err(|_| NetError::Timeout(to))?;
        let mut pool = self.pool.lock().expect("not poisoned");
        let list = pool.entry(to).or_default();
        list.retain(|(_, used)| used.elapsed() < POOL_IDLE);
        list.push((stream, Instant::now()));
        Ok(reply)
    }

    /// The most recently used pooled connection to `to` that is still fit to use: used
    /// within [`POOL_IDLE`] (a node closes idle ones) and still open ([`still_open`]).
    fn pooled(&self, to: NodeId) -> Option<BufReader<TcpStream>> {
        let mut pool = self.pool.lock().expect("not poisoned");
        let list = pool.get_mut(&to)?;
        while let Some((s, used)) = list.pop() {
            if used.elapsed() < POOL_IDLE && still_open(&s) {
                return Some(s);
            }
        }
        None
    }
}

impl Transport for TcpTransport {
    fn send(
        &self,
        from: NodeId,
        to: NodeId,
        msg: Message,
    ) -> BoxFuture<'_, Result<Reply, NetError>> {
        Box::pin(self.call(from, to, msg))
    }

    fn learn(&self, id: NodeId, addr: &str) {
        let Ok(addr) = addr.parse::<SocketAddr>() else { return };
        let mut peers = self.peers.lock().expect("not poisoned");
        if peers.insert(id, addr) != Some(addr) {
            // A changed address: forget the pooled connections to the old one.
            self.pool.lock().expect("not poisoned").remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_back_to_back_read_whole_through_a_buffer() {
        let (mut a, b) = tokio::io::duplex(64);
        let mut b = BufReader::new(b);
        let big = vec![7u8; 1000];
        let writer = tokio::spawn(async move {
            write_frame(&mut a, b"one").await.unwrap();
            write_frame(&mut a, b"").await.unwrap();
            write_frame(&mut a, &big).await.unwrap();
        });
        assert_eq!(read_frame(&mut b).await.unwrap().unwrap(), b"one");
        assert_eq!(read_frame(&mut b).await.unwrap().unwrap(), b"");
        assert_eq!(read_frame(&mut b).await.unwrap().unwrap(), vec![7u8; 1000]);
        writer.await.unwrap();
        assert!(read_frame(&mut b).await.unwrap().is_none(), "a clean end is None");
    }

    /// A known-answer vector of the wire (docs/cluster.md section 3), worked by hand from
    /// postcard's format: from 2; `Message::Client` (variant 1) { group 7, epoch { 1, 300 },
    /// `ClientOp::Put` (variant 1) (b"k", b"v") }; and the reply `Client(Value(Some(b"v")))`.
    #[test]
    fn a_request_and_a_reply_encode_as_the_docs_say() {
        use crate::msg::{ClientReply, ClientRequest};
        use crate::types::Epoch;
        let op = ClientOp::Put(b"k".to_vec(), b"v".to_vec());
        let epoch = Epoch { conf_ver: 1, version: 300 };
        let msg = Message::Client(ClientRequest { group: 7, epoch, op });
        let bytes = codec::encode(&Request { from: 2, msg }).unwrap();
        assert_eq!(hex::encode(&bytes), "02010701ac0201016b0176");
        let back: Request = codec::decode(&bytes).unwrap();
        assert_eq!(back.from, 2);
        assert!(matches!(back.msg, Message::Client(r) if r.group == 7 && r.epoch == epoch));
        let reply = Reply::Client(ClientReply::Value(Some(b"v".to_vec())));
        assert_eq!(hex::encode(codec::encode(&reply).unwrap()), "0100010176");
    }

    /// Every truncation and every single-byte change of an encoded request decodes to an
    /// error or to some request, never a panic, and what decodes encodes back to itself.
    #[test]
    fn damaged_requests_never_panic() {
        use crate::msg::ClientRequest;
        use crate::types::{BatchOp, Epoch};
        let ops = vec![BatchOp::Put(vec![1; 20], vec![2; 100]), BatchOp::Delete(b"gone".to_vec())];
        let op = ClientOp::Batch(ops);
        let msg = Message::Client(ClientRequest { group: 9, epoch: Epoch::default(), op });
        let bytes = codec::encode(&Request { from: 3, msg }).unwrap();
        let check = |b: &[u8]| {
            if let Ok(r) = codec::decode::<Request>(b) {
                let again = codec::encode(&r).unwrap();
                let r2: Request = codec::decode(&again).unwrap();
                assert_eq!(codec::encode(&r2).unwrap(), again);
            }
        };
        for cut in 0..bytes.len() {
            assert!(codec::decode::<Request>(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                check(&b);
            }
        }
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_before_its_body() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&((MAX_FRAME as u32) + 1).to_le_bytes()).await.unwrap();
        let e = read_frame(&mut b).await.unwrap_err();
        assert!(e.to_string().contains("over the"), "{e}");
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[5, 0, 0, 0, 1, 2]).await.unwrap();
        drop(a);
        assert!(read_frame(&mut b).await.is_err(), "a cut frame is an error, not a frame");
    }
}
