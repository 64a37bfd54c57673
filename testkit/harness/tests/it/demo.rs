//! `bavl-harness demo` end to end, with real peer processes on loopback (`bavl serve` and
//! `bavl-harness serve-liar`): a small state synced over HTTP from lying peers rebuilds the source root, every liar is
//! banned and no honest peer is; with only liars the sync fails non-zero. Either way no
//! peer process outlives the demo.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn demo(name: &str, args: &[&str]) -> (Output, Value) {
    let json = std::env::temp_dir().join(format!("bavl-demo-{name}-{}.json", std::process::id()));
    let out = Command::new(crate::common::harness())
        .arg("demo")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run bavl-harness demo");
    let text = std::fs::read_to_string(&json).expect("the demo writes its --json report");
    let _ = std::fs::remove_file(&json);
    (out, serde_json::from_str(&text).expect("the report is JSON"))
}

/// Every peer process the report names is gone (checked where `/proc` exists).
fn assert_peers_gone(r: &Value) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    for p in r["peers"].as_array().expect("peers") {
        let pid = p["pid"].as_u64().expect("a pid");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let serving = String::from_utf8_lossy(&cmdline).contains("serve");
        assert!(!serving, "peer process {pid} outlived the demo");
    }
}

#[test]
fn demo_syncs_over_http_from_peer_processes_and_bans_every_liar() {
    let (out, r) = demo("ok", &["--keys", "20000", "--capacity", "16"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("result   OK"), "{stdout}");
    assert_eq!(r["ok"], true);
    assert_eq!(r["roots_equal"], true);
    assert_eq!(r["source_root"], r["synced_root"]);
    assert_eq!(r["source_root"].as_str().map(str::len), Some(64));
    assert_eq!(r["keys"], 20000);
    assert_eq!(r["capacity"], 16);
    assert_eq!(r["fetched"], r["chunks"]);
    assert_eq!(r["liars_caught"], true);
    let peers = r["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 10);
    let kinds: Vec<&str> = peers.iter().filter_map(|p| p["behaviour"].as_str()).collect();
    for lie in ["wrong-bytes", "wrong-index", "other-version", "truncate"] {
        assert_eq!(kinds.iter().filter(|&&k| k == lie).count(), 1, "{kinds:?}");
    }
    let mut served = 0;
    for p in peers {
        assert!(p["url"].as_str().unwrap().starts_with("http://127.0.0.1:"), "{p}");
        if p["behaviour"] == "honest" {
            assert_eq!(p["health"], "live", "{p}");
            served += p["chunks"].as_u64().unwrap();
        } else {
            assert_eq!(p["health"], "banned", "{p}");
            assert_eq!(p["chunks"], 0, "a lie was accepted: {p}");
            assert!(p["requests"].as_u64().unwrap() >= 2, "asked its manifest and a chunk: {p}");
            assert!(p["reason"].is_string(), "{p}");
        }
    }
    assert_eq!(served, r["chunks"].as_u64().unwrap(), "every chunk from an honest peer");
    assert_eq!(r["banned"].as_array().map(Vec::len), Some(4));
    assert_peers_gone(&r);
}

#[test]
fn demo_with_every_kind_of_lie_still_syncs() {
    let lies = "wrong-bytes,wrong-index,other-version,truncate,overlong,endless,stall,trickle,\
                http-error,garbage,redirect-loop,lying-manifest,wrong-version";
    let args = ["--keys", "5000", "--capacity", "16", "--peers", "14", "--liars", "13"];
    let (out, r) = demo("kinds", &[&args[..], &["--lies", lies, "--grace", "1"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!((&r["ok"], &r["liars_caught"]), (&true.into(), &true.into()), "{r}");
    let honest: Vec<&Value> =
        r["peers"].as_array().unwrap().iter().filter(|p| p["behaviour"] == "honest").collect();
    assert_eq!(honest.len(), 1);
    assert_eq!(honest[0]["health"], "live");
    assert_peers_gone(&r);
}

#[test]
fn demo_with_only_liars_fails() {
    let (out, r) =
        demo("liars", &["--keys", "2000", "--capacity", "16", "--peers", "4", "--liars", "4"]);
    assert_eq!(out.status.code(), Some(1), "a sync from liars alone must fail");
    assert_eq!(r["ok"], false);
    assert!(r["error"].as_str().unwrap().contains("no usable source"), "{r}");
    assert_eq!(r["synced_root"], Value::Null);
    assert_eq!(r["liars_caught"], true);
    assert_eq!(r["banned"].as_array().map(Vec::len), Some(4));
    assert_peers_gone(&r);
}
