//! Checking a CometBFT header against a trusted validator set: the header's hash, its
//! commit's Ed25519 signatures (more than 2/3 of the voting power), and the chain.
//!
//! This is the light client's *verification step* for a chain whose validator set does
//! not change (bavl-abci never changes it): the trusted set comes from the genesis file,
//! and a header is accepted if it names that set (`validators_hash`), belongs to the
//! genesis chain, hashes to the block ID its commit signs, and that commit carries valid
//! precommit signatures of more than 2/3 of the set's power. Validator-set changes
//! (sequential or skipping verification across them) and the trusting period are not
//! handled. All input is untrusted JSON as CometBFT's RPC writes it (`/commit`, the
//! genesis file); nothing here panics on it.
//!
//! Hash inputs follow CometBFT v0.38 `types/block.go` (`Header.Hash`: a simple Merkle tree
//! of 14 protobuf-encoded fields, primitives in gogo wrapper messages),
//! `types/validator_set.go` (`SimpleValidator`s) and `types/canonical.go` (the
//! length-delimited `CanonicalVote` each validator signs).

use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use prost::Message;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tendermint_proto::google::protobuf::Timestamp;
use tendermint_proto::v0_38::crypto::{public_key, PublicKey};
use tendermint_proto::v0_38::types as pt;
use tendermint_proto::v0_38::version::Consensus;

/// Why a header was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LightError {
    #[error("malformed {0}")]
    Malformed(&'static str),
    #[error("the header hashes to {computed}, its commit signs {signed}")]
    HeaderHash { computed: String, signed: String },
    #[error("the header is of chain {found:?}, the genesis of {expected:?}")]
    ChainId { expected: String, found: String },
    #[error("the header names validator set {found}, the trusted one is {trusted}")]
    Validators { trusted: String, found: String },
    #[error("the commit has {found} signatures for {expected} validators")]
    SignatureCount { expected: usize, found: usize },
    #[error("signature {index} (validator {address}) does not verify")]
    BadSignature { index: usize, address: String },
    #[error("valid signatures of {signed} of {total} voting power: not more than 2/3")]
    NotEnoughPower { signed: i64, total: i64 },
}

/// One trusted validator.
#[derive(Debug, Clone)]
pub struct Validator {
    pub address: Vec<u8>,
    pub pub_key: [u8; 32],
    pub power: i64,
}

/// The trusted validator set and chain, from a genesis file.
#[derive(Debug, Clone)]
pub struct Trusted {
    pub chain_id: String,
    /// In CometBFT's order: voting power descending, then address ascending.
    pub validators: Vec<Validator>,
}

/// A header that passed: what the caller may now rely on.
#[derive(Debug, Clone)]
#[must_use]
pub struct VerifiedHeader {
    pub height: u64,
    pub app_hash: Vec<u8>,
    pub signed_power: i64,
    pub total_power: i64,
}

fn hex_field(v: &Value, what: &'static str) -> Result<Vec<u8>, LightError> {
    let s = v.as_str().ok_or(LightError::Malformed(what))?;
    hex::decode(s).map_err(|_| LightError::Malformed(what))
}

fn int_field(v: &Value, what: &'static str) -> Result<i64, LightError> {
    match v {
        Value::String(s) => s.parse().map_err(|_| LightError::Malformed(what)),
        Value::Number(n) => n.as_i64().ok_or(LightError::Malformed(what)),
        _ => Err(LightError::Malformed(what)),
    }
}

impl Trusted {
    /// Reads the chain ID and validators of a genesis file.
    pub fn from_genesis(genesis: &Value) -> Result<Trusted, LightError> {
        let chain_id = genesis["chain_id"].as_str().ok_or(LightError::Malformed("chain_id"))?;
        let list = genesis["validators"].as_array().ok_or(LightError::Malformed("validators"))?;
        let mut validators = Vec::with_capacity(list.len());
        for v in list {
            if v["pub_key"]["type"] != "tendermint/PubKeyEd25519" {
                return Err(LightError::Malformed("validator key type (ed25519 only)"));
            }
            let key = crate::rpc::base64_decode(v["pub_key"]["value"].as_str().unwrap_or(""))
                .and_then(|k| <[u8; 32]>::try_from(k).ok())
                .ok_or(LightError::Malformed("validator public key"))?;
            let address = Sha256::digest(key)[..20].to_vec();
            validators.push(Validator {
                address,
                pub_key: key,
                power: int_field(&v["power"], "power")?,
            });
        }
        if validators.is_empty() || validators.iter().any(|v| v.power <= 0) {
            return Err(LightError::Malformed("validators (none, or a power not positive)"));
        }
        validators.sort_by(|a, b| b.power.cmp(&a.power).then_with(|| a.address.cmp(&b.address)));
        Ok(Trusted { chain_id: chain_id.to_string(), validators })
    }

