//! A blocking HTTP/1.1 `GET` client that enforces a request's limits while it reads.
//!
//! Every byte of a response goes through the request's [`BodyGuard`] ([`super::reader`]):
//! the whole response is bounded in bytes (body within its limit, heads and framing within
//! theirs) and in time (every byte counts towards the minimum rate, after the grace).
//! Sockets read with a short timeout, so the guard's rate and the caller's cancellation
//! flag are checked at least every [`POLL`] while waiting, and on every read. At most
//! [`MAX_REDIRECTS`] redirects are followed (to `http://` URLs or absolute paths); more is
//! `TooManyRedirects`. Connections are kept alive and reused per host, one request at a
//! time each, at most [`MAX_IDLE`] idle in all. Only `http://` is spoken (no TLS).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reader::Conn;
use super::wire;
use crate::request::{BodyGuard, FailureKind};

/// Redirects followed before `TooManyRedirects`.
pub const MAX_REDIRECTS: u32 = 5;
/// Longest wait on a socket between checks of the guard and the cancellation flag.
pub const POLL: Duration = Duration::from_millis(200);
/// Idle connections kept, over all hosts.
pub const MAX_IDLE: usize = 64;

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
    pub(super) fn read_some(&mut self, s: &mut TcpStream, buf: &mut [u8]) -> Result<usize, Abort> {
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

    /// `n` bytes read off the wire: the rate.
    pub(super) fn wire(&mut self, n: usize) -> Result<(), Abort> {
        let now = self.now();
        Ok(self.guard.on_wire(now, n as u64)?)
    }

    /// `n` bytes of body consumed: the limit.
    pub(super) fn body(&mut self, n: usize) -> Result<(), Abort> {
        let now = self.now();
        Ok(self.guard.on_bytes(now, n as u64)?)
    }

    /// `n` bytes of framing consumed (heads, chunk sizes, trailers): their limit.
    pub(super) fn framing(&mut self, n: usize) -> Result<(), Abort> {
        let now = self.now();
        Ok(self.guard.on_framing(now, n as u64)?)
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
                    let total: usize = idle.values().map(Vec::len).sum();
                    if total < MAX_IDLE {
                        idle.entry((host.to_string(), port)).or_default().push(s);
                    }
                }
                Ok(reply)
            }
            Err(Retry::Abort(a)) => Err(a),
            Err(Retry::Stale) => Err(Abort::Failed(FailureKind::Transport)),
        }
    }

    /// Closes the idle connections to `base`'s host (a source no longer asked).
    pub fn forget(&self, base: &BaseUrl) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.remove(&(base.host.clone(), base.port));
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
    // `identity`: a server must not compress (a gzip answer is still decoded, bounded).
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: bavl-sync/1\r\n\
         Accept: */*\r\nAccept-Encoding: identity\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_err() {
        return Err(Retry::Stale);
    }
    let mut conn = Conn::new(s);
    let head = match conn.head(f) {
        Ok(h) => h,
        // Nothing at all came back on a kept-alive connection: the server closed it.
        Err(Abort::Failed(FailureKind::Transport)) if !conn.got_any => return Err(Retry::Stale),
        Err(a) => return Err(a.into()),
    };
    let status = wire::status(&head).ok_or(FailureKind::Malformed)?;
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        let loc = head.header("location").ok_or(FailureKind::Malformed)?;
        return Ok((Reply::Redirect(loc.to_string()), false));
    }
    if status != 200 {
        return Err(FailureKind::Http(status).into());
    }
    let (body, reusable) = conn.body(&head, f)?;
    Ok((Reply::Body(body), reusable))
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
