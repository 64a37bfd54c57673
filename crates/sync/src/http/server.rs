//! The HTTP server of protocol v1: serves the manifests and chunks of the versions
//! published in a [`Catalog`], from O(1) snapshots, so the store that owns them keeps
//! committing while they are served — or of any other [`Objects`], such as an
//! [`super::ExportDir`]. With the `liars` feature (tests, the demo harness and the lab
//! only), `Server::byzantine` makes it lie in one fixed way (`http::byzantine`); without
//! it a server is always honest and none of that code is built.
//!
//! One thread per connection (at most [`MAX_CONNECTIONS`]; more are answered `503` with
//! `Retry-After`), HTTP/1.1 keep-alive, `GET` and `HEAD` only. Paths are parsed strictly
//! (decimal without leading zeros, lowercase roots), so every object has one URL; request
//! heads are bounded and a connection idle for [`IDLE_TIMEOUT`] is closed. Each version's
//! manifest is computed once (it exports every chunk) and cached while the version is
//! published. Chunk responses carry `Cache-Control: public, max-age=31536000, immutable`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use bavl_core::{Digest, Snapshot};

#[cfg(feature = "liars")]
use super::byzantine::{Answer, Byzantine, Liar};
use super::wire::{self, MAX_HEAD};
use crate::protocol::{self, ChunkLoader, ListedSnapshot, Listing, Manifest, PROTOCOL_VERSION};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// A connection with no complete request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

pub const CACHE_IMMUTABLE: &str = "public, max-age=31536000, immutable";
pub const CACHE_MANIFEST: &str = "max-age=60";
pub const CACHE_LISTING: &str = "no-cache";

/// What a server serves: the three kinds of objects of protocol v1. `Ok(None)` is `404`;
/// an I/O error is `500`.
pub trait Objects: Send + Sync {
    /// The listing body (`/v1/snapshots/index.json`).
    fn listing(&self) -> io::Result<Vec<u8>>;
    /// The manifest body of `version`, if held.
    fn manifest(&self, version: u64) -> io::Result<Option<Arc<Vec<u8>>>>;
    /// Chunk `index` of the tree with root `root`, if held.
    fn chunk(&self, root: &Digest, index: u64) -> io::Result<Option<Vec<u8>>>;
}

/// The versions a server offers. Shared between the store's owner, which publishes each
/// committed version and withdraws pruned ones, and the connection threads.
#[derive(Default)]
pub struct Catalog {
    versions: RwLock<BTreeMap<u64, Snapshot>>,
    manifests: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    /// Reads back the chunks of a paged store's versions that are not in memory.
    loader: Option<ChunkLoader>,
}

impl Catalog {
    pub fn new() -> Arc<Catalog> {
        Arc::new(Catalog::default())
    }

    /// A catalog of a paged store's versions: a chunk not in memory is read back with
    /// `loader` for the request (and dropped after it), so serving never loads a version
    /// whole.
    pub fn with_loader(loader: ChunkLoader) -> Arc<Catalog> {
        Arc::new(Catalog { loader: Some(loader), ..Catalog::default() })
    }

    /// Offers `snap` as `version` (an O(1) snapshot of the store's version).
    pub fn publish(&self, version: u64, snap: Snapshot) {
        self.versions.write().unwrap_or_else(|e| e.into_inner()).insert(version, snap);
    }

    /// Stops offering `version` (pruned).
    pub fn withdraw(&self, version: u64) {
        self.versions.write().unwrap_or_else(|e| e.into_inner()).remove(&version);
        self.manifests.lock().unwrap_or_else(|e| e.into_inner()).remove(&version);
    }

    /// The published versions, oldest first.
    pub fn versions(&self) -> Vec<u64> {
        self.versions.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
    }

    fn snapshot(&self, version: u64) -> Option<Snapshot> {
        self.versions.read().unwrap_or_else(|e| e.into_inner()).get(&version).cloned()
    }

