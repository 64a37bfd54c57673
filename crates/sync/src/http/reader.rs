//! Reading one HTTP/1.1 response off a connection, every byte through the request's
//! [`crate::BodyGuard`], from the first byte of the status line to the last of the
//! trailers.
//!
//! What it guarantees, whatever the server sends:
//! - every byte read counts towards the minimum rate, checked on every read and at least
//!   every [`super::client::POLL`] while waiting: a head, a body or trailers dripped
//!   below the rate are `Stalled` once the grace is over;
//! - the body never exceeds the request's limit (a `Content-Length` over it is refused
//!   before a body byte is read), and heads, interim responses, chunk framing and
//!   trailers never exceed the guard's framing limit: the response is bounded in bytes;
//! - reads are buffered (16 KiB at a time): no byte-at-a-time `recv` for lines;
//! - interim `1xx` answers (`103 Early Hints`) are skipped, eight at most; `101` is not
//!   an answer to a `GET` and is malformed;
//! - a body in `Content-Encoding: gzip` (which the client asks not to get, with
//!   `Accept-Encoding: identity`) is decoded within the limit; any other coding is
//!   malformed;
//! - a connection that ends or is reset after the head and before the body's end is
//!   `Truncated`.

use std::io::Read as _;
use std::net::TcpStream;

use super::client::{Abort, Fetch};
use super::wire::{self, Head, MAX_HEAD};
use crate::request::FailureKind;

/// Bytes asked of the socket per read.
const READ_SIZE: usize = 16 << 10;
/// Interim (`1xx`) responses skipped before the final one.
const MAX_INTERIM: usize = 8;
/// Longest chunk-size line or trailer line.
const MAX_LINE: usize = 1024;

/// A connection's bytes, read ahead into a buffer.
pub(super) struct Conn<'s> {
    s: &'s mut TcpStream,
    buf: Vec<u8>,
    at: usize,
    scratch: Box<[u8; READ_SIZE]>,
    /// Bytes were read in this exchange (a reused connection that yields none was stale).
    pub got_any: bool,
}

fn malformed() -> Abort {
    Abort::Failed(FailureKind::Malformed)
}

/// A socket error or end of stream in the middle of a response.
fn cut(a: Abort) -> Abort {
    match a {
        Abort::Failed(FailureKind::Transport) => Abort::Failed(FailureKind::Truncated),
        other => other,
    }
}

impl<'s> Conn<'s> {
    pub fn new(s: &'s mut TcpStream) -> Self {
        Conn {
            s,
            buf: Vec::with_capacity(READ_SIZE),
            at: 0,
            scratch: Box::new([0; READ_SIZE]),
            got_any: false,
        }
    }

    /// Reads more into the buffer, counting it on the wire; 0 at the end of the stream.
    fn fill(&mut self, f: &mut Fetch<'_>) -> Result<usize, Abort> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        // Into the scratch block (zeroed once per exchange), then only what came is
        // appended: a source answering a byte per read costs a byte per read, not a
        // cleared 16 KiB.
        let n = f.read_some(self.s, &mut self.scratch[..])?;
        self.buf.extend_from_slice(&self.scratch[..n]);
        self.got_any |= n > 0;
        f.wire(n)?;
        Ok(n)
    }

    /// Whether everything read was consumed (the connection may carry the next request).
    pub fn drained(&self) -> bool {
        self.at == self.buf.len()
    }

    /// The final response's head, interim `1xx` ones skipped.
    pub fn head(&mut self, f: &mut Fetch<'_>) -> Result<Head, Abort> {
        for _ in 0..=MAX_INTERIM {
            let head = self.one_head(f)?;
            match wire::status(&head).ok_or_else(malformed)? {
                101 => return Err(malformed()),
                100..=199 => continue,
                _ => return Ok(head),
            }
        }
        Err(malformed())
    }

    fn one_head(&mut self, f: &mut Fetch<'_>) -> Result<Head, Abort> {
        loop {
            let avail = &self.buf[self.at..];
            if let Some(end) = wire::head_end(avail) {
                let head = wire::parse_head(&avail[..end]).ok_or_else(malformed)?;
                self.at += end;
                f.framing(end)?;
                return Ok(head);
            }
            if avail.len() > MAX_HEAD {
                return Err(malformed());
            }
            if self.fill(f)? == 0 {
                return Err(if self.got_any {
                    malformed()
                } else {
                    Abort::Failed(FailureKind::Transport)
                });
            }
        }
    }

