//! The store commands end to end, on real directories: `bavl-harness loadtest` (determinism,
//! resuming, the report), `bavl get` and `bavl prove` (whose proofs `bavl verify` checks),
//! `bavl check` and `bavl stats` on clean and damaged stores, and the typed errors.

use std::ops::Bound;
use std::path::{Path, PathBuf};

use crate::common::{bavl, expect_code, path_str, stderr, stdout, TempDir};
use bavl_core::Tree;
use bavl_workload::{block, initial, next_key, Mix, Op};
use serde_json::Value;

const MIX: [&str; 6] = ["--inserts", "200", "--updates", "200", "--deletes", "50"];

/// `bavl-harness loadtest` on `db` with the test mix, capacity 16, --quiet; returns the output.
fn loadtest(db: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["loadtest", "--db", path_str(db), "--capacity", "16", "--quiet"];
    args.extend(MIX);
    args.extend(extra);
    bavl(&args)
}

/// The `committed <version> <root>` lines.
fn committed(out: &std::process::Output) -> Vec<(u64, String)> {
    stdout(out)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "committed").then_some(())?;
            Some((w.next()?.parse().ok()?, w.next()?.to_string()))
        })
        .collect()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the JSON report")).expect("JSON")
}

fn json_stdout(out: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(out))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", stdout(out)))
}

/// The root of version `v` of the test workload, computed in memory from the documented
/// contents: 10,000 initial keys per version, then `block(seed, v, ..)`.
fn reference_root(seed: u64, initial_keys: usize, last: u64) -> String {
    let mut t = Tree::with_capacity(16).unwrap();
    let mut pairs = initial(seed);
    let initial_versions = initial_keys.div_ceil(10_000) as u64;
    for v in 1..=last {
        if v <= initial_versions {
            let n = 10_000.min(initial_keys - (v as usize - 1) * 10_000);
            for (k, val) in pairs.by_ref().take(n) {
                t.insert(&k, &val).unwrap();
            }
            continue;
        }
        let mix = Mix { inserts: 200, updates: 200, deletes: 50 };
        for op in block(seed, v, mix, |p| {
            next_key(|lo| t.range(lo, Bound::Unbounded), p).expect("resident")
        }) {
            match op {
                Op::Put(k, val) => {
                    t.insert(&k, &val).unwrap();
                }
                Op::Delete(k) => {
                    t.remove(&k);
                }
            }
        }
    }
    hex::encode(t.root_hash())
}

