//! Re-verifies every vector of `docs/vectors/core.json` using only the JSON and
//! `bavl_core`'s standalone verifiers (`verify_membership`, `verify_absence`,
//! `verify_range`, `verify_chunk`): the model for a verifier in another language.
//! Positive vectors must be accepted with exactly the recorded results; negative vectors
//! must be rejected.

use std::ops::Bound;
use std::path::PathBuf;

use bavl_core::{verify_absence, verify_chunk, verify_membership, verify_range, Digest, Sha256};
use serde_json::Value;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn load() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/vectors/core.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("the vectors are JSON")
}

fn trees(file: &Value) -> &Vec<Value> {
    file["trees"].as_array().expect("trees is an array")
}

fn bytes(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("a hex string")).expect("valid hex")
}

fn num(v: &Value) -> u64 {
    v.as_u64().expect("an unsigned integer")
}

fn root(tree: &Value) -> Digest {
    bytes(&tree["root"]).try_into().expect("a 32-byte root")
}

fn list(v: &Value) -> &Vec<Value> {
    v.as_array().expect("an array")
}

fn entries(v: &Value) -> Entries {
    list(v).iter().map(|e| (bytes(&e["key"]), bytes(&e["value"]))).collect()
}

/// A bound from `{"kind": "included" | "excluded" | "unbounded", "key": hex}`.
enum OwnedBound {
    Unbounded,
    Included(Vec<u8>),
    Excluded(Vec<u8>),
}

impl OwnedBound {
    fn parse(v: &Value) -> Self {
        match v["kind"].as_str().expect("a bound kind") {
            "unbounded" => OwnedBound::Unbounded,
            "included" => OwnedBound::Included(bytes(&v["key"])),
            "excluded" => OwnedBound::Excluded(bytes(&v["key"])),
            other => panic!("unknown bound kind {other}"),
        }
    }
    fn get(&self) -> Bound<&[u8]> {
        match self {
            OwnedBound::Unbounded => Bound::Unbounded,
            OwnedBound::Included(k) => Bound::Included(k),
            OwnedBound::Excluded(k) => Bound::Excluded(k),
        }
    }
}

#[test]
fn header_names_the_format_and_hash() {
    let file = load();
    assert_eq!(file["format_version"], u64::from(bavl_core::hash::FORMAT_VERSION));
    assert_eq!(file["hash"], "sha256");
    let names: Vec<&str> = trees(&file).iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    for tree in trees(&file) {
        assert_eq!(
            entries(&tree["entries"]).len() as u64,
            num(&tree["key_count"]),
            "{}",
            tree["name"]
        );
        assert_eq!(
            list(&tree["chunks"]).len() as u64,
            num(&tree["chunk_count"]),
            "{}",
            tree["name"]
        );
    }
}

#[test]
fn membership_vectors_verify() {
    let mut seen = 0;
    for tree in trees(&load()) {
        let root = root(tree);
        for m in list(&tree["membership"]) {
            let got = verify_membership::<Sha256>(
                &root,
                &bytes(&m["key"]),
                &bytes(&m["value"]),
                &bytes(&m["proof"]),
            )
            .unwrap_or_else(|e| panic!("{}: membership rejected: {e}", tree["name"]));
            assert_eq!(got.index, num(&m["index"]));
            assert_eq!(got.key_count, num(&m["key_count"]));
            seen += 1;
        }
    }
    assert!(seen >= 10, "only {seen} membership vectors");
}

#[test]
fn absence_vectors_verify() {
    let mut seen = 0;
    for tree in trees(&load()) {
        let root = root(tree);
        for a in list(&tree["absence"]) {
            let got = verify_absence::<Sha256>(&root, &bytes(&a["key"]), &bytes(&a["proof"]))
                .unwrap_or_else(|e| {
                    panic!("{}: absence ({}) rejected: {e}", tree["name"], a["description"])
                });
            assert_eq!(got.key_count, num(&a["key_count"]));
            seen += 1;
        }
    }
    assert!(seen >= 10, "only {seen} absence vectors");
}

