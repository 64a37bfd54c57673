//! The command line itself: help texts, argument errors, and `bavl verify` on vectors.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn bavl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bavl")).args(args).output().expect("run bavl")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_lists_every_subcommand_and_no_harness() {
    let out = bavl(&["--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let commands = ["verify", "check", "stats", "get", "prove", "serve", "export", "sync"];
    for sub in commands.into_iter().chain(["query", "cluster"]) {
        assert!(text.contains(&format!("  {sub} ")), "--help lacks {sub}:\n{text}");
    }
    // The harnesses are bavl-harness's, and --help says where they went.
    for gone in ["demo", "crashtest", "loadtest", "vectors"] {
        assert!(!text.contains(&format!("  {gone} ")), "--help still lists {gone}:\n{text}");
        assert!(!bavl(&[gone, "--help"]).status.success(), "`bavl {gone}` still runs");
    }
    assert!(text.contains("cargo run --release -p bavl-harness -- --help"), "{text}");
}

#[test]
fn serve_has_no_byzantine_flag() {
    let out = bavl(&["serve", "--dir", "/nonexistent", "--byzantine", "wrong-bytes"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unexpected argument '--byzantine'"), "{err}");
}

#[test]
fn cluster_help_lists_the_cluster_commands() {
    let out = bavl(&["cluster", "--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for sub in ["node", "local", "client", "status", "add-node", "drain", "remove-node", "demo"] {
        assert!(text.contains(&format!("  {sub} ")), "cluster --help lacks {sub}:\n{text}");
    }
    assert!(stdout(&bavl(&["--help"])).contains("cluster"));
}

#[test]
fn cluster_commands_without_the_cluster_binary_fail_plainly() {
    let out = Command::new(env!("CARGO_BIN_EXE_bavl"))
        .args(["cluster", "status", "--peers", "1=127.0.0.1:1"])
        .env("BAVL_CLUSTER_BIN", "/nonexistent/bavl-cluster")
        .output()
        .expect("run bavl");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("BAVL_CLUSTER_BIN"), "{err}");
}

#[test]
fn verify_help_succeeds() {
    assert!(bavl(&["verify", "--help"]).status.success(), "verify --help failed");
}

#[test]
fn bad_arguments_are_refused() {
    assert!(!bavl(&[
        "verify",
        "--root",
        "00",
        "--kind",
        "chunk",
        "--index",
        "0",
        "--proof-hex",
        "00"
    ])
    .status
    .success());
}

fn first_tree() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/vectors/core.json");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vectors")).expect("json");
    let tree = file["trees"].as_array().expect("trees").iter().find(|t| t["name"] == "ten-keys");
    tree.expect("the ten-keys tree").clone()
}

#[test]
fn verify_accepts_a_membership_vector() {
    let tree = first_tree();
    let m = &tree["membership"][1];
    let s = |v: &Value| v.as_str().expect("string").to_owned();
    let (root, key, value, proof) =
        (s(&tree["root"]), s(&m["key"]), s(&m["value"]), s(&m["proof"]));
    let out = bavl(&[
        "verify",
        "--root",
        &root,
        "--kind",
        "membership",
        "--key",
        &key,
        "--value",
        &value,
        "--proof-hex",
        &proof,
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_str(&stdout(&out)).expect("json result");
    assert_eq!(result["ok"], true);
    assert_eq!(result["index"], m["index"]);
}

#[test]
fn verify_rejects_a_negative_chunk_vector() {
    let tree = first_tree();
    let negatives = tree["negative"].as_array().expect("negative");
    let n = negatives.iter().find(|n| n["kind"] == "chunk").expect("a chunk negative");
    let proof = std::env::temp_dir().join(format!("bavl-neg-{}.bin", std::process::id()));
    std::fs::write(&proof, hex::decode(n["proof"].as_str().unwrap()).unwrap()).unwrap();
    let index = n["index"].to_string();
    let root = tree["root"].as_str().unwrap();
    let proof_arg = proof.to_str().unwrap();
    let out = bavl(&[
        "verify", "--root", root, "--kind", "chunk", "--index", &index, "--proof", proof_arg,
        "--json",
    ]);
    let _ = std::fs::remove_file(&proof);
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_str(&stdout(&out)).expect("json error");
    assert_eq!(result["ok"], false);
    // The error kind every verifier must give (docs/design.md §3).
    assert_eq!(result["variant"], n["error"]);
}
