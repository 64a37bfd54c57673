//! The lies played on the socket itself: answers that are not one well-formed response
//! sent at once ([`Raw`]), the ways every response is written by `drip-head` and
//! `early-hints` ([`Liar::deliver`]), and `reset-truncate`, which looks at a request
//! before it is read so it can leave it unread ([`Liar::preempt`]).
//!
//! **How `reset-truncate` resets without `SO_LINGER`.** std has no stable
//! `TcpStream::set_linger`, and no crate in the lock file sets it without `unsafe`. A
//! socket closed while received bytes are still unread makes the kernel send a reset
//! instead of a FIN (RFC 2525 §2.17; Linux and the BSDs do this): the liar only *peeks*
//! at the request, writes the head and half the body, waits [`RESET_DELAY`] for those
//! bytes to leave, and closes with the request still unread. The client sees the bytes,
//! then `ECONNRESET`, as it would from `SO_LINGER` 0.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::lies::Liar;
use super::{Byzantine, EARLY_HINTS, SLOW_RATE, STALL_MAX, TRAILER_WRITE, TRICKLE_INTERVAL};
use crate::http::server::{render_head, write_response, Objects, Response, Target};
use crate::http::wire::{self, MAX_HEAD};

/// How long `reset-truncate` lets its half body leave before the reset.
pub const RESET_DELAY: Duration = Duration::from_millis(100);
/// A request head not complete within this long is not looked at by `preempt`.
const PEEK_MAX: Duration = Duration::from_secs(30);

/// Lies that are not a well-formed response sent at once.
pub(in crate::http) enum Raw {
    Stall,
    Trickle(Vec<u8>),
    Endless,
    Garbage(u64),
    /// The chunk in chunked encoding, then trailer lines without end.
    EndlessTrailers(Vec<u8>),
    /// The chunk at [`SLOW_RATE`].
    Slow(Vec<u8>),
    /// The head, half the chunk, then a reset (the request left unread).
    ResetTruncate(Vec<u8>),
}

impl Liar {
    /// Writes a response the server chose (honest or a lie): `drip-head` drips its head,
    /// `early-hints` sends a `103` first; every other kind writes it as an honest server.
    pub fn deliver(
        &self,
        s: &mut TcpStream,
        r: &Response,
        send_body: bool,
        keep: bool,
    ) -> io::Result<()> {
        match self.kind {
            Byzantine::DripHead => {
                let head = render_head(r, keep, None);
                for (j, b) in head.bytes().enumerate() {
                    if j > 0 {
                        std::thread::sleep(TRICKLE_INTERVAL);
                    }
                    s.write_all(&[b])?;
                }
                if send_body {
                    s.write_all(&r.body)?;
                }
                s.flush()
            }
            Byzantine::EarlyHints => {
                s.write_all(EARLY_HINTS)?;
                write_response(s, r, send_body, keep, None)
            }
            _ => write_response(s, r, send_body, keep, None),
        }
    }

    /// Before a request is read: the raw lie to play with the request left unread, if
    /// any (`reset-truncate`, on every other chunk request it can answer).
    pub fn preempt(&self, s: &TcpStream, objects: &dyn Objects) -> io::Result<Option<Raw>> {
        if self.kind != Byzantine::ResetTruncate {
            return Ok(None);
        }
        let Some(head) = peek_head(s)?.and_then(|h| wire::parse_head(&h)) else {
            return Ok(None);
        };
        if head.first[0] != "GET" {
            return Ok(None);
        }
        let path = head.first[1].split(['?', '#']).next().unwrap_or_default();
        let Some(Target::Chunk(root, i)) = Target::parse(path) else { return Ok(None) };
        let Ok(Some(chunk)) = objects.chunk(&root, i) else { return Ok(None) };
        let nth = self.chunk_requests.fetch_add(1, Ordering::Relaxed);
        Ok(nth.is_multiple_of(2).then_some(Raw::ResetTruncate(chunk)))
    }
}

/// The complete request head waiting on `s`, without consuming it; `None` if the peer
/// closed, or sent more than a head's worth without a blank line, or took too long.
fn peek_head(s: &TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; MAX_HEAD + 4];
    let start = Instant::now();
    loop {
        let n = s.peek(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(end) = wire::head_end(&buf[..n]) {
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if n >= MAX_HEAD || start.elapsed() > PEEK_MAX {
            return Ok(None);
        }
        // Part of a head: peek returns at once until more comes.
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn chunk_head(len: usize) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    )
}

impl Raw {
    /// Plays the lie on `s`; the connection is closed afterwards.
    pub fn play(self, s: &mut TcpStream) -> io::Result<()> {
        match self {
            Raw::Stall => hold(s),
            Raw::Trickle(body) => {
                s.write_all(chunk_head(body.len()).as_bytes())?;
                for b in body {
                    std::thread::sleep(TRICKLE_INTERVAL);
                    s.write_all(&[b])?;
                }
                s.flush()
            }
            Raw::Slow(body) => {
                s.write_all(chunk_head(body.len()).as_bytes())?;
                // A tenth of a second's worth, ten times a second, the first at once.
                for (j, piece) in body.chunks(SLOW_RATE / 10).enumerate() {
                    if j > 0 {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    s.write_all(piece)?;
                }
                s.flush()
            }
            Raw::Endless => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";
                s.write_all(head.as_bytes())?;
                let mut frame = b"4000\r\n".to_vec();
                frame.extend_from_slice(&[0x5A; 0x4000]);
                frame.extend_from_slice(b"\r\n");
                // Until the client hangs up (the write fails).
                loop {
                    s.write_all(&frame)?;
                }
            }
            Raw::EndlessTrailers(body) => endless_trailers(s, &body),
            Raw::ResetTruncate(body) => {
                s.write_all(chunk_head(body.len()).as_bytes())?;
                s.write_all(&body[..body.len() / 2])?;
                s.flush()?;
                std::thread::sleep(RESET_DELAY);
                // Returning drops the socket with the request unread: a reset.
                Ok(())
            }
            Raw::Garbage(seed) => {
                s.write_all(&garbage(seed))?;
                s.flush()
            }
        }
    }
}

/// Never answers: holds the connection until the client hangs up (or [`STALL_MAX`]).
fn hold(s: &mut TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < STALL_MAX {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The chunk as one chunked-encoding frame, the last (zero-size) frame, then `X-a: b`
/// trailer lines forever, [`TRAILER_WRITE`] bytes per write, until the client hangs up.
fn endless_trailers(s: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                Transfer-Encoding: chunked\r\nTrailer: X-a\r\n\r\n";
    let mut first = head.as_bytes().to_vec();
    first.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
    first.extend_from_slice(body);
    first.extend_from_slice(b"\r\n0\r\n");
    s.write_all(&first)?;
    let line = b"X-a: b\r\n";
    let mut at = 0;
    loop {
        let piece: [u8; TRAILER_WRITE] = std::array::from_fn(|j| line[(at + j) % line.len()]);
        s.write_all(&piece)?;
        at = (at + TRAILER_WRITE) % line.len();
    }
}

/// 1 KiB of non-HTTP bytes (never `HTTP/`), then a blank line.
fn garbage(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut bytes: Vec<u8> = (0..1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    bytes[0] = 0;
    bytes.extend_from_slice(b"\r\n\r\n");
    bytes
}
