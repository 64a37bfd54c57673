//! `bavl verify`: check one proof or exported chunk against a trusted root, for scripts.
//!
//! Prints what the proof establishes (JSON with `--json`) and exits 0, or prints the typed
//! error and exits 1. Uses nothing but `bavl_core`'s standalone verifiers.

use std::ops::Bound;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use bavl_core::{
    verify_absence, verify_chunk, verify_membership, verify_range, Digest, ProofError, Sha256,
};
use serde_json::{json, Value};

/// Which verifier to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `--key` maps to `--value`.
    Membership,
    /// `--key` is not in the tree.
    Absence,
    /// Every entry within `--lo`..`--hi`.
    Range,
    /// Exported chunk number `--index`.
    Chunk,
}

impl Kind {
    /// The kind's name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Membership => "membership",
            Kind::Absence => "absence",
            Kind::Range => "range",
            Kind::Chunk => "chunk",
        }
    }
}

/// A range bound given on the command line: `unbounded`, `included:HEX` or `excluded:HEX`.
#[derive(Clone, Debug)]
pub enum OwnedBound {
    Unbounded,
    Included(Vec<u8>),
    Excluded(Vec<u8>),
}

impl OwnedBound {
    pub fn as_bound(&self) -> Bound<&[u8]> {
        match self {
            OwnedBound::Unbounded => Bound::Unbounded,
            OwnedBound::Included(k) => Bound::Included(k),
            OwnedBound::Excluded(k) => Bound::Excluded(k),
        }
    }
}

fn parse_bound(s: &str) -> Result<OwnedBound, String> {
    let hex = |h: &str| hex::decode(h).map_err(|e| format!("bad hex: {e}"));
    match s.split_once(':') {
        None if s == "unbounded" => Ok(OwnedBound::Unbounded),
        Some(("included", h)) => Ok(OwnedBound::Included(hex(h)?)),
        Some(("excluded", h)) => Ok(OwnedBound::Excluded(hex(h)?)),
        _ => Err("expected unbounded, included:HEX or excluded:HEX".into()),
    }
}

/// Bytes given in hex (an alias, so that clap takes `Option<HexBytes>` as one value).
pub type HexBytes = Vec<u8>;

pub fn parse_hex(s: &str) -> Result<HexBytes, String> {
    hex::decode(s).map_err(|e| format!("bad hex: {e}"))
}

fn parse_root(s: &str) -> Result<Digest, String> {
    let bytes = parse_hex(s)?;
    bytes.try_into().map_err(|_| "a root is 32 bytes (64 hex digits)".into())
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The trusted root hash: 64 hex digits.
    #[arg(long, value_name = "HEX", value_parser = parse_root)]
    root: Digest,
    /// Which verifier to run.
    #[arg(long, value_enum)]
    kind: Kind,
    /// File holding the proof or chunk as raw bytes.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "proof_hex",
        conflicts_with = "proof_hex"
    )]
    proof: Option<PathBuf>,
    /// The proof or chunk in hex (instead of --proof).
    #[arg(long, value_name = "HEX", value_parser = parse_hex)]
    proof_hex: Option<HexBytes>,
    /// The key in hex (membership, absence).
    #[arg(long, value_name = "HEX", value_parser = parse_hex,
          required_if_eq_any = [("kind", "membership"), ("kind", "absence")])]
    key: Option<HexBytes>,
    /// The value in hex (membership).
    #[arg(long, value_name = "HEX", value_parser = parse_hex, required_if_eq("kind", "membership"))]
    value: Option<HexBytes>,
    /// Lower bound of a range: unbounded, included:HEX or excluded:HEX.
    #[arg(long, value_name = "BOUND", default_value = "unbounded", value_parser = parse_bound)]
    lo: OwnedBound,
    /// Upper bound of a range: unbounded, included:HEX or excluded:HEX.
    #[arg(long, value_name = "BOUND", default_value = "unbounded", value_parser = parse_bound)]
    hi: OwnedBound,
    /// The chunk's index (chunk).
    #[arg(long, value_name = "N", required_if_eq("kind", "chunk"))]
    index: Option<u64>,
    /// Print the result (or the error) as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What to verify a proof against, besides the root.
#[derive(Clone, Debug)]
pub struct Query {
    pub kind: Kind,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lo: OwnedBound,
    pub hi: OwnedBound,
    pub index: u64,
}

