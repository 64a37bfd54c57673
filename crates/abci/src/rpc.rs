//! A minimal client of CometBFT's JSON-RPC over HTTP GET (loopback tools and tests),
//! on bavl-sync's bounded HTTP reader ([`bavl_sync::http::get`]): one request per
//! connection, `Content-Length` or chunked bodies, at most [`MAX_BODY`] bytes of body and
//! [`TIMEOUT`] for the whole exchange. Not a general HTTP client.

use std::time::Duration;

use bavl_sync::http::{self, GetError, Limits};

/// The largest response body read.
pub const MAX_BODY: u64 = 64 << 20;
/// The longest an RPC call may take, from connecting to the body's last byte.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of an RPC call.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error(transparent)]
    Get(#[from] GetError),
    #[error("bad HTTP response: {0}")]
    Http(String),
    #[error("bad JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("RPC error: {0}")]
    Rpc(String),
}

/// Calls `GET {base}{path_and_query}` and returns the JSON-RPC `result`. A status other
/// than 2xx is an error only without a body: CometBFT answers JSON-RPC errors with a 500
/// and the error in the body.
pub fn get(base: &str, path_and_query: &str) -> Result<serde_json::Value, RpcError> {
    let url = format!("{}{path_and_query}", base.trim_end_matches('/'));
    let limits =
        Limits { connect_timeout: Duration::from_secs(5), ..Limits::new(MAX_BODY, TIMEOUT) };
    let response = http::get(&url, &limits)?;
    let (status, body) = (response.status, response.body);
    if !(200..300).contains(&status) && body.is_empty() {
        return Err(RpcError::Http(format!("status {status}")));
    }
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    if let Some(e) = v.get("error") {
        return Err(RpcError::Rpc(e.to_string()));
    }
    v.get("result").cloned().ok_or_else(|| RpcError::Http("no result".into()))
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
