//! The multiplexed client transport: every caller sharing one [`MuxTransport`] sends its
//! requests to a node over one TCP connection, many in flight at once, as a client library
//! on an application's machine does (TiKV's client batches its commands the same way).
//!
//! Wire (docs/cluster.md section 3): the client opens the connection with the 4 bytes
//! [`HELLO`], a length no plain frame can carry (it is over [`MAX_FRAME`]), so a node tells
//! the two kinds of connection apart by their first 4 bytes. Then both ways, frames
//! `len: u32 LE | id: u64 LE | body`, `len` counting the id and the body (at least 8, at most
//! [`MAX_FRAME`]), the body a [`Request`] or a `Reply` encoded as on a plain connection. A
//! reply carries its request's id; replies come in any order.
//!
//! Costs, the reason for it: a writer task puts every frame queued since its last write into
//! one `write`, and one `recv` brings in every reply (or, on the node, every request) that
//! arrived meanwhile, so under load the system calls and wake-ups of a connection are
//! shared by the requests in flight on it. On the node, one task serves the connection: it
//! runs every request that arrived together (one slow request, a write waiting for its Raft
//! round, holds up no other) and writes every reply ready by then in one `write`.
//!
//! A call that finds no other call to the same node under way goes as a plain exchange
//! (over the pooled connections of [`TcpTransport`]): alone, it has nothing to share, and
//! the plain path makes no hand-off between tasks.
//!
//! Delivery semantics are those of [`TcpTransport`]: a refused connection is `Unreachable`;
//! once a request is queued, a broken connection or no answer within the timeout is
//! `Timeout` (it may have been acted upon). Messages that move a range's data (a `Move`, a
//! snapshot offer) go over the plain pooled transport, so a long transfer holds up nothing
//! behind it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::codec;
use crate::limits::POOL_IDLE;
use crate::msg::{BoxFuture, Message, NetError, Reply, Transport};
use crate::tcp::{is_bulk, Request, TcpTransport, MAX_FRAME};
use crate::types::NodeId;

/// The first 4 bytes of a multiplexed connection (as a little-endian length it is over
/// [`MAX_FRAME`], so no plain connection starts with it).
pub const HELLO: [u8; 4] = *b"bvMX";

/// The length a tagged frame's first 4 bytes give: refused below 8 (an id) or over
/// [`MAX_FRAME`], before anything is allocated for it.
fn tagged_len(head: [u8; 4]) -> std::io::Result<usize> {
    let len = u32::from_le_bytes(head) as usize;
    if !(8..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::other(format!("tagged frame of {len} bytes")));
    }
    Ok(len)
}

/// Reads one multiplexed frame: `(id, body)`, or `None` at a clean end of stream. A length
/// below 8 or over [`MAX_FRAME`] is refused before anything is allocated.
pub async fn read_tagged<S: AsyncRead + Unpin>(
    s: &mut S,
) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let mut head = [0u8; 4];
    match s.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = tagged_len(head)?;
    let mut id = [0u8; 8];
    s.read_exact(&mut id).await?;
    let mut body = vec![0u8; len - 8];
    s.read_exact(&mut body).await?;
    Ok(Some((u64::from_le_bytes(id), body)))
}

/// Appends the frame of `(id, body)` to `out`; false (nothing appended) if too long.
fn push_tagged(out: &mut Vec<u8>, id: u64, body: &[u8]) -> bool {
    let Some(len) = body.len().checked_add(8).filter(|l| *l <= MAX_FRAME) else { return false };
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(body);
    true
}

/// The sending side of one connection: frames queue in `buf`; a writer task takes them all
/// at once.
struct Outbox {
    buf: Mutex<Vec<u8>>,
    wake: Notify,
    dead: AtomicBool,
}

impl Outbox {
    fn new(first: Vec<u8>) -> Arc<Self> {
        Arc::new(Outbox {
            buf: Mutex::new(first),
            wake: Notify::new(),
            dead: AtomicBool::new(false),
        })
    }

    /// Queues a frame; false if too long to send or the connection is broken.
    fn push(&self, id: u64, body: &[u8]) -> bool {
        let mut buf = self.buf.lock().expect("not poisoned");
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        let was_empty = buf.is_empty();
        if !push_tagged(&mut buf, id, body) {
            return false;
        }
        drop(buf);
        if was_empty {
            // The writer takes the whole buffer; a non-empty one is already announced.
            self.wake.notify_one();
        }
        true
    }

