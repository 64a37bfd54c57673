//! A read that trusts no node, the logic of `bavl query --rpc URL --key HEX --genesis
//! FILE`. The value and its bavl proof come from any node's RPC; the header that carries
//! the app hash they are proved against is checked against the genesis validators'
//! signatures (more than 2/3 of the voting power, [`crate::light`]); the
//! proof is verified against that app hash. A node can refuse to answer, never lie.
//!
//! The state after block `h` is committed to by header `h + 1`; the node answers for its
//! latest committed height, and the header after it is awaited (30 s at most).

use std::time::{Duration, Instant};

use crate::light::{self, Trusted, VerifiedHeader};
use crate::query::{OP_ABSENCE, OP_MEMBERSHIP};
use crate::rpc;

/// Why a trustless read failed.
#[derive(Debug, thiserror::Error)]
pub enum TrustlessError {
    #[error("the genesis file: {0}")]
    Genesis(String),
    #[error("asking the node: {0}")]
    Rpc(#[from] rpc::RpcError),
    #[error("no canonical commit of height {0} within 30 s")]
    NoCommit(u64),
    #[error("header {height} does not verify: {source}")]
    Header { height: u64, source: light::LightError },
    #[error("the {kind} proof does not verify against the header's app hash: {source}")]
    Proof { kind: &'static str, source: bavl_core::ProofError },
    #[error("the node answered a {kind:?} proof for a key it says is {state}")]
    Mismatch { kind: String, state: &'static str },
}

/// What a verified read established.
#[derive(Debug, Clone)]
#[must_use]
pub struct Verified {
    /// The key's value at `height`, or `None`: proved absent.
    pub value: Option<Vec<u8>>,
    /// The block after which the state was read.
    pub height: u64,
    /// The app hash of header `height + 1`, as the validators signed it.
    pub app_hash: [u8; 32],
    pub header: VerifiedHeader,
}

/// Reads the genesis validators from a genesis file's text.
pub fn trusted_from_genesis(text: &str) -> Result<Trusted, TrustlessError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| TrustlessError::Genesis(e.to_string()))?;
    Trusted::from_genesis(&v).map_err(|e| TrustlessError::Genesis(e.to_string()))
}

/// Fetches the commit of `height` (waiting up to 30 s for it) and verifies its header.
pub fn verified_header(
    base: &str,
    trusted: &Trusted,
    height: u64,
) -> Result<VerifiedHeader, TrustlessError> {
    let start = Instant::now();
    let signed = loop {
        match rpc::get(base, &format!("/commit?height={height}")) {
            Ok(v) if v["canonical"] == true => break v["signed_header"].clone(),
            Err(e) if start.elapsed() >= Duration::from_secs(30) => return Err(e.into()),
            _ if start.elapsed() >= Duration::from_secs(30) => {
                return Err(TrustlessError::NoCommit(height))
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    light::verify(trusted, &signed).map_err(|source| TrustlessError::Header { height, source })
}

/// Reads `key` from the node at `base` and verifies it down to the genesis validators.
pub fn read(base: &str, trusted: &Trusted, key: &[u8]) -> Result<Verified, TrustlessError> {
    let (height, value, kind, proof) = rpc::query_key(base, key)?;
    let header = verified_header(base, trusted, height + 1)?;
    let app_hash: [u8; 32] =
        header.app_hash.as_slice().try_into().map_err(|_| TrustlessError::Header {
            height: height + 1,
            source: light::LightError::Malformed("app_hash"),
        })?;
    type H = bavl_core::Sha256;
    match (&value, kind.as_str()) {
        (Some(v), OP_MEMBERSHIP) => bavl_core::verify_membership::<H>(&app_hash, key, v, &proof)
            .map(|_| ())
            .map_err(|source| TrustlessError::Proof { kind: "membership", source })?,
        (None, OP_ABSENCE) => bavl_core::verify_absence::<H>(&app_hash, key, &proof)
            .map(|_| ())
            .map_err(|source| TrustlessError::Proof { kind: "absence", source })?,
        _ => {
            let state = if value.is_some() { "present" } else { "absent" };
            return Err(TrustlessError::Mismatch { kind, state });
        }
    }
    Ok(Verified { value, height, app_hash, header })
}

impl Verified {
    /// The `KEY=VALUE` lines both CLIs print.
    pub fn lines(&self, key_hex: &str) -> String {
        let value = match &self.value {
            Some(v) => format!("value={}", hex::encode(v)),
            None => "absent=true".to_string(),
        };
        format!(
            "key={key_hex}\n{value}\nheight={}\napp_hash={}\nverified: header {} signed by {} \
             of {} voting power (genesis validators); {} proof against its app hash",
            self.height,
            hex::encode(self.app_hash),
            self.header.height,
            self.header.signed_power,
            self.header.total_power,
            if self.value.is_some() { "membership" } else { "absence" }
        )
    }
}
