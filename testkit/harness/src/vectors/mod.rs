//! `bavl-harness vectors`: known-answer test vectors for verifiers in other languages.
//!
//! For each fixed tree of [`trees`] the file records the operations that built it, its
//! entries and root, membership / absence / range proofs, every exported chunk with what
//! verifying it yields, and negative vectors that must be rejected. Every vector is
//! checked against `bavl_core`'s verifiers while it is generated. The output is
//! deterministic, so `--check` can compare the file on disk with a fresh generation.

mod record;
mod rules;
mod trees;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bavl_core::hash::FORMAT_VERSION;
use bavl_core::{Hasher, Sha256};
use serde::Serialize;

/// The whole file.
#[derive(Serialize)]
struct File {
    description: &'static str,
    /// The format version (first byte of every proof, committed in every root).
    format_version: u8,
    /// The hash function of every root, proof and chunk in this file.
    hash: &'static str,
    generator: &'static str,
    conventions: Vec<&'static str>,
    trees: Vec<TreeVectors>,
}

const CONVENTIONS: &[&str] = &[
    "All keys, values, roots, proofs and chunk bytes are lowercase hex.",
    "operations rebuild the tree from empty (the shape depends on history); entries are the final contents in key order.",
    "membership: verify_membership(root, key, value, proof) must accept and yield index and key_count.",
    "absence: verify_absence(root, key, proof) must accept and yield key_count.",
    "range: verify_range(root, lo, hi, proof) must accept and yield exactly entries (bounds: kind included | excluded | unbounded).",
    "chunks: verify_chunk(root, index, bytes) must accept and yield chunk_count, key_count, keys_before, key_height and the entries entries[keys_before .. keys_before + len].",
    "negative: the named verifier (kind) called with the given inputs and the tree's root must reject with the error kind `error`, one of Input, Decode, WrongKind, Structure, RootMismatch, WrongIndex (docs/design.md section 3, Order of checks and error kinds). Inputs a verifier does not take are absent (key and value for membership, key for absence, lo and hi for range, index for chunk).",
    "Input vectors carry a key, value or bound key outside the limits (empty, 1025 bytes) or inverted bounds: a verifier must refuse them before reading the proof.",
    "Bounds: lo/hi are {kind: included | excluded | unbounded, key: hex}; below lo means key < lo.key (included) or key <= lo.key (excluded); above hi likewise.",
    "Verifiers take the proof bytes as given: none of the vectors' byte strings may be normalised, trimmed or re-encoded before verification.",
    "A fourth verifier should also pass the differential corpus (scripts/verifiers.sh): valid proofs and chunks, every-byte mutants and forged proofs, with the error kind each must give.",
];

/// A key-value pair in hex.
#[derive(Serialize)]
struct Entry {
    key: String,
    value: String,
}

/// One operation of a tree's history.
#[derive(Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum OpJson {
    Insert { key: String, value: String },
    Remove { key: String },
}

/// A range bound: `kind` is included, excluded or unbounded; `key` is absent when unbounded.
#[derive(Serialize, Clone)]
struct BoundJson {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

#[derive(Serialize)]
struct Membership {
    key: String,
    value: String,
    proof: String,
    index: u64,
    key_count: u64,
}

#[derive(Serialize)]
struct Absence {
    description: &'static str,
    key: String,
    proof: String,
    key_count: u64,
}

#[derive(Serialize)]
struct Range {
    lo: BoundJson,
    hi: BoundJson,
    proof: String,
    entries: Vec<Entry>,
    key_count: u64,
}

#[derive(Serialize)]
struct Chunk {
    index: u64,
    bytes: String,
    key_height: u8,
    keys_before: u64,
    len: usize,
    chunk_count: u64,
    key_count: u64,
}

/// Inputs that the verifier named by `kind` must reject.
#[derive(Serialize, Default)]
struct Negative {
    description: String,
    /// membership, absence, range or chunk.
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lo: Option<BoundJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hi: Option<BoundJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<u64>,
    proof: String,
    expected: &'static str,
    /// The error kind every verifier must reject with (`docs/design.md` §3).
    error: &'static str,
}

/// Everything recorded for one tree.
#[derive(Serialize)]
struct TreeVectors {
    name: &'static str,
    description: &'static str,
    capacity: u32,
    operations: Vec<OpJson>,
    entries: Vec<Entry>,
    root: String,
    key_count: u64,
    chunk_count: u64,
    membership: Vec<Membership>,
    absence: Vec<Absence>,
    range: Vec<Range>,
    chunks: Vec<Chunk>,
    negative: Vec<Negative>,
}

/// The vectors file's text.
fn generate() -> Result<String> {
    let trees = trees::specs().iter().map(record::record).collect::<Result<Vec<_>>>()?;
    let file = File {
        description: "Known-answer vectors of the bavl B+AVL tree: roots, proofs and chunks. See docs/design.md.",
        format_version: FORMAT_VERSION,
        hash: Sha256::NAME,
        generator: "bavl-harness vectors (testkit/harness); regenerate with `cargo run --release -p bavl-harness -- vectors`",
        conventions: CONVENTIONS.to_vec(),
        trees,
    };
    Ok(serde_json::to_string_pretty(&file)? + "\n")
}

/// Writes the vectors to `out`, or with `check` compares them with the file.
pub fn run(out: &Path, check: bool) -> Result<ExitCode> {
    let text = generate()?;
    if check {
        let disk =
            std::fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
        if disk != text {
            let line = disk.lines().zip(text.lines()).position(|(a, b)| a != b);
            let at = line.map_or("its length".to_string(), |l| format!("line {}", l + 1));
            eprintln!(
                "{} is out of date (first difference at {at}): run `bavl-harness vectors --out {}`",
                out.display(),
                out.display()
            );
            return Ok(ExitCode::FAILURE);
        }
        println!("{} is up to date ({} bytes)", out.display(), text.len());
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {} ({} bytes)", out.display(), text.len());
    Ok(ExitCode::SUCCESS)
}
