//! The sync's floor: every chunk of the version fetched once from the honest servers by
//! a plain HTTP/1.1 client that verifies nothing and writes nothing, with as many
//! requests in flight as `bavl sync` may have (`--max-in-flight`, 128). One thread per
//! keep-alive connection, the connections spread evenly over the servers; each thread
//! takes the next chunk index from a shared counter, so a faster server serves more.
//! Bodies are read into one reused buffer and dropped.
//!
//! Only what bavl's own server sends is understood (`Content-Length` bodies, keep-alive);
//! any status but 200 is an error: the floor is measured on honest servers only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

/// How long a read may wait on a server.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One keep-alive connection to a server.
pub struct Conn {
    host: String,
    reader: BufReader<TcpStream>,
}

/// `host:port` of a base URL `http://host:port`.
pub fn host_of(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").with_context(|| format!("{url}: not http://"))?;
    Ok(rest.trim_end_matches('/').to_string())
}

impl Conn {
    pub fn open(url: &str) -> Result<Conn> {
        let host = host_of(url)?;
        let s = TcpStream::connect(&host).with_context(|| format!("connecting to {host}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(TIMEOUT))?;
        Ok(Conn { host, reader: BufReader::with_capacity(64 << 10, s) })
    }

    /// `GET path` into `body` (cleared first).
    pub fn get(&mut self, path: &str, body: &mut Vec<u8>) -> Result<()> {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept-Encoding: identity\r\n\r\n",
            self.host
        );
        self.reader.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        let (mut status, mut len, mut first) = (0u16, None, true);
        loop {
            line.clear();
            let n = self.reader.read_line(&mut line)?;
            ensure!(n > 0, "{}: connection closed before a response to {path}", self.host);
            let l = line.trim_end();
            if first {
                status = l.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                first = false;
            } else if l.is_empty() {
                break;
            } else if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<u64>().ok();
                }
            }
        }
        let len = len.with_context(|| format!("{}: no Content-Length for {path}", self.host))?;
        body.clear();
        body.resize(len as usize, 0);
        self.reader.read_exact(body)?;
        if status != 200 {
            bail!("{}: {path}: status {status}", self.host);
        }
        Ok(())
    }
}

/// One GET of `path` from `url`.
pub fn get(url: &str, path: &str) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    Conn::open(url)?.get(path, &mut body)?;
    Ok(body)
}

/// What the floor fetch did.
#[derive(Debug, Clone, Serialize)]
pub struct Fetched {
    pub seconds: f64,
    pub bytes: u64,
    pub chunks: u64,
    pub connections: usize,
    pub servers: usize,
}

/// Fetches chunks `0..count` of `root` once each from `urls`, `connections` at a time.
pub fn fetch_all(urls: &[String], root: &str, count: u64, connections: usize) -> Result<Fetched> {
    ensure!(!urls.is_empty() && connections > 0, "no server or no connection");
    let next = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let start = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                let url = &urls[c % urls.len()];
                let (next, bytes) = (&next, &bytes);
                s.spawn(move || -> Result<()> {
                    let mut conn = Conn::open(url)?;
                    let mut body = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            return Ok(());
                        }
                        let path = format!("/v1/chunks/{root}/{i}");
                        if conn.get(&path, &mut body).is_err() {
                            // The server may have closed an idle connection: once more.
                            conn = Conn::open(url)?;
                            conn.get(&path, &mut body)?;
                        }
                        bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("a fetch thread panicked")))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(Fetched {
        seconds,
        bytes: bytes.into_inner(),
        chunks: count,
        connections,
        servers: urls.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A keep-alive server answering `/v1/chunks/R/I` with I+1 bytes, anything else 404.
    fn tiny_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut w = s;
                    loop {
                        let mut first = String::new();
                        if r.read_line(&mut first).unwrap_or(0) == 0 {
                            return;
                        }
                        let mut l = String::new();
                        while r.read_line(&mut l).unwrap_or(0) > 0 && l.trim_end() != "" {
                            l.clear();
                        }
                        let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                        let n = path
                            .strip_prefix("/v1/chunks/r/")
                            .and_then(|i| i.parse::<usize>().ok());
                        let (status, body) = match n {
                            Some(i) => (200, vec![b'x'; i + 1]),
                            None => (404, b"no".to_vec()),
                        };
                        let head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n", body.len());
                        if w.write_all(head.as_bytes()).and_then(|()| w.write_all(&body)).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    #[test]
    fn every_chunk_is_fetched_once() {
        let urls = vec![tiny_server(), tiny_server()];
        let f = fetch_all(&urls, "r", 100, 5).unwrap();
        assert_eq!(f.bytes, (1..=100).sum::<u64>());
        assert_eq!((f.chunks, f.connections, f.servers), (100, 5, 2));
        assert!(get(&urls[0], "/v1/other").is_err());
        assert_eq!(get(&urls[1], "/v1/chunks/r/2").unwrap(), b"xxx");
    }
}