impl Query {
    /// A query of `kind` with empty inputs and unbounded bounds.
    pub fn new(kind: Kind) -> Self {
        let (lo, hi) = (OwnedBound::Unbounded, OwnedBound::Unbounded);
        Query { kind, key: Vec::new(), value: Vec::new(), lo, hi, index: 0 }
    }
}

/// Runs the verifier; exit code 1 if the proof is rejected.
pub fn run(args: &VerifyArgs) -> Result<ExitCode> {
    let proof = match (&args.proof, &args.proof_hex) {
        (_, Some(bytes)) => bytes.clone(),
        (Some(path), None) => {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, None) => return Err(anyhow!("give --proof or --proof-hex")),
    };
    let query = Query {
        kind: args.kind,
        key: args.key.clone().unwrap_or_default(),
        value: args.value.clone().unwrap_or_default(),
        lo: args.lo.clone(),
        hi: args.hi.clone(),
        index: args.index.unwrap_or_default(),
    };
    let (text, json) = match check(&args.root, &query, &proof) {
        Ok(found) => found,
        Err(e) => {
            let variant = variant(&e);
            if args.json {
                println!("{}", json!({ "ok": false, "error": e.to_string(), "variant": variant }));
            } else {
                eprintln!("rejected ({variant}): {e}");
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The error's variant name (`RootMismatch`, `WrongIndex`, `Decode`...).
pub fn variant(e: &ProofError) -> String {
    e.name().to_string()
}

fn entries_json<'a>(entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Value {
    entries.map(|(k, v)| json!({ "key": hex::encode(k), "value": hex::encode(v) })).collect()
}

fn entries_text(entries: &Value) -> String {
    let lines = entries.as_array().into_iter().flatten();
    lines
        .map(|e| {
            format!(
                "\n  {} = {}",
                e["key"].as_str().unwrap_or(""),
                e["value"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Runs the verifier; returns a line for people and the JSON result.
pub fn check(root: &Digest, q: &Query, proof: &[u8]) -> Result<(String, Value), ProofError> {
    let key = &q.key[..];
    Ok(match q.kind {
        Kind::Membership => {
            let value = &q.value[..];
            let m = verify_membership::<Sha256>(root, key, value, proof)?;
            let text = format!(
                "verified membership: key {} is at index {} of {} keys",
                hex::encode(key),
                m.index,
                m.key_count
            );
            (
                text,
                json!({ "ok": true, "kind": "membership", "index": m.index, "key_count": m.key_count }),
            )
        }
        Kind::Absence => {
            let a = verify_absence::<Sha256>(root, key, proof)?;
            let text = format!(
                "verified absence: key {} is not among the {} keys",
                hex::encode(key),
                a.key_count
            );
            (text, json!({ "ok": true, "kind": "absence", "key_count": a.key_count }))
        }
        Kind::Range => {
            let r = verify_range::<Sha256>(root, q.lo.as_bound(), q.hi.as_bound(), proof)?;
            let entries = entries_json(r.entries.iter().map(|(k, v)| (&k[..], &v[..])));
            let text = format!(
                "verified range: {} of {} keys within the bounds{}",
                r.entries.len(),
                r.key_count,
                entries_text(&entries)
            );
            (
                text,
                json!({ "ok": true, "kind": "range", "key_count": r.key_count, "entries": entries }),
            )
        }
        Kind::Chunk => chunk(root, q.index, proof)?,
    })
}

fn chunk(root: &Digest, index: u64, proof: &[u8]) -> Result<(String, Value), ProofError> {
    let c = verify_chunk::<Sha256>(root, index, proof)?;
    let entries = entries_json(c.entries());
    let text = format!(
        "verified chunk {} of {}: {} entries after {} keys, key-height {}, capacity {}{}",
        c.index,
        c.chunk_count,
        c.len(),
        c.keys_before,
        c.key_height,
        c.capacity,
        entries_text(&entries)
    );
    let json = json!({
        "ok": true, "kind": "chunk", "index": c.index, "chunk_count": c.chunk_count,
        "key_count": c.key_count, "keys_before": c.keys_before, "key_height": c.key_height,
        "capacity": c.capacity, "entries": entries,
    });
    Ok((text, json))
}
