//! `bavl-harness crashtest`: ten kills of a committing `bavl-harness loadtest`, each followed by a check,
//! a reopen and an exact comparison with the in-memory reference, must find no failure.

use std::time::{Duration, Instant};

use crate::common::{bavl, expect_code, path_str, stdout, TempDir};
use serde_json::Value;

#[test]
fn ten_kills_lose_nothing_committed() {
    let dir = TempDir::new("bavl-harness", "crash");
    let store = dir.join("store");
    let json = dir.join("crash.json");
    let start = Instant::now();
    let out = bavl(&[
        "crashtest",
        "--iterations",
        "10",
        "--seed",
        "3",
        "--dir",
        path_str(&store),
        "--json",
        path_str(&json),
        "--quiet",
    ]);
    expect_code(&out, 0, "crashtest");
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
    assert!(stdout(&out).contains("result       OK"), "{}", stdout(&out));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["ok"], true);
    assert_eq!(r["iterations"], 10);
    assert_eq!(r["failures"].as_array().map(Vec::len), Some(0));
    assert!(r["epochs"].as_u64().unwrap() >= 1);
    assert!(r["versions_committed"].as_u64().unwrap() > 0, "no child ever committed: {r}");
    assert!(r["printed_commits"].as_u64().unwrap() > 0);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    for row in rows {
        assert_eq!(row["ok"], true, "{row}");
        let reopened = row["reopened"].as_u64().unwrap();
        if let Some(last) = row["last_printed"].as_u64() {
            assert!(reopened >= last, "{row}");
        }
        assert!(reopened >= 2, "20,000 initial keys are versions 1 and 2: {row}");
    }
    assert!(store.exists(), "a --dir store is kept");

    // A --dir that is not empty is refused.
    let again = bavl(&["crashtest", "--iterations", "1", "--dir", path_str(&store)]);
    expect_code(&again, 2, "crashtest on a used directory");
}