    /// `Header.validators_hash` of this set.
    pub fn validators_hash(&self) -> [u8; 32] {
        let leaves: Vec<Vec<u8>> = self
            .validators
            .iter()
            .map(|v| {
                let pub_key = PublicKey { sum: Some(public_key::Sum::Ed25519(v.pub_key.to_vec())) };
                pt::SimpleValidator { pub_key: Some(pub_key), voting_power: v.power }
                    .encode_to_vec()
            })
            .collect();
        merkle_root(&leaves)
    }
}

/// CometBFT's simple Merkle tree (RFC 6962 shape, split at the largest power of two).
pub fn merkle_root(leaves: &[Vec<u8>]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => Sha256::new().chain_update([0u8]).chain_update(&leaves[0]).finalize().into(),
        n => {
            let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
            let (l, r) = (merkle_root(&leaves[..k]), merkle_root(&leaves[k..]));
            Sha256::new().chain_update([1u8]).chain_update(l).chain_update(r).finalize().into()
        }
    }
}

/// Parses an RFC 3339 UTC time as CometBFT writes it (`2026-11-25T01:36:18.536732Z`).
pub fn parse_time(s: &str) -> Result<Timestamp, LightError> {
    let bad = LightError::Malformed("time");
    let s = s.strip_suffix('Z').ok_or(bad.clone())?;
    let (date, time) = s.split_once('T').ok_or(bad.clone())?;
    let num = |x: &str| x.parse::<i64>().map_err(|_| bad.clone());
    let d: Vec<&str> = date.split('-').collect();
    let (clock, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = clock.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad);
    }
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return Err(bad);
    }
    // Days from 1970-01-01 (H. Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + num(t[0])? * 3600 + num(t[1])? * 60 + num(t[2])?;
    let nanos = if frac.is_empty() { 0 } else { num(&format!("{frac:0<9}"))? as i32 };
    Ok(Timestamp { seconds, nanos })
}

fn block_id(v: &Value) -> Result<pt::BlockId, LightError> {
    Ok(pt::BlockId {
        hash: hex_field(&v["hash"], "block_id.hash")?,
        part_set_header: Some(pt::PartSetHeader {
            total: int_field(&v["parts"]["total"], "parts.total")? as u32,
            hash: hex_field(&v["parts"]["hash"], "parts.hash")?,
        }),
    })
}

/// `Header.Hash()` of a header in RPC JSON.
pub fn header_hash(h: &Value) -> Result<[u8; 32], LightError> {
    let bytes_value = |b: Vec<u8>| if b.is_empty() { vec![] } else { wrap_bytes(&b) };
    let hx = |k: &'static str| hex_field(&h[k], k).map(bytes_value);
    let version = Consensus {
        block: int_field(&h["version"]["block"], "version.block")? as u64,
        app: int_field(h["version"].get("app").unwrap_or(&Value::from(0)), "version.app")? as u64,
    };
    let chain_id = h["chain_id"].as_str().ok_or(LightError::Malformed("chain_id"))?;
    let height = int_field(&h["height"], "height")?;
    let mut height_enc = vec![];
    if height != 0 {
        height_enc.push(0x08);
        bavl_core::codec::put_varint(&mut height_enc, height as u64);
    }
    let time = parse_time(h["time"].as_str().ok_or(LightError::Malformed("time"))?)?;
    let leaves = vec![
        version.encode_to_vec(),
        bytes_value(chain_id.as_bytes().to_vec()),
        height_enc,
        time.encode_to_vec(),
        block_id(&h["last_block_id"])?.encode_to_vec(),
        hx("last_commit_hash")?,
        hx("data_hash")?,
        hx("validators_hash")?,
        hx("next_validators_hash")?,
        hx("consensus_hash")?,
        hx("app_hash")?,
        hx("last_results_hash")?,
        hx("evidence_hash")?,
        hx("proposer_address")?,
    ];
    Ok(merkle_root(&leaves))
}