    fn close(&self) {
        self.dead.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// The writer task: one `write` per wake-up for everything queued.
    async fn write_all(self: Arc<Self>, mut w: OwnedWriteHalf) {
        loop {
            let batch = std::mem::take(&mut *self.buf.lock().expect("not poisoned"));
            if batch.is_empty() {
                if self.dead.load(Ordering::Acquire) {
                    return;
                }
                self.wake.notified().await;
                continue;
            }
            if w.write_all(&batch).await.is_err() {
                self.close();
                return;
            }
        }
    }
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>;

/// Where a node's connection lives (opened under its lock).
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Conn>>>>;

/// One connection to one node.
struct Conn {
    addr: SocketAddr,
    out: Arc<Outbox>,
    pending: Arc<Pending>,
    next_id: AtomicU64,
    /// Calls to this node under way (plain or multiplexed).
    calls: AtomicUsize,
    /// Milliseconds from `opened` to the last call's start, and 1 + those to the last
    /// reply's arrival (0: none yet; written by the reader task).
    opened: Instant,
    last_call: AtomicU64,
    last_reply: Arc<AtomicU64>,
    tasks: [AbortHandle; 2],
}

/// Counts a call out when it ends, however it ends.
struct Leaving<'a>(&'a AtomicUsize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Conn {
    async fn open(addr: SocketAddr, timeout: Duration) -> Option<Arc<Conn>> {
        let s = tokio::time::timeout(timeout, TcpStream::connect(addr)).await.ok()?.ok()?;
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        let out = Outbox::new(HELLO.to_vec());
        let writer = tokio::spawn(out.clone().write_all(w)).abort_handle();
        let pending: Arc<Pending> = Arc::default();
        let (opened, last_reply) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        let r = BufReader::new(r);
        let reading = Self::read_all(r, out.clone(), pending.clone(), opened, last_reply.clone());
        let tasks = [writer, tokio::spawn(reading).abort_handle()];
        let (next_id, calls, last_call) =
            (AtomicU64::new(1), AtomicUsize::new(0), AtomicU64::new(0));
        Some(Arc::new(Conn {
            addr,
            out,
            pending,
            next_id,
            calls,
            opened,
            last_call,
            last_reply,
            tasks,
        }))
    }

    /// The reader task: hands each reply to its caller (noting when it came); at the end,
    /// fails every caller still waiting.
    async fn read_all(
        mut r: BufReader<tokio::net::tcp::OwnedReadHalf>,
        out: Arc<Outbox>,
        pending: Arc<Pending>,
        opened: Instant,
        last_reply: Arc<AtomicU64>,
    ) {
        while let Ok(Some((id, body))) = read_tagged(&mut r).await {
            last_reply.store(millis_since(opened) + 1, Ordering::Release);
            let waiter = pending.lock().expect("not poisoned").remove(&id);
            if let Some(tx) = waiter {
                let _ = tx.send(body);
            }
        }
        fail(&out, &pending);
    }

    /// Milliseconds since the connection opened.
    fn now(&self) -> u64 {
        millis_since(self.opened)
    }

    /// Marks the connection broken and fails every caller still waiting; the next call
    /// opens a new one.
    fn fail(&self) {
        fail(&self.out, &self.pending);
    }

    /// Whether a call may use this connection to `addr`: not broken, and used within
    /// [`POOL_IDLE`] (a node closes a connection idle for longer, [`crate::limits::ConnLimits::idle`]).
    fn fit_for(&self, addr: SocketAddr) -> bool {
        let idle = self.now().saturating_sub(self.last_call.load(Ordering::Acquire));
        !self.out.dead.load(Ordering::Acquire)
            && self.addr == addr
            && idle < POOL_IDLE.as_millis() as u64
    }
}

fn millis_since(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}

/// Marks a connection broken and fails every caller waiting on it (their senders dropped).
fn fail(out: &Outbox, pending: &Pending) {
    out.close();
    pending.lock().expect("not poisoned").clear();
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A transport whose callers share one multiplexed connection per node (module docs).
pub struct MuxTransport {
    peers: Mutex<HashMap<NodeId, SocketAddr>>,
    /// One slot per node: opening a connection to one node holds up no call to another.
    conns: Mutex<HashMap<NodeId, Slot>>,
    /// For messages that move a range's data.
    plain: Arc<TcpTransport>,
    timeout: Duration,
    /// Whether a call with no other call to its node under way goes plain (module docs).
    lone_plain: bool,
}

impl MuxTransport {
    pub fn new(peers: HashMap<NodeId, SocketAddr>, timeout: Duration) -> Arc<Self> {
        Self::build(peers, timeout, true)
    }

    /// Every call multiplexed, even a lone one (for tests of the multiplexed path).
    pub fn multiplexed_only(peers: HashMap<NodeId, SocketAddr>, timeout: Duration) -> Arc<Self> {
        Self::build(peers, timeout, false)
    }

    fn build(peers: HashMap<NodeId, SocketAddr>, timeout: Duration, lone_plain: bool) -> Arc<Self> {
        Arc::new(MuxTransport {
            plain: TcpTransport::new(peers.clone(), timeout),
            peers: Mutex::new(peers),
            conns: Mutex::default(),
            timeout,
            lone_plain,
        })
    }

    /// The live connection to `to` at its current address, opened if there is none.
    async fn conn(&self, to: NodeId) -> Result<Arc<Conn>, NetError> {
        let addr = self.peers.lock().expect("not poisoned").get(&to).copied();
        let addr = addr.ok_or(NetError::Unreachable(to))?;
        let slot = self.conns.lock().expect("not poisoned").entry(to).or_default().clone();
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.fit_for(addr)) {
            c.last_call.store(c.now(), Ordering::Release);
            return Ok(c.clone());
        }
        *slot = None;
        let c = Conn::open(addr, self.timeout).await.ok_or(NetError::Unreachable(to))?;
        *slot = Some(c.clone());
        c.last_call.store(c.now(), Ordering::Release);
        Ok(c)
    }

    async fn call(&self, from: NodeId, to: NodeId, msg: Message) -> Result<Reply, NetError> {
        let conn = self.conn(to).await?;
        let alone = conn.calls.fetch_add(1, Ordering::AcqRel) == 0;
        let _call = Leaving(&conn.calls);
        if alone && self.lone_plain {
            // Nothing to share a write or a wake-up with: a plain exchange is one task on
            // each side, where the multiplexed path hands off to the writer and from the
            // reader (docs/cluster.md section 3).
            return self.plain.send(from, to, msg).await;
        }
        let bytes = codec::encode(&Request { from, msg }).map_err(|_| NetError::Unreachable(to))?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().expect("not poisoned").insert(id, tx);
        if !conn.out.push(id, &bytes) {
            conn.pending.lock().expect("not poisoned").remove(&id);
            return Err(NetError::Unreachable(to));
        }
        let started = conn.now();
        let body = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(body)) => body,
            _ => {
                conn.pending.lock().expect("not poisoned").remove(&id);
                if conn.last_reply.load(Ordering::Acquire) <= started {
                    // Not one reply came in the whole wait: the connection is wedged (the
                    // node's host gone without a reset, or a reply stalled half-way). A
                    // timed-out plain connection is dropped too; so is this one.
                    conn.fail();
                }
                return Err(NetError::Timeout(to));
            }
        };
        codec::decode(&body).map_err(|_| NetError::Timeout(to))
    }
}

impl Transport for MuxTransport {
    fn send(
        &self,
        from: NodeId,
        to: NodeId,
        msg: Message,
    ) -> BoxFuture<'_, Result<Reply, NetError>> {
        if is_bulk(&msg) {
            return self.plain.send(from, to, msg);
        }
        Box::pin(self.call(from, to, msg))
    }

    fn learn(&self, id: NodeId, addr: &str) {
        self.plain.learn(id, addr);
        // A changed address: the next call opens a connection to the new one (`conn`).
        if let Ok(addr) = addr.parse::<SocketAddr>() {
            self.peers.lock().expect("not poisoned").insert(id, addr);
        }
    }
}

mod node;
#[cfg(test)]
mod tests;

pub(crate) use node::serve;
pub use node::{take_tagged, MAX_IN_FLIGHT};