    fn by_root(&self, root: &Digest) -> Option<Snapshot> {
        let versions = self.versions.read().unwrap_or_else(|e| e.into_inner());
        versions.values().find(|s| s.root_hash() == *root).cloned()
    }

    /// The manifest of `version`, computed once and cached (`Ok(None)`: no such
    /// version). Fails only when a chunk cannot be read back (a paged store's file).
    pub fn manifest_json(&self, version: u64) -> io::Result<Option<Arc<Vec<u8>>>> {
        if let Some(m) = self.manifests.lock().unwrap_or_else(|e| e.into_inner()).get(&version) {
            return Ok(Some(m.clone()));
        }
        let Some(snap) = self.snapshot(version) else { return Ok(None) };
        // Computed outside the lock: other requests are not held behind it.
        let manifest = Manifest::from_snapshot_loading(version, &snap, self.loader.as_ref())?;
        let json = Arc::new(manifest.to_json());
        let mut cache = self.manifests.lock().unwrap_or_else(|e| e.into_inner());
        if self.snapshot(version).is_some() {
            cache.insert(version, json.clone());
        }
        Ok(Some(json))
    }

    /// The listing body.
    pub fn listing_json(&self) -> Vec<u8> {
        let versions = self.versions.read().unwrap_or_else(|e| e.into_inner());
        let snapshots = versions
            .iter()
            .map(|(&version, s)| ListedSnapshot {
                version,
                root: hex::encode(s.root_hash()),
                chunk_count: s.chunk_count(),
            })
            .collect();
        serde_json::to_vec(&Listing { format: PROTOCOL_VERSION, snapshots }).unwrap_or_default()
    }
}

impl Objects for Catalog {
    fn listing(&self) -> io::Result<Vec<u8>> {
        Ok(self.listing_json())
    }

    fn manifest(&self, version: u64) -> io::Result<Option<Arc<Vec<u8>>>> {
        self.manifest_json(version)
    }

    fn chunk(&self, root: &Digest, index: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(snap) = self.by_root(root) else { return Ok(None) };
        // A chunk this version cannot read (absent with no loader, or its file unreadable)
        // is the server's failure, never a 404.
        protocol::export_chunk(&snap, index, self.loader.as_ref())
    }
}

/// A response.
pub(super) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub cache: Option<&'static str>,
    /// A `Location` header (redirects).
    pub location: Option<String>,
    /// A `Content-Encoding` header (only a Byzantine `gzip-manifest` server sends one).
    pub encoding: Option<&'static str>,
    pub body: Arc<Vec<u8>>,
}

impl Response {
    pub fn new(
        status: u16,
        content_type: &'static str,
        cache: &'static str,
        body: Vec<u8>,
    ) -> Self {
        let body = Arc::new(body);
        Response { status, content_type, cache: Some(cache), location: None, encoding: None, body }
    }

    pub fn error(status: u16, text: &str) -> Self {
        let body = Arc::new(format!("{text}\n").into_bytes());
        let content_type = "text/plain; charset=utf-8";
        Response { status, content_type, cache: None, location: None, encoding: None, body }
    }

    pub fn chunk(body: Vec<u8>) -> Self {
        Response::new(200, "application/octet-stream", CACHE_IMMUTABLE, body)
    }
}

/// What a `GET` path asks for (parsed strictly: one URL per object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Listing,
    Manifest(u64),
    Chunk(Digest, u64),
}

