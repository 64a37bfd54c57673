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
//!
//! Beside the sync's requests, [`get`] (and [`Client::request`], which reuses the
//! client's connections) make one plain bounded `GET` for any other caller (the CometBFT
//! RPC client of `bavl-abci`, the lab's baseline): the same reader, so the same byte
//! bounds, with a [`Limits`] of body bytes and a deadline on the whole exchange, and the
//! final status and body returned whatever the status.

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
    /// When the whole exchange must be over, on the caller's clock (`None`: the caller
    /// cancels it itself, as the sync loop does): [`FailureKind::Timeout`] after it.
    pub deadline: Option<Duration>,
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
            if self.deadline.is_some_and(|d| self.now() >= d) {
                return Err(Abort::Failed(FailureKind::Timeout));
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
        let (_, body) = self.follow(base, path, f, Statuses::OnlyOk)?;
        Ok(body)
    }

    /// One bounded `GET` of `path` (with its query, if any) below `base`, following
    /// redirects: the final status and its body, whatever the status, read within
    /// `limits` (a body over `limits.body` is `TooLong`, an exchange past
    /// `limits.timeout` is `Timeout`). Reuses this client's idle connections.
    pub fn request(
        &self,
        base: &BaseUrl,
        path: &str,
        limits: &Limits,
    ) -> Result<Response, FailureKind> {
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(FailureKind::Malformed);
        }
        let cancel = AtomicBool::new(false);
        let guard = BodyGuard::plain(limits.body);
        let mut f =
            Fetch { guard, epoch: Instant::now(), cancel: &cancel, deadline: Some(limits.timeout) };
        match self.follow(base, path, &mut f, Statuses::Any) {
            Ok((status, body)) => Ok(Response { status, body }),
            Err(Abort::Failed(kind)) => Err(kind),
            // Nothing sets `cancel`.
            Err(Abort::Cancelled) => Err(FailureKind::Timeout),
        }
    }

    fn follow(
        &self,
        base: &BaseUrl,
        path: &str,
        f: &mut Fetch<'_>,
        statuses: Statuses,
    ) -> Result<(u16, Vec<u8>), Abort> {
        let mut target = (base.host.clone(), base.port, format!("{}{path}", base.prefix));
        for _ in 0..=MAX_REDIRECTS {
            match self.get_once(&target.0, target.1, &target.2, f, statuses)? {
                Reply::Final(status, b) => return Ok((status, b)),
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
        statuses: Statuses,
    ) -> Result<Reply, Abort> {
        if let Some(mut s) = self.take_idle(host, port) {
            // A kept-alive connection the server closed meanwhile fails before any byte
            // of the head: try once more on a new connection.
            match exchange(&mut s, host, port, path, f, statuses) {
                Err(Retry::Stale) => {}
                other => return self.finish(host, port, s, other),
            }
        }
        let mut s = self.connect(host, port)?;
        match exchange(&mut s, host, port, path, f, statuses) {
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
    /// The final status and its body.
    Final(u16, Vec<u8>),
    Redirect(String),
}

/// Which final statuses have their body read: the sync's requests want `200` alone (any
/// other is the failure `Http(status)`), a plain [`Client::request`] any.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Statuses {
    OnlyOk,
    Any,
}

/// The bounds of one plain request ([`get`], [`Client::request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest body read (heads and framing are bounded beside it, as for the sync's
    /// requests: [`crate::request::framing_limit`]).
    pub body: u64,
    /// The whole exchange, redirects included, from the request to the body's last byte.
    pub timeout: Duration,
    /// Each connection attempt.
    pub connect_timeout: Duration,
}

impl Limits {
    /// `body` bytes within `timeout`, connecting within 5 s.
    pub fn new(body: u64, timeout: Duration) -> Limits {
        Limits { body, timeout, connect_timeout: Duration::from_secs(5) }
    }
}

/// A plain request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why [`get`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("GET {url}: {kind}")]
    Failed { url: String, kind: FailureKind },
}

/// One bounded `GET` of `url` (`http://host[:port]/path[?query]`), on a connection of its
/// own: the final status and body, whatever the status, within `limits`.
pub fn get(url: &str, limits: &Limits) -> Result<Response, GetError> {
    let (base, path) = split_url(url)?;
    let failed = |kind| GetError::Failed { url: url.to_string(), kind };
    Client::new(limits.connect_timeout).request(&base, &path, limits).map_err(failed)
}

/// `url` as the base URL of its host and its path with the query (`/` if none).
fn split_url(url: &str) -> Result<(BaseUrl, String), UrlError> {
    let after = url.strip_prefix("http://").map_or(0, |_| "http://".len());
    let at = url[after..].find(['/', '?']).map_or(url.len(), |i| after + i);
    let base = BaseUrl::parse(&url[..at])?;
    let path = match &url[at..] {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    if path.contains('#') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(UrlError { url: url.to_string(), why: "a fragment or spaces in the path" });
    }
    Ok((base, path))
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
    statuses: Statuses,
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
    if status != 200 && statuses == Statuses::OnlyOk {
        return Err(FailureKind::Http(status).into());
    }
    let (body, reusable) = conn.body(&head, f)?;
    Ok((Reply::Final(status, body), reusable))
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

    #[test]
    fn plain_urls_keep_their_query() {
        let split = |u: &str| split_url(u).map(|(b, p)| (b.to_string(), p));
        let ok = |b: &str, p: &str| Ok((b.to_string(), p.to_string()));
        assert_eq!(split("http://h:26657"), ok("http://h:26657", "/"));
        assert_eq!(split("http://h:26657/status"), ok("http://h:26657", "/status"));
        assert_eq!(
            split("http://h/abci_query?path=%22/key%22&prove=true"),
            ok("http://h", "/abci_query?path=%22/key%22&prove=true")
        );
        assert_eq!(split("http://h?x=1"), ok("http://h", "/?x=1"));
        assert!(split("https://h/").is_err());
        assert!(split("http://h/a b").is_err());
        assert!(split("http://h/a#f").is_err());
    }
}
