//! `bavl demo` end to end: a small state synced from lying peers rebuilds the source root,
//! every liar is banned and no honest peer is; with only liars the sync fails non-zero.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn demo(name: &str, args: &[&str]) -> (Output, Value) {
    let json = std::env::temp_dir().join(format!("bavl-demo-{name}-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_bavl"))
        .arg("demo")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run bavl demo");
    let report = read_report(&json);
    let _ = std::fs::remove_file(&json);
    (out, report)
}

fn read_report(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).expect("the demo writes its --json report");
    serde_json::from_str(&text).expect("the report is JSON")
}

#[test]
fn demo_syncs_and_bans_every_liar() {
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
    assert_eq!(r["source_root"], r["rebuilt_root"]);
    assert_eq!(r["source_root"].as_str().map(str::len), Some(64));
    assert_eq!(r["keys"], 20000);
    assert_eq!(r["capacity"], 16);
    assert_eq!(r["accepted"], r["chunks"]);
    assert!(r["out_of_order"].as_u64().unwrap() > 0, "arrival order was sorted");
    assert_eq!(r["liars_banned"], true);
    let peers = r["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 10);
    let liars: Vec<&Value> = peers.iter().filter(|p| p["behaviour"] != "honest").collect();
    assert_eq!(liars.len(), 4);
    for p in peers {
        let liar = p["behaviour"] != "honest";
        assert_eq!(p["banned"], liar, "peer {p}");
        if liar {
            assert_eq!(p["served"], 0, "a liar's chunk was accepted: {p}");
            assert!(p["rejected"].as_u64().unwrap() >= 1, "{p}");
            assert!(p["first_error"].is_string(), "{p}");
        } else {
            assert_eq!(p["rejected"], 0, "{p}");
        }
    }
    assert_eq!(r["banned"].as_array().map(Vec::len), Some(4));
}

#[test]
fn demo_with_only_liars_fails() {
    let (out, r) =
        demo("liars", &["--keys", "2000", "--capacity", "16", "--peers", "4", "--liars", "4"]);
    assert!(!out.status.success(), "a sync from liars alone must fail");
    assert_eq!(r["ok"], false);
    assert!(r["error"].is_string());
    assert_eq!(r["liars_banned"], true);
}
