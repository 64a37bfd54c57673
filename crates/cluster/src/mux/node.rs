//! The node's side of a multiplexed connection.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::time::Instant;

use super::{push_tagged, tagged_len};
use crate::limits::{by, ConnLimits};
use crate::node::Node;
use crate::tcp::{answer, ServeHook, MAX_FRAME};

/// The first whole tagged frame of `buf`: `(id, body, bytes taken)`; `Ok(None)` if `buf`
/// holds no whole frame yet; an error for a length out of bounds (refused before its body
/// arrives).
pub fn take_tagged(buf: &[u8]) -> std::io::Result<Option<(u64, &[u8], usize)>> {
    let Some(head) = buf.first_chunk::<4>() else { return Ok(None) };
    let len = tagged_len(*head)?;
    let Some(frame) = buf.get(4..4 + len) else { return Ok(None) };
    let (id, body) = frame.split_at(8);
    Ok(Some((u64::from_le_bytes(id.try_into().expect("8 bytes")), body, 4 + len)))
}

/// Requests a node runs at once for one multiplexed connection; past it, it reads no more
/// from that connection until some finish (what a client can make a node hold is bounded:
/// this many requests, and the bytes of one frame beyond them).
pub const MAX_IN_FLIGHT: usize = 4096;

/// Serves one multiplexed connection (after its [`super::HELLO`]) until it ends, the node stops
/// or the peer oversteps a bound of [`ConnLimits`]. One task does it all: it reads whatever
/// requests arrived, starts each, polls them together (a search finishes at once; a write
/// waits for its Raft round without holding up the others), and writes every reply ready by
/// then in one `write`; no task is spawned and no hand-off made per request.
///
/// Bounds: with nothing under way and no frame begun, the connection may stay silent for
/// `idle`; a frame begun must be whole within [`ConnLimits::frame_time`] of its length,
/// counted from the read that brought its first byte (started again when the node reads
/// on after [`MAX_IN_FLIGHT`] requests held it up); the replies of one write must be taken within
/// the same bound of their length.
pub(crate) async fn serve<H: ServeHook>(
    node: Arc<Node>,
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    mut w: OwnedWriteHalf,
    hook: Arc<H>,
    limits: ConnLimits,
) {
    use futures::stream::{FuturesUnordered, StreamExt};
    use futures::FutureExt;
    // What the buffered reader already holds (read with the hello) comes first.
    let mut inbuf = r.buffer().to_vec();
    let mut r = r.into_inner();
    let mut running = FuturesUnordered::new();
    let mut out = Vec::new();
    let (node, hook) = (&*node, &*hook);
    // When the last read (or write) was, and when the frame begun in `inbuf` arrived.
    let mut last = Instant::now();
    let mut begun = (!inbuf.is_empty()).then_some(last);
    loop {
        let mut taken = 0;
        while running.len() < MAX_IN_FLIGHT {
            match take_tagged(&inbuf[taken..]) {
                Ok(Some((id, body, n))) => {
                    let frame = body.to_vec();
                    running.push(async move { (id, answer(node, hook, &frame, 12).await) }.boxed());
                    taken += n;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        inbuf.drain(..taken);
        if inbuf.is_empty() {
            begun = None;
        } else if taken > 0 {
            // What is left came with the last read at the latest.
            begun = Some(last);
        }
        while let Some(Some((id, reply))) = running.next().now_or_never() {
            let Some(bytes) = reply else { return };
            if !push_tagged(&mut out, id, &bytes) {
                return;
            }
        }
        if !out.is_empty() {
            let deadline = Instant::now() + limits.frame_time(out.len());
            if by(deadline, w.write_all(&out)).await.is_err() {
                return;
            }
            out.clear();
            last = Instant::now();
        }
        inbuf.reserve(64 << 10);
        let room = running.len() < MAX_IN_FLIGHT && inbuf.len() < 4 + 12 + MAX_FRAME;
        if !room && begun.is_some() {
            // Held up by the node itself: the frame's clock starts again when it reads on.
            begun = Some(Instant::now());
        }
        let deadline = match begun {
            // A frame begun: whole within its bound (its length, once known).
            Some(at) if room => {
                let len = inbuf.first_chunk::<4>().map_or(0, |h| u32::from_le_bytes(*h) as usize);
                Some(at + limits.frame_time(len))
            }
            None if running.is_empty() => Some(last + limits.idle),
            _ => None,
        };
        tokio::select! {
            n = r.read_buf(&mut inbuf), if room => {
                if !matches!(n, Ok(n) if n > 0) {
                    return;
                }
                last = Instant::now();
                begun = begun.or(Some(last));
            }
            Some((id, reply)) = running.next(), if !running.is_empty() => {
                let Some(bytes) = reply else { return };
                if !push_tagged(&mut out, id, &bytes) {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(last)), if deadline.is_some() => return,
            else => return,
        }
    }
}