#[test]
fn range_vectors_verify() {
    let mut seen = 0;
    for tree in trees(&load()) {
        let root = root(tree);
        for r in list(&tree["range"]) {
            let (lo, hi) = (OwnedBound::parse(&r["lo"]), OwnedBound::parse(&r["hi"]));
            let got = verify_range::<Sha256>(&root, lo.get(), hi.get(), &bytes(&r["proof"]))
                .unwrap_or_else(|e| panic!("{}: range rejected: {e}", tree["name"]));
            assert_eq!(got.entries, entries(&r["entries"]), "{}: range entries", tree["name"]);
            assert_eq!(got.key_count, num(&r["key_count"]));
            seen += 1;
        }
    }
    assert!(seen >= 20, "only {seen} range vectors");
}

#[test]
fn chunk_vectors_verify_and_cover_the_entries() {
    for tree in trees(&load()) {
        let (root, all) = (root(tree), entries(&tree["entries"]));
        let mut covered = 0u64;
        for c in list(&tree["chunks"]) {
            let index = num(&c["index"]);
            let got = verify_chunk::<Sha256>(&root, index, &bytes(&c["bytes"]))
                .unwrap_or_else(|e| panic!("{}: chunk {index} rejected: {e}", tree["name"]));
            assert_eq!(u64::from(got.key_height), num(&c["key_height"]));
            assert_eq!(got.keys_before, num(&c["keys_before"]));
            assert_eq!(got.keys_before, covered, "chunks are contiguous");
            assert_eq!(got.chunk_count, num(&c["chunk_count"]));
            assert_eq!(got.key_count, num(&c["key_count"]));
            assert_eq!(got.len() as u64, num(&c["len"]));
            let start = got.keys_before as usize;
            let expected = &all[start..start + got.len()];
            assert!(
                got.entries().eq(expected.iter().map(|(k, v)| (&k[..], &v[..]))),
                "chunk {index} entries"
            );
            covered += got.len() as u64;
        }
        assert_eq!(covered, all.len() as u64, "{}: chunks cover every entry", tree["name"]);
    }
}

/// Runs the verifier a negative vector names; `Ok` means it accepted (a failure).
fn run_negative(root: &Digest, n: &Value) -> Result<(), String> {
    let proof = bytes(&n["proof"]);
    let e = |e: bavl_core::ProofError| e.kind().to_string();
    match n["kind"].as_str().expect("a kind") {
        "membership" => {
            verify_membership::<Sha256>(root, &bytes(&n["key"]), &bytes(&n["value"]), &proof)
                .map(drop)
                .map_err(e)
        }
        "absence" => verify_absence::<Sha256>(root, &bytes(&n["key"]), &proof).map(drop).map_err(e),
        "range" => {
            let (lo, hi) = (OwnedBound::parse(&n["lo"]), OwnedBound::parse(&n["hi"]));
            verify_range::<Sha256>(root, lo.get(), hi.get(), &proof).map(drop).map_err(e)
        }
        "chunk" => verify_chunk::<Sha256>(root, num(&n["index"]), &proof).map(drop).map_err(e),
        other => panic!("unknown verifier kind {other}"),
    }
}

#[test]
fn negative_vectors_reject() {
    let mut seen = 0;
    for tree in trees(&load()) {
        let root = root(tree);
        for n in list(&tree["negative"]) {
            assert_eq!(n["expected"], "reject");
            let outcome = run_negative(&root, n);
            assert_eq!(
                outcome.as_ref().err().map(String::as_str),
                Some(n["error"].as_str().expect("an error kind")),
                "{}: negative vector {} not rejected with its error kind",
                tree["name"],
                n["description"]
            );
            seen += 1;
        }
    }
    assert!(seen >= 30, "only {seen} negative vectors");
}

#[test]
fn negative_vectors_cover_every_error_kind() {
    let file = load();
    let mut kinds: Vec<&str> = trees(&file)
        .iter()
        .flat_map(|t| list(&t["negative"]))
        .map(|n| n["error"].as_str().expect("an error kind"))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut all = bavl_core::ProofError::KINDS.to_vec();
    all.sort_unstable();
    assert_eq!(kinds, all);
}