    /// One CRLF-terminated framing line (chunk size, trailer), without its CRLF.
    fn line(&mut self, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
        loop {
            let avail = &self.buf[self.at..];
            if let Some(p) = avail.windows(2).position(|w| w == b"\r\n") {
                let line = avail[..p].to_vec();
                self.at += p + 2;
                f.framing(p + 2)?;
                return Ok(line);
            }
            if avail.len() > MAX_LINE {
                return Err(malformed());
            }
            if self.fill(f).map_err(cut)? == 0 {
                return Err(Abort::Failed(FailureKind::Truncated));
            }
        }
    }

    /// Appends exactly `len` body bytes to `out` (the limit was checked by the caller).
    fn exact(&mut self, f: &mut Fetch<'_>, len: u64, out: &mut Vec<u8>) -> Result<(), Abort> {
        let end = out.len() as u64 + len;
        let take = (self.buf.len() - self.at).min(len as usize);
        out.extend_from_slice(&self.buf[self.at..self.at + take]);
        self.at += take;
        f.body(take)?;
        // Straight into the body, no copy through the buffer: sized once (`len` is within
        // the request's limit, checked by the caller), never cleared again per read.
        let mut filled = out.len();
        out.resize(end as usize, 0);
        while filled < out.len() {
            let n = match f.read_some(self.s, &mut out[filled..]).map_err(cut) {
                Ok(0) => Err(Abort::Failed(FailureKind::Truncated)),
                other => other,
            };
            let n = n.inspect_err(|_| out.truncate(filled))?;
            filled += n;
            f.wire(n)?;
            f.body(n)?;
        }
        Ok(())
    }

    /// The body of a `200` response (decoded), and whether the connection may be reused.
    pub fn body(&mut self, head: &Head, f: &mut Fetch<'_>) -> Result<(Vec<u8>, bool), Abort> {
        let keep_alive = head.first[0] == "HTTP/1.1" && !head.has_token("connection", "close");
        let (body, delimited) = if head.has_token("transfer-encoding", "chunked") {
            (self.chunked(f)?, true)
        } else if head.header("transfer-encoding").is_some() {
            return Err(malformed());
        } else {
            match wire::content_length(head).map_err(|_| malformed())? {
                Some(len) => {
                    // Refused before a byte of the body is held.
                    if len > f.guard.limit() {
                        return Err(Abort::Failed(FailureKind::TooLong));
                    }
                    let mut body = Vec::with_capacity(len as usize);
                    self.exact(f, len, &mut body)?;
                    (body, true)
                }
                None => (self.until_close(f)?, false),
            }
        };
        let body = decode(head, body, f.guard.limit())?;
        Ok((body, delimited && keep_alive && self.drained()))
    }

    fn until_close(&mut self, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
        let mut body = self.buf[self.at..].to_vec();
        self.at = self.buf.len();
        f.body(body.len())?;
        loop {
            if self.fill(f).map_err(cut)? == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&self.buf[self.at..]);
            f.body(self.buf.len() - self.at)?;
            self.at = self.buf.len();
        }
    }

    fn chunked(&mut self, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
        let mut body = Vec::new();
        loop {
            let line = self.line(f)?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size).map_err(|_| malformed())?.trim();
            if size.is_empty() || size.len() > 15 {
                return Err(malformed());
            }
            let size = u64::from_str_radix(size, 16).map_err(|_| malformed())?;
            if size == 0 {
                // Trailers up to the blank line, within the framing limit.
                while !self.line(f)?.is_empty() {}
                return Ok(body);
            }
            if body.len() as u64 + size > f.guard.limit() {
                return Err(Abort::Failed(FailureKind::TooLong));
            }
            self.exact(f, size, &mut body)?;
            if !self.line(f)?.is_empty() {
                return Err(malformed());
            }
        }
    }
}

/// Undoes the body's `Content-Encoding`: none or `identity` as it is, `gzip` decoded so
/// that the compressed and the decoded bytes together stay within `limit` (more is
/// `TooLong`: the request never holds more than its reservation), anything else
/// malformed.
fn decode(head: &Head, body: Vec<u8>, limit: u64) -> Result<Vec<u8>, Abort> {
    let Some(coding) = head.header("content-encoding").map(str::trim) else { return Ok(body) };
    if coding.is_empty() || coding.eq_ignore_ascii_case("identity") {
        return Ok(body);
    }
    if !coding.eq_ignore_ascii_case("gzip") && !coding.eq_ignore_ascii_case("x-gzip") {
        return Err(malformed());
    }
    let room = limit.saturating_sub(body.len() as u64);
    let mut out = Vec::new();
    let mut dec = flate2::read::GzDecoder::new(&body[..]).take(room + 1);
    dec.read_to_end(&mut out).map_err(|_| malformed())?;
    if out.len() as u64 > room {
        return Err(Abort::Failed(FailureKind::TooLong));
    }
    Ok(out)
}
