//! A blocking HTTP/1.1 `GET` client that enforces a request's limits while it reads.
//!
//! Every byte of a body goes through the request's [`BodyGuard`]: a `Content-Length` over
//! the limit fails before a byte of the body is read, any body (length-delimited, chunked
//! or read to the close) fails at its first byte over the limit, and a body below the
//! minimum rate fails as `Stalled`. Sockets read with a short timeout, so the guard's rate
//! and the caller's cancellation flag are checked at least every [`POLL`] while waiting.
//! At most [`MAX_REDIRECTS`] redirects are followed (to `http://` URLs or absolute paths);
//! more is `TooManyRedirects`. Connections are kept alive and reused per host, one request
//! at a time each. Only `http://` is spoken (no TLS).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::wire::{self, Head, MAX_HEAD};
use crate::request::{BodyGuard, FailureKind};

/// Redirects followed before `TooManyRedirects`.
pub const MAX_REDIRECTS: u32 = 5;
/// Longest wait on a socket between checks of the guard and the cancellation flag.
pub const POLL: Duration = Duration::from_millis(200);
/// Idle connections kept per host.
const MAX_IDLE: usize = 32;

/// A source's base URL: `http://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl {
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing `/` (empty for the root).
    pub prefix: String,
}

/// Why a URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url:?} is not a usable source URL: {why} (expected http://host[:port][/path])")]
pub struct UrlError {
    pub url: String,
    pub why: &'static str,
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<BaseUrl, UrlError> {
        let err = |why| UrlError { url: url.to_string(), why };
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            err(if url.starts_with("https://") { "https is not supported" } else { "not http://" })
        })?;
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        if authority.is_empty() || authority.contains('@') {
            return Err(err("no host, or credentials in the URL"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h, p.parse::<u16>().map_err(|_| err("bad port"))?)
            }
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(err("no host"));
        }
        if path.contains(['?', '#']) || path.bytes().any(|b| b <= b' ') {
            return Err(err("query, fragment or spaces in the path"));
        }
        let prefix = path.trim_end_matches('/').to_string();
        Ok(BaseUrl { host: host.to_string(), port, prefix })
    }

    fn authority(&self) -> String {
        if self.port == 80 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.prefix)
    }
}

/// Why a fetch ended without a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    /// The request failed: report it.
    Failed(FailureKind),
    /// The caller cancelled it: report nothing.
    Cancelled,
}

impl From<FailureKind> for Abort {
    fn from(k: FailureKind) -> Self {
        Abort::Failed(k)
    }
}

/// A request's context while it runs: its guard, the caller's clock and cancellation.
pub struct Fetch<'a> {
    pub guard: BodyGuard,
    /// The caller's clock (the one the syncer is given).
    pub epoch: Instant,
    pub cancel: &'a AtomicBool,
}

impl Fetch<'_> {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// One read, waiting in [`POLL`] steps while checking the rate and cancellation.
    fn read_some(&mut self, s: &mut TcpStream, buf: &mut [u8]) -> Result<usize, Abort> {
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(Abort::Cancelled);
            }
            match s.read(buf) {
                Ok(n) => return Ok(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    self.guard.check(self.now())?;
                }
                Err(_) => return Err(Abort::Failed(FailureKind::Transport)),
            }
        }
    }

    /// Counts body bytes against the limit and the rate.
    fn body_bytes(&mut self, n: usize) -> Result<(), Abort> {
        let now = self.now();
        Ok(self.guard.on_bytes(now, n as u64)?)
    }
}

/// A client with a pool of idle keep-alive connections per host.
#[derive(Default)]
pub struct Client {
    idle: Mutex<HashMap<(String, u16), Vec<TcpStream>>>,
    connect_timeout: Option<Duration>,
}

impl Client {
    pub fn new(connect_timeout: Duration) -> Client {
        Client { idle: Mutex::default(), connect_timeout: Some(connect_timeout) }
    }

    /// `GET`s `path` below `base`, following redirects; the `200` body, read within the
    /// guard's limits.
    pub fn get(&self, base: &BaseUrl, path: &str, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
        let mut target = (base.host.clone(), base.port, format!("{}{path}", base.prefix));
        for _ in 0..=MAX_REDIRECTS {
            match self.get_once(&target.0, target.1, &target.2, f)? {
                Reply::Body(b) => return Ok(b),
                Reply::Redirect(loc) => target = redirect(&target, &loc)?,
            }
        }
        Err(Abort::Failed(FailureKind::TooManyRedirects))
    }

