//! A minimal client of CometBFT's JSON-RPC over HTTP GET (loopback tools and tests):
//! one request per connection, `Content-Length` or chunked bodies, bounded sizes and
//! timeouts. Not a general HTTP client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The largest response body read.
const MAX_BODY: usize = 64 << 20;

/// Errors of an RPC call.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("bad URL {0:?}: expected http://HOST:PORT")]
    Url(String),
    #[error("bad HTTP response: {0}")]
    Http(String),
    #[error("bad JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("RPC error: {0}")]
    Rpc(String),
}

/// Calls `GET {base}{path_and_query}` and returns the JSON-RPC `result`.
pub fn get(base: &str, path_and_query: &str) -> Result<serde_json::Value, RpcError> {
    let host = base.strip_prefix("http://").ok_or_else(|| RpcError::Url(base.into()))?;
    let host = host.trim_end_matches('/');
    let addr = host
        .to_socket_addrs()
        .map_err(|e| RpcError::Io(format!("resolving {host}"), e))?
        .next()
        .ok_or_else(|| RpcError::Url(base.into()))?;
    let io = |what: &str| {
        let what = format!("{what} {base}");
        move |e| RpcError::Io(what, e)
    };
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(io("connecting to"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(io("configuring"))?;
    let req = format!("GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(io("writing to"))?;
    let mut r = BufReader::new(s);
    let (status, chunked, len) = read_head(&mut r).map_err(io("reading from"))?;
    let body = if chunked { read_chunked(&mut r)? } else { read_plain(&mut r, len)? };
    if !(200..300).contains(&status) && body.is_empty() {
        return Err(RpcError::Http(format!("status {status}")));
    }
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    if let Some(e) = v.get("error") {
        return Err(RpcError::Rpc(e.to_string()));
    }
    v.get("result").cloned().ok_or_else(|| RpcError::Http("no result".into()))
}

fn read_head(r: &mut impl BufRead) -> std::io::Result<(u32, bool, Option<usize>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (mut chunked, mut len) = (false, None);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || line == "\r\n" || line.len() > 8192 {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().ok();
        } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    Ok((status, chunked, len))
}

fn read_plain(r: &mut impl Read, len: Option<usize>) -> Result<Vec<u8>, RpcError> {
    let mut body = Vec::new();
    let limit = len.unwrap_or(MAX_BODY).min(MAX_BODY) as u64;
    r.take(limit).read_to_end(&mut body).map_err(|e| RpcError::Io("reading the body".into(), e))?;
    Ok(body)
}

fn read_chunked(r: &mut impl BufRead) -> Result<Vec<u8>, RpcError> {
    let mut body = Vec::new();
    let io = |e| RpcError::Io("reading a chunked body".into(), e);
    loop {
        let mut line = String::new();
        r.read_line(&mut line).map_err(io)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| RpcError::Http(format!("bad chunk size {line:?}")))?;
        if size == 0 {
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(RpcError::Http("body too large".into()));
        }
        let at = body.len();
        body.resize(at + size, 0);
        r.read_exact(&mut body[at..]).map_err(io)?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).map_err(io)?;
    }
}

/// The node's latest height and its status JSON (`/status`).
pub fn latest_height(base: &str) -> Result<u64, RpcError> {
    let v = get(base, "/status")?;
    v["sync_info"]["latest_block_height"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| RpcError::Http("no sync_info.latest_block_height".into()))
}

/// The header of block `height`: (block hash, app hash), upper-case hex as CometBFT writes.
pub fn block_hashes(base: &str, height: u64) -> Result<(String, String), RpcError> {
    let v = get(base, &format!("/block?height={height}"))?;
    let hash = v["block_id"]["hash"].as_str();
    let app = v["block"]["header"]["app_hash"].as_str();
    match (hash, app) {
        (Some(h), Some(a)) => Ok((h.to_string(), a.to_string())),
        _ => Err(RpcError::Http(format!("no block_id.hash / app_hash at height {height}"))),
    }
}
