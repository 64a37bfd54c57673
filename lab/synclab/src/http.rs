//! The baseline over HTTP/1.1 (std::net, keep-alive, one thread per connection):
//! `GET /baseline/meta.json` and `GET /baseline/chunk/{i}`. A server started with
//! `corrupt` flips one byte in the middle of every chunk it sends (the B+AVL paper's
//! Byzantine peer corrupts chunks; the baseline cannot tell until the end).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

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
    stream: TcpStream,
    snap: &Snapshot,
    meta: &[u8],
    corrupt: bool,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        // Skip the headers (bounded).
        let mut head = line.len();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h)? == 0 {
                return Ok(());
            }
            head += h.len();
            if head > 16 << 10 {
                return Ok(());
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
        }
        let path = line.split_whitespace().nth(1).unwrap_or("");
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

/// The client side: peers by `host:port`.
pub struct Http {
    pub peers: Vec<String>,
    pub timeout: Duration,
}

pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
}

impl Http {
    fn get(&self, c: &mut Conn, path: &str, limit: u64) -> Result<Vec<u8>, FetchError> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", c.host);
        c.writer.write_all(req.as_bytes())?;
        let mut status = String::new();
        c.reader.read_line(&mut status)?;
        let code = status.split_whitespace().nth(1).unwrap_or("");
        let mut len = None;
        let mut head = status.len();
        loop {
            let mut h = String::new();
            if c.reader.read_line(&mut h)? == 0 {
                return Err(FetchError::Protocol("connection closed in the head".into()));
            }
            head += h.len();
            if head > 16 << 10 {
                return Err(FetchError::Protocol("head over 16 KiB".into()));
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<u64>().ok();
                }
            }
        }
        let len = len.ok_or_else(|| FetchError::Protocol("no Content-Length".into()))?;
        if len > limit {
            return Err(FetchError::Protocol(format!(
                "body of {len} bytes over the limit {limit}"
            )));
        }
        let mut body = vec![0u8; len as usize];
        c.reader.read_exact(&mut body)?;
        if code != "200" {
            return Err(FetchError::Protocol(format!("status {code}")));
        }
        Ok(body)
    }
}

impl Transport for Http {
    type Conn = Conn;

    fn connect(&self, peer: usize) -> Result<Conn, FetchError> {
        let host =
            self.peers.get(peer).ok_or_else(|| FetchError::Protocol("no such peer".into()))?;
        let addr = host
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| FetchError::Protocol(format!("{host}: no address")))?;
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        let writer = s.try_clone()?;
        Ok(Conn { reader: BufReader::with_capacity(256 << 10, s), writer, host: host.clone() })
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