#[test]
fn loadtest_resumes_with_the_roots_of_an_uninterrupted_run() {
    let dir = TempDir::new("bavl-harness", "resume");
    let (a, b, report) = (dir.join("a"), dir.join("b"), dir.join("a.json"));
    let base = ["--initial", "3000", "--seed", "9", "--print-roots"];

    let whole =
        loadtest(&a, &[&base[..], &["--blocks", "6", "--json", path_str(&report)]].concat());
    expect_code(&whole, 0, "loadtest a");
    let first = loadtest(&b, &[&base[..], &["--blocks", "2"]].concat());
    expect_code(&first, 0, "loadtest b (first part)");
    let rest = loadtest(&b, &[&base[..], &["--blocks", "4"]].concat());
    expect_code(&rest, 0, "loadtest b (resumed)");

    let roots = committed(&whole);
    let versions: Vec<u64> = roots.iter().map(|r| r.0).collect();
    assert_eq!(versions, (1..=7).collect::<Vec<_>>(), "one line per committed version");
    let mut resumed = committed(&first);
    resumed.extend(committed(&rest));
    assert_eq!(roots, resumed, "resuming commits the same versions and roots");
    assert_eq!(roots[6].1, reference_root(9, 3000, 7), "the roots follow the documented workload");

    let r = json_file(&report);
    let s = &r["summary"];
    assert_eq!(s["blocks"], 6);
    assert_eq!(s["first_version"], 2);
    assert_eq!(s["last_version"], 7);
    assert_eq!(s["ops"], 6 * 450);
    assert!(s["ops_per_s"].as_f64().unwrap() > 0.0);
    assert!(s["commit"]["p99_ms"].as_f64().unwrap() >= s["commit"]["p50_ms"].as_f64().unwrap());
    assert!(s["log_bytes_per_op"].as_f64().unwrap() > 20.0);
    assert_eq!(r["initial"]["keys"], 3000);
    assert_eq!(r["initial"]["versions"], 1);
    let rows = r["blocks"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for (row, (v, root)) in rows.iter().zip(&roots[1..]) {
        assert_eq!(row["version"], *v);
        assert_eq!(row["root"], root.as_str());
        assert!(row["log_bytes"].as_u64().unwrap() > 0);
        for field in ["apply_ms", "hash_ms", "persist_ms", "commit_ms"] {
            assert!(row[field].is_number(), "{field} in {row}");
        }
    }
    let f = &r["final"];
    assert_eq!(f["head"], 7);
    assert_eq!(f["root"], roots[6].1.as_str());
    assert_eq!(f["capacity"], 16);
    assert_eq!(f["versions_retained"], 4);
    assert!(f["disk_bytes"].as_u64().unwrap() > 0);
    assert!(f["files"].as_array().unwrap().iter().any(|f| f["name"] == "bavl.meta"));
}

#[test]
fn loadtest_reports_proofs_and_the_summary() {
    let dir = TempDir::new("bavl-harness", "proofs");
    let db = dir.join("db");
    let mut args = vec!["loadtest", "--db", path_str(&db), "--capacity", "16"];
    args.extend(MIX);
    args.extend(["--initial", "2000", "--blocks", "3", "--proofs", "--manual-checkpoints"]);
    let json = dir.join("r.json");
    args.extend(["--json", path_str(&json)]);
    let out = bavl(&args);
    expect_code(&out, 0, "loadtest --proofs");
    let text = stdout(&out);
    for want in ["throughput", "p50", "p99", "bytes per operation", "proofs", "final state"] {
        assert!(text.contains(want), "the summary lacks {want:?}:\n{text}");
    }
    let r = json_file(&json);
    let p = &r["summary"]["proofs"];
    assert_eq!(p["proved"], 300);
    assert_eq!(p["failures"], 0);
    assert!(p["mean_bytes"].as_f64().unwrap() > 100.0);
    assert_eq!(r["summary"]["checkpoints_written"], 0);
    assert_eq!(r["blocks"][0]["proofs"]["proved"], 100);
}

#[test]
fn loadtest_refuses_bad_arguments() {
    let dir = TempDir::new("bavl-harness", "badargs");
    let db = dir.join("db");
    let d = path_str(&db);
    let zero = bavl(&["loadtest", "--db", d, "--blocks", "1", "--inserts", "0", "--updates", "0"]);
    expect_code(&zero, 2, "an all-zero mix");
    assert!(stderr(&zero).contains("all 0"), "{}", stderr(&zero));
    let both = bavl(&[
        "loadtest",
        "--db",
        d,
        "--blocks",
        "1",
        "--inserts",
        "1",
        "--updates",
        "0",
        "--checkpoint-mb",
        "1",
        "--manual-checkpoints",
    ]);
    expect_code(&both, 2, "--checkpoint-mb with --manual-checkpoints");
    let neg = bavl(&[
        "loadtest",
        "--db",
        d,
        "--blocks",
        "1",
        "--inserts",
        "1",
        "--updates",
        "0",
        "--checkpoint-mb",
        "-1",
    ]);
    expect_code(&neg, 2, "a negative --checkpoint-mb");
    let keep = bavl(&[
        "loadtest",
        "--db",
        d,
        "--blocks",
        "1",
        "--inserts",
        "1",
        "--updates",
        "0",
        "--keep",
        "0",
    ]);
    expect_code(&keep, 2, "--keep 0");
    assert!(!db.exists(), "a refused run must not create the store");

    // --blocks 0 is fine; then another capacity is refused.
    expect_code(&loadtest(&db, &["--blocks", "0"]), 0, "--blocks 0");
    let other = bavl(&[
        "loadtest",
        "--db",
        d,
        "--blocks",
        "1",
        "--inserts",
        "1",
        "--updates",
        "0",
        "--capacity",
        "32",
    ]);
    expect_code(&other, 2, "another capacity");
    assert!(stderr(&other).contains("capacity 16"), "{}", stderr(&other));
}

/// A store of 3,000 initial keys (version 1) and three blocks (versions 2..=4).
fn small_store(dir: &TempDir) -> PathBuf {
    let db = dir.join("db");
    expect_code(
        &loadtest(&db, &["--initial", "3000", "--seed", "4", "--blocks", "3"]),
        0,
        "loadtest",
    );
    db
}

/// Runs the `verify_command` a `bavl prove --json` printed, with `root` if given.
fn run_verify(command: &str, root: Option<&str>) -> std::process::Output {
    let mut words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
    assert_eq!(words.remove(0), "bavl");
    assert_eq!(words[0], "verify");
    if let Some(root) = root {
        let i = words.iter().position(|w| w == "--root").expect("--root") + 1;
        words[i] = root.to_string();
    }
    bavl(&words)
}

#[test]
fn get_and_prove_give_proofs_that_bavl_verify_checks() {
    let dir = TempDir::new("bavl-harness", "prove");
    let db = small_store(&dir);
    let d = path_str(&db);
    let (key, value) = initial(4).next().unwrap();
    let key = hex::encode(key);

    // get: present at version 1 (exit 0), an absent key (exit 1).
    let got = bavl(&["get", "--db", d, "--key", &key, "--version", "1"]);
    expect_code(&got, 0, "get a present key");
    assert_eq!(stdout(&got).trim(), hex::encode(value));
    let absent = bavl(&["get", "--db", d, "--key", "00"]);
    expect_code(&absent, 1, "get an absent key");
    assert_eq!(stdout(&absent).trim(), "absent");
    let j = json_stdout(&bavl(&["get", "--db", d, "--key", &key, "--version", "1", "--json"]));
    assert_eq!(j["present"], true);
    assert_eq!(j["version"], 1);

    // The latest root, to verify against as "another root".
    let latest = json_stdout(&bavl(&["stats", "--db", d, "--json"]));
    let latest_root = latest["root"].as_str().unwrap().to_string();
    assert_eq!(latest["head"], 4);

    // Membership at version 1: verifies against its root, not against version 4's.
    let p = json_stdout(&bavl(&["prove", "--db", d, "--key", &key, "--version", "1", "--json"]));
    assert_eq!(p["kind"], "membership");
    assert_eq!(p["version"], 1);
    assert_eq!(p["value"], hex::encode(value));
    assert_ne!(p["root"], latest_root.as_str());
    let command = p["verify_command"].as_str().unwrap();
    let ok = run_verify(command, None);
    expect_code(&ok, 0, "verify the membership proof");
    assert!(stdout(&ok).contains("verified membership"), "{}", stdout(&ok));
    let wrong = run_verify(command, Some(&latest_root));
    expect_code(&wrong, 1, "verify against another root");
    assert!(stderr(&wrong).contains("rejected"), "{}", stderr(&wrong));

    // Absence at the latest version, as printed text with the command on the last line.
    let text = bavl(&["prove", "--db", d, "--key", "00"]);
    expect_code(&text, 0, "prove absence");
    let text = stdout(&text);
    assert!(text.contains("kind     absence"), "{text}");
    let line = text.lines().find_map(|l| l.strip_prefix("verify   ")).expect("a verify line");
    expect_code(&run_verify(line, None), 0, "verify the absence proof");
    let other = p["root"].as_str().unwrap();
    expect_code(&run_verify(line, Some(other)), 1, "absence against another root");

    // --out writes raw bytes; the command names the file.
    let file = dir.join("proof.bin");
    let p = json_stdout(&bavl(&[
        "prove",
        "--db",
        d,
        "--key",
        &key,
        "--version",
        "1",
        "--out",
        path_str(&file),
        "--json",
    ]));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), p["proof_bytes"].as_u64().unwrap());
    let command = p["verify_command"].as_str().unwrap();
    assert!(command.contains("--proof "), "{command}");
    expect_code(&run_verify(command, None), 0, "verify the proof file");

    // A version that is not retained.
    let gone = bavl(&["prove", "--db", d, "--key", &key, "--version", "99"]);
    expect_code(&gone, 2, "an unknown version");
    assert!(stderr(&gone).contains("not retained"), "{}", stderr(&gone));
}

