//! The committed vectors match the code: `bavl-harness vectors --check` regenerates them in memory
//! and fails if `docs/vectors/core.json` differs.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn committed_vectors_match_the_code() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/vectors/core.json");
    let out = Command::new(crate::common::harness())
        .args(["vectors", "--check", "--out"])
        .arg(&file)
        .output()
        .expect("run bavl-harness vectors --check");
    assert!(
        out.status.success(),
        "bavl-harness vectors --check failed; regenerate with `cargo run -p bavl-harness -- vectors`\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_fails_on_a_stale_file() {
    let file = std::env::temp_dir().join(format!("bavl-stale-vectors-{}.json", std::process::id()));
    std::fs::write(&file, "{}\n").expect("write a stale file");
    let status = Command::new(crate::common::harness())
        .args(["vectors", "--check", "--out"])
        .arg(&file)
        .output()
        .expect("run bavl-harness vectors --check")
        .status;
    let _ = std::fs::remove_file(&file);
    assert!(!status.success(), "--check accepted a stale file");
}
