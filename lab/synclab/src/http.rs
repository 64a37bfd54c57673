//! The baseline over HTTP/1.1 (std::net, keep-alive, one thread per connection):
//! `GET /baseline/meta.json` and `GET /baseline/chunk/{i}`. A server started with
//! `corrupt` flips one byte in the middle of every chunk it sends (the B+AVL paper's
//! Byzantine peer corrupts chunks; the baseline cannot tell until the end). The client
//! reads through bavl-sync's bounded HTTP reader, the same as bavl's own sync.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bavl_sync::http::{wire, BaseUrl, Client, Limits};
use bavl_sync::FailureKind;

use crate::baseline::{FetchError, Meta, Snapshot, Transport};

/// Serves `snap` on `listener` until the process ends.
pub fn serve(listener: TcpListener, snap: Arc<Snapshot>, corrupt: bool) {
    let meta = Arc::new(serde_json::to_vec(&snap.meta).unwrap_or_default());
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let (snap, meta) = (Arc::clone(&snap), Arc::clone(&meta));
        std::thread::spawn(move || {
            let _ = connection(stream, &snap, &meta, corrupt);
        });
    }
}

fn connection(
    mut stream: TcpStream,
    snap: &Snapshot,
    meta: &[u8],
    corrupt: bool,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let (mut buf, mut tmp) = (Vec::new(), [0u8; 4096]);
    loop {
        // The request head, bounded, parsed by bavl-sync's wire module.
        let end = loop {
            if let Some(end) = wire::head_end(&buf) {
                break end;
            }
            if buf.len() > wire::MAX_HEAD {
                return Ok(());
            }
            let n = stream.read(&mut tmp)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let Some(head) = wire::parse_head(&buf[..end]) else { return Ok(()) };
        buf.drain(..end);
        let path = head.first[1].as_str();
        let owned;
        let body: &[u8] = if path == "/baseline/meta.json" {
            meta
        } else if let Some(i) = path.strip_prefix("/baseline/chunk/").and_then(|s| s.parse().ok()) {
            match snap.chunk(i) {
                Some(c) if corrupt && !c.is_empty() => {
                    let mut v = c.to_vec();
                    let mid = v.len() / 2;
                    v[mid] ^= 0x5a;
                    owned = v;
                    &owned
                }
                Some(c) => c,
                None => {
                    out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
                    continue;
                }
            }
        } else {
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        out.write_all(head.as_bytes())?;
        out.write_all(body)?;
    }
}

/// The client side: peers by `host:port`, read through bavl-sync's bounded HTTP reader
/// ([`bavl_sync::http::Client::request`]): the body within the chunk's limit, the whole
/// exchange within `timeout`, one keep-alive connection per worker.
pub struct Http {
    pub peers: Vec<String>,
    pub timeout: Duration,
}

/// A worker's connection to one peer: a client of its own, whose one idle connection is
/// reused from request to request.
pub struct Conn {
    client: Client,
    base: BaseUrl,
}

impl Http {
    fn get(&self, c: &mut Conn, path: &str, limit: u64) -> Result<Vec<u8>, FetchError> {
        let limits =
            Limits { connect_timeout: Duration::from_secs(10), ..Limits::new(limit, self.timeout) };
        let r = c.client.request(&c.base, path, &limits).map_err(|kind| match kind {
            FailureKind::TooLong => FetchError::Protocol(format!("body over the limit {limit}")),
            other => FetchError::Protocol(format!("GET {path}: {other}")),
        })?;
        if r.status != 200 {
            return Err(FetchError::Protocol(format!("status {}", r.status)));
        }
        Ok(r.body)
    }
}

impl Transport for Http {
    type Conn = Conn;

    fn connect(&self, peer: usize) -> Result<Conn, FetchError> {
        let host =
            self.peers.get(peer).ok_or_else(|| FetchError::Protocol("no such peer".into()))?;
        let base = BaseUrl::parse(&format!("http://{host}"))
            .map_err(|e| FetchError::Protocol(e.to_string()))?;
        Ok(Conn { client: Client::new(Duration::from_secs(10)), base })
    }

    fn meta(&self, c: &mut Conn) -> Result<Meta, FetchError> {
        let body = self.get(c, "/baseline/meta.json", 64 << 10)?;
        serde_json::from_slice(&body).map_err(|e| FetchError::Protocol(format!("meta: {e}")))
    }

    fn chunk(&self, c: &mut Conn, index: u64, limit: u64) -> Result<Vec<u8>, FetchError> {
        self.get(c, &format!("/baseline/chunk/{index}"), limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::{root_of, sync, Config, RetryPolicy};

    /// Real loopback servers, one of them corrupting: the baseline fails its first attempt
    /// on the root, restarts without the exposed liar, and completes.
    #[test]
    fn loopback_baseline_restarts_and_completes() {
        let mut s: Vec<_> =
            bavl_workload::initial(3).take(5000).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        s.sort();
        let snap =
            Arc::new(Snapshot::build(s.iter().map(|(k, v)| (&k[..], &v[..])), 8192).unwrap());
        let root = root_of(s.iter().map(|(k, v)| (&k[..], &v[..])));
        let mut peers = Vec::new();
        for corrupt in [true, false, false] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            peers.push(l.local_addr().unwrap().to_string());
            let snap = Arc::clone(&snap);
            std::thread::spawn(move || serve(l, snap, corrupt));
        }
        let t = Http { peers, timeout: Duration::from_secs(10) };
        let cfg = Config {
            peers: 3,
            trusted_root: root,
            workers: 4,
            policy: RetryPolicy::ExposeOneLiar { liars: vec![0] },
            max_attempts: 5,
        };
        let out = sync(&t, &cfg).unwrap();
        assert_eq!(out.attempts.len(), 2, "{:?}", out.attempts);
        assert!(!out.attempts[0].ok && out.attempts[0].served[0] > 0);
        assert_eq!(out.attempts[1].peers, vec![1, 2]);
        assert_eq!(out.entries, 5000);
        assert_eq!(out.stream, snap.stream);

        // Honest peers only: one attempt.
        let cfg = Config { policy: RetryPolicy::Same, peers: 2, ..cfg };
        let t = Http { peers: t.peers[1..].to_vec(), timeout: t.timeout };
        let out = sync(&t, &cfg).unwrap();
        assert_eq!(out.attempts.len(), 1);
        assert_eq!(out.root, root);
    }
}