    fn get_once(
        &self,
        host: &str,
        port: u16,
        path: &str,
        f: &mut Fetch<'_>,
    ) -> Result<Reply, Abort> {
        if let Some(mut s) = self.take_idle(host, port) {
            // A kept-alive connection the server closed meanwhile fails before any byte
            // of the head: try once more on a new connection.
            match exchange(&mut s, host, port, path, f) {
                Err(Retry::Stale) => {}
                other => return self.finish(host, port, s, other),
            }
        }
        let mut s = self.connect(host, port)?;
        match exchange(&mut s, host, port, path, f) {
            Err(Retry::Stale) => Err(Abort::Failed(FailureKind::Transport)),
            other => self.finish(host, port, s, other),
        }
    }

    fn finish(
        &self,
        host: &str,
        port: u16,
        s: TcpStream,
        r: Result<(Reply, bool), Retry>,
    ) -> Result<Reply, Abort> {
        match r {
            Ok((reply, reusable)) => {
                if reusable {
                    let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                    let v = idle.entry((host.to_string(), port)).or_default();
                    if v.len() < MAX_IDLE {
                        v.push(s);
                    }
                }
                Ok(reply)
            }
            Err(Retry::Abort(a)) => Err(a),
            Err(Retry::Stale) => Err(Abort::Failed(FailureKind::Transport)),
        }
    }

    fn take_idle(&self, host: &str, port: u16) -> Option<TcpStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.get_mut(&(host.to_string(), port))?.pop()
    }

    fn connect(&self, host: &str, port: u16) -> Result<TcpStream, Abort> {
        let fail = Abort::Failed(FailureKind::Transport);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs = (host, port).to_socket_addrs().map_err(|_| fail)?;
        for addr in addrs {
            let s = match self.connect_timeout {
                Some(t) => TcpStream::connect_timeout(&addr, t),
                None => TcpStream::connect(addr),
            };
            if let Ok(s) = s {
                let _ = s.set_nodelay(true);
                s.set_read_timeout(Some(POLL)).map_err(|_| fail)?;
                s.set_write_timeout(Some(Duration::from_secs(10))).map_err(|_| fail)?;
                return Ok(s);
            }
        }
        Err(fail)
    }
}

enum Reply {
    Body(Vec<u8>),
    Redirect(String),
}

enum Retry {
    /// Nothing came back on a reused connection.
    Stale,
    Abort(Abort),
}

impl From<Abort> for Retry {
    fn from(a: Abort) -> Self {
        Retry::Abort(a)
    }
}

impl From<FailureKind> for Retry {
    fn from(k: FailureKind) -> Self {
        Retry::Abort(Abort::Failed(k))
    }
}