#[test]
fn check_and_stats_describe_a_clean_store() {
    let dir = TempDir::new("bavl-harness", "clean");
    let db = small_store(&dir);
    let d = path_str(&db);
    let out = bavl(&["check", "--db", d]);
    expect_code(&out, 0, "check a clean store");
    assert!(stdout(&out).contains("OK: no problem found"), "{}", stdout(&out));
    let j = json_stdout(&bavl(&["check", "--db", d, "--json"]));
    assert_eq!(j["ok"], true);
    assert_eq!(j["problems"].as_array().unwrap().len(), 0);
    assert_eq!(j["head"]["version"], 4);
    assert_eq!(j["records_checked"], 4);
    assert!(j["keys"].as_u64().unwrap() > 3000);

    let out = bavl(&["stats", "--db", d]);
    expect_code(&out, 0, "stats");
    for want in ["head", "versions", "space efficiency", "disk", "bavl.meta", "opening"] {
        assert!(stdout(&out).contains(want), "stats lacks {want:?}:\n{}", stdout(&out));
    }
    let s = json_stdout(&bavl(&["stats", "--db", d, "--json"]));
    assert_eq!(s["head"], 4);
    assert_eq!(s["root"], j["head"]["root"]);
    assert_eq!(s["keys"], j["keys"]);
    assert_eq!(s["capacity"], 16);
    assert_eq!(s["versions_retained"], 4);
    assert_eq!(s["recovery"]["versions_replayed"], 4);
    let on_disk: u64 =
        s["files"].as_array().unwrap().iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
    assert_eq!(s["disk_bytes"].as_u64().unwrap(), on_disk);
}