impl Target {
    /// `None` for any path that is not exactly one of the protocol's.
    pub fn parse(path: &str) -> Option<Target> {
        let rest = path.strip_prefix(&format!("/v{PROTOCOL_VERSION}/"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["snapshots", "index.json"] => Some(Target::Listing),
            ["snapshots", v, "manifest.json"] => decimal(v).map(Target::Manifest),
            ["chunks", root, index] => {
                Some(Target::Chunk(protocol::parse_root(root).ok()?, decimal(index)?))
            }
            _ => None,
        }
    }
}

/// The honest answer to a path.
pub(super) fn route(objects: &dyn Objects, target: Option<Target>) -> Response {
    let answer = match target {
        None => return Response::error(404, "not found"),
        Some(Target::Listing) => objects
            .listing()
            .map(|l| Some(Response::new(200, "application/json", CACHE_LISTING, l))),
        Some(Target::Manifest(v)) => objects.manifest(v).map(|m| {
            m.map(|body| Response {
                status: 200,
                content_type: "application/json",
                cache: Some(CACHE_MANIFEST),
                location: None,
                encoding: None,
                body,
            })
        }),
        Some(Target::Chunk(root, index)) => {
            objects.chunk(&root, index).map(|c| c.map(Response::chunk))
        }
    };
    match answer {
        Ok(Some(r)) => r,
        Ok(None) => Response::error(404, "not held"),
        Err(_) => Response::error(500, "internal error"),
    }
}

/// A decimal integer without leading zeros (one spelling per number).
fn decimal(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// Without the `liars` feature there is no liar: a type with no values, so every
/// `Option<&Liar>` is `None` and the lying paths are gone from the build.
#[cfg(not(feature = "liars"))]
enum Liar {}

/// A bound listener serving a catalog (or any [`Objects`]), honestly unless made
/// `Server::byzantine` (feature `liars`).
pub struct Server {
    listener: TcpListener,
    objects: Arc<dyn Objects>,
    liar: Option<Arc<Liar>>,
    stop: Arc<AtomicBool>,
}

/// A server running on its own thread; dropping it (or [`ServerHandle::stop`]) stops
/// accepting (connections already open finish their request).
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port).
    pub fn bind(addr: impl ToSocketAddrs, catalog: Arc<Catalog>) -> io::Result<Server> {
        Server::bind_objects(addr, catalog)
    }