/// A gogo `BytesValue`/`StringValue` of non-empty content: field 1, length-delimited.
fn wrap_bytes(b: &[u8]) -> Vec<u8> {
    let mut out = vec![0x0a];
    bavl_core::codec::put_varint(&mut out, b.len() as u64);
    out.extend_from_slice(b);
    out
}

/// Verifies `signed_header` (the `signed_header` of RPC `/commit`) against `trusted`.
pub fn verify(trusted: &Trusted, signed_header: &Value) -> Result<VerifiedHeader, LightError> {
    let h = &signed_header["header"];
    let c = &signed_header["commit"];
    let chain_id = h["chain_id"].as_str().unwrap_or("");
    if chain_id != trusted.chain_id {
        let (expected, found) = (trusted.chain_id.clone(), chain_id.to_string());
        return Err(LightError::ChainId { expected, found });
    }
    let vals_hash = trusted.validators_hash();
    let named = hex_field(&h["validators_hash"], "validators_hash")?;
    if named != vals_hash {
        let (trusted, found) = (hex::encode(vals_hash), hex::encode(named));
        return Err(LightError::Validators { trusted, found });
    }
    let bid = block_id(&c["block_id"])?;
    let computed = header_hash(h)?;
    if bid.hash != computed {
        let (computed, signed) = (hex::encode(computed), hex::encode(&bid.hash));
        return Err(LightError::HeaderHash { computed, signed });
    }
    let height = int_field(&h["height"], "height")?;
    if int_field(&c["height"], "commit.height")? != height {
        return Err(LightError::Malformed("commit.height (not the header's)"));
    }
    let signed_power = check_signatures(trusted, c, &bid, height, chain_id)?;
    let total: i64 = trusted.validators.iter().map(|v| v.power).sum();
    if signed_power.saturating_mul(3) <= total.saturating_mul(2) {
        return Err(LightError::NotEnoughPower { signed: signed_power, total });
    }
    Ok(VerifiedHeader {
        height: height as u64,
        app_hash: hex_field(&h["app_hash"], "app_hash")?,
        signed_power,
        total_power: total,
    })
}

/// The voting power of the valid precommits for `bid`; a bad signature is an error.
fn check_signatures(
    trusted: &Trusted,
    c: &Value,
    bid: &pt::BlockId,
    height: i64,
    chain_id: &str,
) -> Result<i64, LightError> {
    let sigs = c["signatures"].as_array().ok_or(LightError::Malformed("signatures"))?;
    if sigs.len() != trusted.validators.len() {
        let (expected, found) = (trusted.validators.len(), sigs.len());
        return Err(LightError::SignatureCount { expected, found });
    }
    let round = int_field(&c["round"], "round")?;
    let psh = bid.part_set_header.clone().unwrap_or_default();
    let mut power = 0i64;
    for (index, (sig, val)) in sigs.iter().zip(&trusted.validators).enumerate() {
        // 2 = BLOCK_ID_FLAG_COMMIT: a precommit for this block. Absent and nil votes
        // carry no power for it.
        if int_field(&sig["block_id_flag"], "block_id_flag")? != 2 {
            continue;
        }
        let address = hex::encode(&val.address);
        let bad = || LightError::BadSignature { index, address: address.clone() };
        if hex_field(&sig["validator_address"], "validator_address")? != val.address {
            return Err(bad());
        }
        let vote = pt::CanonicalVote {
            r#type: pt::SignedMsgType::Precommit as i32,
            height,
            round,
            block_id: Some(pt::CanonicalBlockId {
                hash: bid.hash.clone(),
                part_set_header: Some(pt::CanonicalPartSetHeader {
                    total: psh.total,
                    hash: psh.hash.clone(),
                }),
            }),
            timestamp: Some(parse_time(sig["timestamp"].as_str().unwrap_or(""))?),
            chain_id: chain_id.to_string(),
        };
        let bytes = vote.encode_length_delimited_to_vec();
        let signature = crate::rpc::base64_decode(sig["signature"].as_str().unwrap_or(""))
            .and_then(|s| <[u8; 64]>::try_from(s).ok())
            .ok_or_else(bad)?;
        let key = VerifyingKey::from_bytes(&val.pub_key).map_err(|_| bad())?;
        key.verify(&bytes, &Signature::from_bytes(&signature)).map_err(|_| bad())?;
        power += val.power;
    }
    Ok(power)
}
