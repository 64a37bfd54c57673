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

/// Decodes standard base64 (CometBFT's JSON encoding of bytes); `None` if malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        acc = (acc << 6) | u32::from(val(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (bits < 6 && acc == 0).then_some(out)
}

/// What a node's own application reports (`/abci_info`): its height and app hash.
pub fn app_info(base: &str) -> Result<(u64, Vec<u8>), RpcError> {
    let v = get(base, "/abci_info")?;
    let r = &v["response"];
    let height = r["last_block_height"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    let hash = r["last_block_app_hash"].as_str().unwrap_or("");
    let hash = base64_decode(hash).ok_or_else(|| RpcError::Http("bad app hash".into()))?;
    Ok((height, hash))
}

/// A `/key` query with its proof: (height, value if present, proof type, proof bytes).
pub type Proven = (u64, Option<Vec<u8>>, String, Vec<u8>);

/// Queries `key` with `prove = true` (not verified here).
pub fn query_key(base: &str, key: &[u8]) -> Result<Proven, RpcError> {
    let path = format!("/abci_query?path=%22/key%22&data=0x{}&prove=true", hex::encode(key));
    let v = get(base, &path)?;
    let r = &v["response"];
    if r["code"].as_u64().unwrap_or(0) != 0 {
        return Err(RpcError::Rpc(format!("code {} {}", r["code"], r["log"])));
    }
    let b64 = |v: &serde_json::Value| base64_decode(v.as_str().unwrap_or(""));
    let height = r["height"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    let value = (r["log"] == "exists").then(|| b64(&r["value"]).unwrap_or_default());
    let op = &r["proofOps"]["ops"][0];
    let proof = b64(&op["data"]).ok_or_else(|| RpcError::Http("no proof".into()))?;
    Ok((height, value, op["type"].as_str().unwrap_or("").to_string(), proof))
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_decodes_and_refuses_garbage() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("a*==").is_none());
        assert!(base64_decode("aGVsbG9=").is_none()); // non-zero padding bits
    }
}