#[test]
fn store_commands_refuse_missing_locked_and_foreign_stores() {
    let dir = TempDir::new("bavl-harness", "refuse");
    let missing = dir.join("missing");
    let m = path_str(&missing);
    for args in [
        vec!["check", "--db", m],
        vec!["stats", "--db", m],
        vec!["get", "--db", m, "--key", "00"],
        vec!["prove", "--db", m, "--key", "00"],
    ] {
        let out = bavl(&args);
        expect_code(&out, 2, &format!("{args:?} on a missing store"));
        assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    }
    assert!(!missing.exists(), "a read-only command must not create a store");
    let foreign = bavl(&["stats", "--db", path_str(dir.path())]);
    expect_code(&foreign, 2, "a directory that is not a store");
    assert!(stderr(&foreign).contains("not a bavl store"), "{}", stderr(&foreign));

    let db = small_store(&dir);
    let d = path_str(&db);
    for bad in ["zz", "0", ""] {
        expect_code(&bavl(&["get", "--db", d, "--key", bad]), 2, &format!("key {bad:?}"));
    }
    // Another process (this one) holds the store.
    let lock = bavl_store::DirBackend::open(&db).expect("lock the store");
    for args in [
        vec!["check", "--db", d],
        vec!["stats", "--db", d],
        vec!["get", "--db", d, "--key", "00"],
        vec!["loadtest", "--db", d, "--blocks", "1", "--inserts", "1", "--updates", "0"],
    ] {
        let out = bavl(&args);
        expect_code(&out, 2, &format!("{args:?} on a locked store"));
        assert!(stderr(&out).contains("in use by another process"), "{}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    drop(lock);
    expect_code(&bavl(&["stats", "--db", d]), 0, "stats once the lock is released");
}

/// A store with a checkpoint and log records (checkpoints every block).
fn checkpointed_store(dir: &TempDir) -> PathBuf {
    let db = dir.join("db");
    let args = [
        "--initial",
        "3000",
        "--blocks",
        "8",
        "--checkpoint-mb",
        "0.01",
        "--checkpoint-ratio",
        "0",
    ];
    let out = loadtest(&db, &args);
    expect_code(&out, 0, "loadtest");
    db
}

/// The store's files named `prefix*suffix`, largest first.
fn files(db: &Path, prefix: &str, suffix: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .filter(|(n, _)| n.starts_with(prefix) && n.ends_with(suffix))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    v
}

fn flip_middle_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

/// `bavl check` exits 1 naming `file`; `bavl stats` refuses to open, saying "corrupted".
fn assert_reported(db: &Path, file: &str) {
    let d = path_str(db);
    let out = bavl(&["check", "--db", d]);
    expect_code(&out, 1, "check a damaged store");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("PROBLEM  {file} at byte")),
        "check does not name {file}:\n{text}"
    );
    let j = json_stdout(&bavl(&["check", "--db", d, "--json"]));
    assert_eq!(j["ok"], false);
    assert!(j["problems"].as_array().unwrap().iter().any(|p| p["file"] == file), "{j}");

    let out = bavl(&["stats", "--db", d]);
    expect_code(&out, 3, "stats on a damaged store");
    let err = stderr(&out);
    assert!(err.contains("corrupted") && err.contains(file), "{err}");
    assert!(err.contains("bavl check"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = bavl(&["get", "--db", d, "--key", "00"]);
    expect_code(&out, 3, "get on a damaged store");
}

#[test]
fn a_flipped_bit_in_a_checkpoint_is_reported() {
    let dir = TempDir::new("bavl-harness", "ckptflip");
    let db = checkpointed_store(&dir);
    let ckpts = files(&db, "ckpt-", ".bavl");
    assert!(!ckpts.is_empty(), "the load test wrote no checkpoint");
    let newest = ckpts.iter().map(|c| c.0.clone()).max().unwrap();
    flip_middle_byte(&db.join(&newest));
    assert_reported(&db, &newest);
}

#[test]
fn a_truncated_checkpoint_is_reported() {
    let dir = TempDir::new("bavl-harness", "ckpttrunc");
    let db = checkpointed_store(&dir);
    let newest = files(&db, "ckpt-", ".bavl").into_iter().max().expect("a checkpoint");
    let f = std::fs::OpenOptions::new().write(true).open(db.join(&newest.0)).unwrap();
    f.set_len(newest.1 / 2).unwrap();
    drop(f);
    assert_reported(&db, &newest.0);
}

#[test]
fn a_flipped_bit_in_the_log_is_reported() {
    let dir = TempDir::new("bavl-harness", "walflip");
    let db = checkpointed_store(&dir);
    let (wal, len) = files(&db, "wal-", ".log").into_iter().next().expect("a log segment");
    assert!(len > 1000, "{wal} holds no record ({len} bytes)");
    flip_middle_byte(&db.join(&wal));
    assert_reported(&db, &wal);
}

#[test]
fn every_store_command_has_a_teaching_help() {
    let (out, harness) = (bavl(&["--help"]), crate::common::harness());
    let harness_help = std::process::Command::new(harness).arg("--help").output().unwrap();
    for sub in ["loadtest", "crashtest", "check", "stats", "get", "prove"] {
        let listed = if ["loadtest", "crashtest"].contains(&sub) { &harness_help } else { &out };
        assert!(stdout(listed).contains(sub), "--help lacks {sub}");
        let help = bavl(&[sub, "--help"]);
        expect_code(&help, 0, &format!("{sub} --help"));
        let text = stdout(&help);
        assert!(text.contains("Examples:"), "{sub} --help has no examples:\n{text}");
        assert!(text.contains("Exit status:"), "{sub} --help has no exit codes:\n{text}");
    }
    let text = stdout(&bavl(&["loadtest", "--help"]));
    for default in ["[default: 0]", "[default: 1]", "[default: 4]"] {
        assert!(text.contains(default), "loadtest --help lacks {default}");
    }
}
