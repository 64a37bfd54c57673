//! `bavl import` as a process: unsorted hex from a file and sorted binary from standard
//! input make the store of ascending inserts (its root printed and served by `get` and
//! `check`); bad input fails naming its record and byte and leaves no store.

use std::io::Write;
use std::process::{Command, Stdio};

use bavl_core::Tree;

use crate::common::{bavl, stderr, stdout, TempDir};

fn pairs() -> Vec<(Vec<u8>, Vec<u8>)> {
    // Distinct keys in no order (i * 7919 mod 10007 is a permutation).
    (0..3000u32)
        .map(|i| {
            let k = (i * 7919 % 10007).to_be_bytes().to_vec();
            (k, format!("value-{i}").into_bytes())
        })
        .collect()
}

fn root_of_ascending(pairs: &[(Vec<u8>, Vec<u8>)], capacity: u32) -> String {
    let mut sorted = pairs.to_vec();
    sorted.sort();
    let mut t = Tree::with_capacity(capacity).unwrap();
    for (k, v) in &sorted {
        t.insert(k, v).unwrap();
    }
    hex::encode(t.root_hash())
}

#[test]
fn import_help_documents_both_formats_and_is_listed() {
    let out = bavl(&["import", "--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in ["u32 key length", "TAB", "--sorted", "--cache-mib", "--tmp", "record"] {
        assert!(text.contains(needle), "import --help lacks {needle}:\n{text}");
    }
    assert!(stdout(&bavl(&["--help"])).contains("  import "));
}

#[test]
fn unsorted_hex_from_a_file_makes_the_store_of_ascending_inserts() {
    let dir = TempDir::new("bavl-cli-import", "hex");
    let all = pairs();
    let text: String =
        all.iter().map(|(k, v)| format!("{}\t{}\n", hex::encode(k), hex::encode(v))).collect();
    let input = dir.join("pairs.txt");
    std::fs::write(&input, text).unwrap();
    let db = dir.join("db");
    let db_s = db.to_str().unwrap();
    let out = bavl(&[
        "import",
        "--db",
        db_s,
        "--format",
        "hex",
        "--capacity",
        "16",
        "--version",
        "9",
        "--cache-mib",
        "1",
        "--tmp",
        dir.path().to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let root = root_of_ascending(&all, 16);
    assert!(text.contains("imported 3,000 keys"), "{text}");
    assert!(text.contains(&format!("version 9 root {root}")), "{text}");
    assert!(text.contains("keys/s"), "{text}");
    let check = bavl(&["check", "--db", db_s]);
    assert!(check.status.success(), "{}{}", stdout(&check), stderr(&check));
    let (k, v) = &all[1234];
    let got = bavl(&["get", "--db", db_s, "--key", &hex::encode(k), "--cache-mib", "0"]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert_eq!(stdout(&got).trim(), hex::encode(v));
    // Only the store's files: the sort's runs are gone.
    let left: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn sorted_binary_from_standard_input_and_bad_input_named_by_record() {
    let dir = TempDir::new("bavl-cli-import", "bin");
    let mut all = pairs();
    all.sort();
    let mut input = Vec::new();
    for (k, v) in &all {
        input.extend_from_slice(&(k.len() as u32).to_le_bytes());
        input.extend_from_slice(k);
        input.extend_from_slice(&(v.len() as u32).to_le_bytes());
        input.extend_from_slice(v);
    }
    let run = |db: &str, bytes: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bavl"))
            .args(["import", "--db", db, "--sorted", "--quiet", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        child.wait_with_output().unwrap()
    };
    let db = dir.join("db");
    let out = run(db.to_str().unwrap(), &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let root = root_of_ascending(&all, 64);
    assert!(stdout(&out).contains(&format!("version 1 root {root}")), "{}", stdout(&out));
    // Records 100 and 101 swapped: record 101 is out of order, at its byte offset.
    let mut swapped = all.clone();
    swapped.swap(99, 100);
    let mut bad = Vec::new();
    let mut offset_101 = 0;
    for (i, (k, v)) in swapped.iter().enumerate() {
        if i == 100 {
            offset_101 = bad.len();
        }
        bad.extend_from_slice(&(k.len() as u32).to_le_bytes());
        bad.extend_from_slice(k);
        bad.extend_from_slice(&(v.len() as u32).to_le_bytes());
        bad.extend_from_slice(v);
    }
    let db = dir.join("bad");
    let out = run(db.to_str().unwrap(), &bad);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("record 101 (at byte {offset_101} of the input)")), "{err}");
    assert!(!db.exists(), "no store is left behind");
    // Cut inside the last record.
    let db = dir.join("cut");
    let out = run(db.to_str().unwrap(), &input[..input.len() - 3]);
    assert!(stderr(&out).contains("record 3000") && stderr(&out).contains("ends inside it"));
    assert!(!db.exists());
}

#[test]
fn an_import_killed_midway_leaves_a_directory_that_no_command_takes_for_a_store() {
    let dir = TempDir::new("bavl-cli-import", "kill");
    let db = dir.join("db");
    let db_s = db.to_str().unwrap().to_string();
    let mut child = crate::common::Kill(
        Command::new(env!("CARGO_BIN_EXE_bavl"))
            .args(["import", "--db", &db_s, "--sorted", "--quiet", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // More than one gathered MiB of sorted records, and the input left open: the import
    // has written chunk bodies and waits for more when it is killed.
    let mut stdin = child.0.stdin.take().unwrap();
    for i in 0..20_000u32 {
        let (k, v) = (i.to_be_bytes(), [7u8; 100]);
        stdin.write_all(&4u32.to_le_bytes()).unwrap();
        stdin.write_all(&k).unwrap();
        stdin.write_all(&100u32.to_le_bytes()).unwrap();
        stdin.write_all(&v).unwrap();
    }
    stdin.flush().unwrap();
    let chunks = db.join(format!("chunks-{:020}.bavl", 0));
    while std::fs::metadata(&chunks).map_or(true, |m| m.len() <= 20) {
        assert!(child.0.try_wait().unwrap().is_none(), "the import ended early");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    drop(stdin);
    assert!(db.join("ingest.bavl").exists());
    for args in [
        vec!["get", "--db", &db_s, "--key", "00000001"],
        vec!["check", "--db", &db_s],
        vec!["stats", "--db", &db_s],
    ] {
        let out = bavl(&args);
        assert!(!out.status.success(), "{args:?} took it for a store: {}", stdout(&out));
    }
    let again = bavl(&["import", "--db", &db_s, "--sorted", "/dev/null"]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("interrupted bulk import"), "{}", stderr(&again));
}