/// One request and its response on `s`; the reply and whether `s` may be reused.
fn exchange(
    s: &mut TcpStream,
    host: &str,
    port: u16,
    path: &str,
    f: &mut Fetch<'_>,
) -> Result<(Reply, bool), Retry> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: bavl-sync/1\r\nAccept: */*\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_err() {
        return Err(Retry::Stale);
    }
    // The head, bounded.
    let mut buf = Vec::with_capacity(1024);
    let mut tmp = [0u8; 8192];
    let end = loop {
        let n = match f.read_some(s, &mut tmp) {
            Ok(0) | Err(Abort::Failed(FailureKind::Transport)) if buf.is_empty() => {
                return Err(Retry::Stale)
            }
            Ok(0) => return Err(FailureKind::Malformed.into()),
            Ok(n) => n,
            Err(a) => return Err(a.into()),
        };
        buf.extend_from_slice(&tmp[..n]);
        if let Some(end) = wire::head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err(FailureKind::Malformed.into());
        }
    };
    let head = wire::parse_head(&buf[..end]).ok_or(FailureKind::Malformed)?;
    let status = wire::status(&head).ok_or(FailureKind::Malformed)?;
    let leftover = buf.split_off(end);
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        let loc = head.header("location").ok_or(FailureKind::Malformed)?;
        return Ok((Reply::Redirect(loc.to_string()), false));
    }
    if status != 200 {
        return Err(FailureKind::Http(status).into());
    }
    let (body, reusable) = read_body(s, &head, leftover, f)?;
    Ok((Reply::Body(body), reusable))
}

/// The body of a `200` response, every byte through the guard.
fn read_body(
    s: &mut TcpStream,
    head: &Head,
    leftover: Vec<u8>,
    f: &mut Fetch<'_>,
) -> Result<(Vec<u8>, bool), Abort> {
    let keep_alive = head.first[0] == "HTTP/1.1" && !head.has_token("connection", "close");
    let mut r = BodyReader { s, pending: leftover, at: 0 };
    if head.has_token("transfer-encoding", "chunked") {
        let body = read_chunked(&mut r, f)?;
        return Ok((body, keep_alive && r.at == r.pending.len()));
    }
    if head.header("transfer-encoding").is_some() {
        return Err(Abort::Failed(FailureKind::Malformed));
    }
    match wire::content_length(head).map_err(|_| Abort::Failed(FailureKind::Malformed))? {
        Some(len) => {
            // Refused before a byte of the body is held.
            if len > 0 {
                f.guard.clone().on_bytes(f.epoch.elapsed(), len)?;
            }
            let mut body = Vec::with_capacity(len as usize);
            while (body.len() as u64) < len {
                let want = (len - body.len() as u64).min(64 << 10) as usize;
                let got = r.read(f, want, &mut body)?;
                if got == 0 {
                    return Err(Abort::Failed(FailureKind::Transport));
                }
                f.body_bytes(got)?;
            }
            Ok((body, keep_alive && r.at == r.pending.len()))
        }
        None => {
            // Delimited by the close.
            let mut body = Vec::new();
            loop {
                let got = r.read(f, 64 << 10, &mut body)?;
                if got == 0 {
                    return Ok((body, false));
                }
                f.body_bytes(got)?;
            }
        }
    }
}

/// Reads the body's bytes: what came with the head first, then the socket.
struct BodyReader<'a> {
    s: &'a mut TcpStream,
    pending: Vec<u8>,
    at: usize,
}

impl BodyReader<'_> {
    /// Appends at most `max` bytes to `out`; 0 at the end of the stream.
    fn read(&mut self, f: &mut Fetch<'_>, max: usize, out: &mut Vec<u8>) -> Result<usize, Abort> {
        if self.at < self.pending.len() {
            let n = (self.pending.len() - self.at).min(max);
            out.extend_from_slice(&self.pending[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        let old = out.len();
        out.resize(old + max, 0);
        let n = f.read_some(self.s, &mut out[old..]);
        out.truncate(old + *n.as_ref().unwrap_or(&0));
        n
    }

    /// One CRLF-terminated line of at most 256 bytes (chunk sizes, trailers).
    fn line(&mut self, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            if line.len() > 256 || self.read(f, 1, &mut line)? == 0 {
                return Err(Abort::Failed(FailureKind::Malformed));
            }
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }
}

fn read_chunked(r: &mut BodyReader<'_>, f: &mut Fetch<'_>) -> Result<Vec<u8>, Abort> {
    let malformed = Abort::Failed(FailureKind::Malformed);
    let mut body = Vec::new();
    loop {
        let line = r.line(f)?;
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size).map_err(|_| malformed)?.trim();
        if size.is_empty() || size.len() > 15 {
            return Err(malformed);
        }
        let size = u64::from_str_radix(size, 16).map_err(|_| malformed)?;
        if size == 0 {
            // Trailers up to the blank line.
            while !r.line(f)?.is_empty() {}
            return Ok(body);
        }
        f.guard.clone().on_bytes(f.epoch.elapsed(), size)?;
        let end = body.len() as u64 + size;
        while (body.len() as u64) < end {
            let want = (end - body.len() as u64).min(64 << 10) as usize;
            let got = r.read(f, want, &mut body)?;
            if got == 0 {
                return Err(Abort::Failed(FailureKind::Transport));
            }
            f.body_bytes(got)?;
        }
        if !r.line(f)?.is_empty() {
            return Err(malformed);
        }
    }
}

/// The next target after a redirect to `loc` (an `http://` URL or an absolute path).
fn redirect(from: &(String, u16, String), loc: &str) -> Result<(String, u16, String), Abort> {
    if loc.starts_with('/') && !loc.starts_with("//") {
        return Ok((from.0.clone(), from.1, loc.to_string()));
    }
    let url = BaseUrl::parse(loc).map_err(|_| Abort::Failed(FailureKind::Malformed))?;
    let path = if url.prefix.is_empty() { "/".to_string() } else { url.prefix };
    Ok((url.host, url.port, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = BaseUrl::parse("http://127.0.0.1:8080/mirror/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.prefix.as_str()), ("127.0.0.1", 8080, "/mirror"));
        assert_eq!(u.to_string(), "http://127.0.0.1:8080/mirror");
        let u = BaseUrl::parse("http://example.org").unwrap();
        assert_eq!((u.port, u.prefix.as_str()), (80, ""));
        assert!(BaseUrl::parse("https://example.org").is_err());
        assert!(BaseUrl::parse("http://:80").is_err());
        assert!(BaseUrl::parse("http://h:99999").is_err());
        assert!(BaseUrl::parse("http://u:p@h/").is_err());
        let u = BaseUrl::parse("http://[::1]:9000/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("[::1]", 9000));
    }
}