    /// Binds `addr` to serve `objects` (a [`Catalog`], an [`super::ExportDir`], ...).
    pub fn bind_objects(addr: impl ToSocketAddrs, objects: Arc<dyn Objects>) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        Ok(Server { listener, objects, liar: None, stop: Arc::new(AtomicBool::new(false)) })
    }

    /// Makes this server lie in one fixed way (a test facility: see [`Byzantine`]).
    #[cfg(feature = "liars")]
    pub fn byzantine(mut self, kind: Byzantine) -> Server {
        self.liar = Some(Arc::new(Liar::new(kind)));
        self
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until stopped.
    pub fn run(self) {
        let live = Arc::new(AtomicUsize::new(0));
        for conn in self.listener.incoming() {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let Ok(mut stream) = conn else { continue };
            if live.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let mut r = Response::error(503, "too many connections");
                r.cache = None;
                let _ = write_response(&mut stream, &r, false, false, Some(1));
                continue;
            }
            live.fetch_add(1, Ordering::Relaxed);
            let (objects, liar, count) = (self.objects.clone(), self.liar.clone(), live.clone());
            let spawned = std::thread::Builder::new().name("bavl-serve".into()).spawn(move || {
                let _ = serve_connection(stream, &*objects, liar.as_deref());
                count.fetch_sub(1, Ordering::Relaxed);
            });
            if spawned.is_err() {
                // The closure (and its decrement) was dropped with the error.
                live.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Runs the server on a thread of its own.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let addr = self.local_addr()?;
        let stop = self.stop.clone();
        let thread =
            std::thread::Builder::new().name("bavl-accept".into()).spawn(move || self.run())?;
        Ok(ServerHandle { addr, stop, thread: Some(thread) })
    }
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Serves requests on one connection until it closes, idles out or sends garbage.
fn serve_connection(
    mut s: TcpStream,
    objects: &dyn Objects,
    liar: Option<&Liar>,
) -> io::Result<()> {
    s.set_read_timeout(Some(IDLE_TIMEOUT))?;
    s.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    let mut tmp = [0u8; 4096];
    loop {
        // A liar that acts on a request left unread (`reset-truncate`) looks at it first.
        #[cfg(feature = "liars")]
        if let (Some(l), true) = (liar, buf.is_empty()) {
            if let Some(raw) = l.preempt(&s, objects)? {
                return raw.play(&mut s);
            }
        }
        let end = loop {
            if let Some(end) = wire::head_end(&buf) {
                break end;
            }
            if buf.len() > MAX_HEAD {
                let r = Response::error(431, "request head too large");
                return write_response(&mut s, &r, false, false, None);
            }
            let n = s.read(&mut tmp)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let Some(head) = wire::parse_head(&buf[..end]) else {
            return write_response(
                &mut s,
                &Response::error(400, "bad request"),
                false,
                false,
                None,
            );
        };
        buf.drain(..end);
        let [method, target, version] = &head.first;
        let http11 = version == "HTTP/1.1";
        let has_body = head.header("transfer-encoding").is_some()
            || !matches!(wire::content_length(&head), Ok(None | Some(0)));
        let keep = !has_body
            && if http11 {
                !head.has_token("connection", "close")
            } else {
                head.has_token("connection", "keep-alive")
            };
        let (response, send_body) = match method.as_str() {
            "GET" | "HEAD" if version.starts_with("HTTP/1.") => {
                let path = target.split(['?', '#']).next().unwrap_or_default();
                let parsed = Target::parse(path);
                #[cfg(feature = "liars")]
                let response =
                    match liar.map_or(Answer::Honest, |l| l.answer(objects, parsed, path)) {
                        Answer::Honest => route(objects, parsed),
                        Answer::Respond(r) => r,
                        // A raw lie ends the connection.
                        Answer::Raw(raw) => return raw.play(&mut s),
                    };
                #[cfg(not(feature = "liars"))]
                let response = route(objects, parsed);
                (response, method == "GET")
            }
            "GET" | "HEAD" => (Response::error(505, "HTTP version not supported"), true),
            _ => (Response::error(405, "only GET and HEAD"), true),
        };
        match liar {
            #[cfg(feature = "liars")]
            Some(l) => l.deliver(&mut s, &response, send_body, keep)?,
            #[cfg(not(feature = "liars"))]
            Some(l) => match *l {},
            None => write_response(&mut s, &response, send_body, keep, None)?,
        }
        if !keep {
            return Ok(());
        }
    }
}

pub(super) fn write_response(
    s: &mut TcpStream,
    r: &Response,
    send_body: bool,
    keep: bool,
    retry_after: Option<u32>,
) -> io::Result<()> {
    s.write_all(render_head(r, keep, retry_after).as_bytes())?;
    if send_body {
        s.write_all(&r.body)?;
    }
    s.flush()
}

/// The status line and headers of `r`, with the blank line that ends them.
pub(super) fn render_head(r: &Response, keep: bool, retry_after: Option<u32>) -> String {
    let reason = match r.status {
        200 => "OK",
        302 => "Found",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    if let Some(c) = r.cache {
        head.push_str(&format!("Cache-Control: {c}\r\n"));
    }
    if let Some(loc) = &r.location {
        head.push_str(&format!("Location: {loc}\r\n"));
    }
    if let Some(enc) = r.encoding {
        head.push_str(&format!("Content-Encoding: {enc}\r\n"));
    }
    if let Some(secs) = retry_after {
        head.push_str(&format!("Retry-After: {secs}\r\n"));
    }
    if r.status == 405 {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str(if keep {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_decimals_only() {
        assert_eq!(decimal("0"), Some(0));
        assert_eq!(decimal("120"), Some(120));
        for bad in ["", "01", "+1", "-1", "1a", "99999999999999999999999"] {
            assert_eq!(decimal(bad), None, "{bad}");
        }
    }
}
