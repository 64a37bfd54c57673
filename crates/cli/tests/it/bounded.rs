//! Every command that opens a store runs within its cache of chunk bodies (`--cache-mib`,
//! 256 by default) whether or not the store is paged on disk (`docs/design.md` §8.5.1),
//! and a store missing a required file is reported as damage naming it (exit 3), as
//! `bavl check` reports it.

use std::path::Path;

use crate::common::{self, TempDir};
use bavl_store::{CheckpointPolicy, Options, Store};
use serde_json::Value;

fn key(i: u32) -> Vec<u8> {
    format!("key-{:09}", i.wrapping_mul(2_654_435_761) % 1_000_000_007).into_bytes()
}

fn value(i: u32, v: u32) -> Vec<u8> {
    format!("{v:03}-{i:08}-").repeat(8).into_bytes()
}

/// An in-memory store (a full checkpoint, no skeleton) of 40,000 keys, and one version
/// after it in the log that rewrites every key: several MiB of bodies each.
fn in_memory_store(db: &Path) {
    let opts = Options {
        capacity: Some(16),
        checkpoint: CheckpointPolicy::Manual,
        ..Options::in_memory()
    };
    let mut store = Store::open(db, opts).unwrap();
    for i in 0..40_000u32 {
        store.insert(&key(i), &value(i, 1)).unwrap();
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.wait_checkpoint().unwrap().unwrap();
    for i in 0..40_000u32 {
        store.insert(&key(i), &value(i, 2)).unwrap();
    }
    store.commit().unwrap();
    store.close().unwrap();
}

fn run(args: &[&str]) -> std::process::Output {
    common::bavl(args)
}

fn json(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", common::stderr(out));
    serde_json::from_str(&common::stdout(out)).unwrap()
}

#[test]
fn a_store_that_is_not_paged_on_disk_is_read_within_the_cache() {
    let dir = TempDir::new("bavl-cli", "bounded");
    let db = dir.join("db");
    in_memory_store(&db);
    let names: Vec<String> = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("skel-")), "no skeleton: {names:?}");
    let d = db.to_str().unwrap();

    let s = json(&run(&["stats", "--db", d, "--json", "--cache-mib", "1"]));
    assert_eq!(s["head"], 2);
    assert_eq!(s["keys"], 40_000);
    let p = &s["paging"];
    assert!(p["evictions"].as_u64().unwrap() > 0, "paged: {p}");
    let peak = p["peak_resident_bytes"].as_u64().unwrap();
    // The budget, and what one pass within a version may pass it by (256 KiB) and an
    // operation's chunks.
    assert!(peak <= (1 << 20) + (320 << 10), "bodies peaked at {peak} bytes: {p}");
    // By default too (the store's bodies fit 256 MiB: nothing is evicted, but it is paged).
    let s = json(&run(&["stats", "--db", d, "--json"]));
    assert!(s["paging"].is_object(), "{s}");
    assert_eq!(s["paging"]["evictions"], 0);

    let k = hex::encode(key(1234));
    let g = json(&run(&["get", "--db", d, "--key", &k, "--json", "--cache-mib", "1"]));
    assert_eq!(g["value"], hex::encode(value(1234, 2)));
    let p = json(&run(&["prove", "--db", d, "--key", &k, "--json", "--cache-mib", "1"]));
    assert_eq!(p["kind"], "membership");
    assert_eq!(p["root"], s["root"]);
    let c = run(&["check", "--db", d, "--cache-mib", "1"]);
    assert!(c.status.success(), "{}{}", common::stdout(&c), common::stderr(&c));
    // The flag is documented where the commands are.
    for cmd in ["stats", "get", "prove", "check", "serve", "export"] {
        let help = common::stdout(&run(&[cmd, "--help"]));
        assert!(help.contains("--cache-mib"), "{cmd} --help");
    }
}

#[test]
fn a_store_without_its_metadata_is_damage_naming_it() {
    let dir = TempDir::new("bavl-cli", "no-meta");
    let db = dir.join("db");
    let mut store = Store::open(&db, Options { capacity: Some(16), ..Options::default() }).unwrap();
    store.insert(b"k", b"v").unwrap();
    store.commit().unwrap();
    store.close().unwrap();
    std::fs::remove_file(db.join("bavl.meta")).unwrap();
    let d = db.to_str().unwrap();
    for args in [
        vec!["stats", "--db", d],
        vec!["get", "--db", d, "--key", "6b"],
        vec!["prove", "--db", d, "--key", "6b"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", common::stderr(&out));
        assert!(common::stderr(&out).contains("bavl.meta"), "{args:?}: {}", common::stderr(&out));
    }
    let out = run(&["check", "--db", d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(common::stdout(&out).contains("PROBLEM  bavl.meta"), "{}", common::stdout(&out));
}

/// A directory holding an unfinished sync or import is named as such by every command
/// that opens a store, not as "not a bavl store" and never opened: with half its chunks
/// written, and with none (the journal alone).
#[test]
fn an_unfinished_ingest_is_named_by_every_read_command() {
    let dir = TempDir::new("bavl-cli", "unfinished");
    let mut tree = bavl_core::Tree::with_capacity(16).unwrap();
    for i in 0..2_000u32 {
        tree.insert(&key(i), &value(i, 1)).unwrap();
    }
    let snap = tree.snapshot();
    let root = snap.root_hash();
    for (name, written) in [("half", snap.chunk_count() / 2), ("none", 0)] {
        let db = dir.join(name);
        let mut ingest =
            bavl_store::Ingest::open(&db, root, 7, bavl_store::IngestOptions::default()).unwrap();
        for i in 0..written {
            let bytes = snap.export_chunk(i).unwrap();
            let chunk = bavl_core::verify_chunk::<bavl_core::Sha256>(&root, i, &bytes).unwrap();
            ingest.add_verified(chunk).unwrap();
        }
        ingest.flush().unwrap();
        drop(ingest);
        let d = db.to_str().unwrap();
        for args in [
            vec!["stats", "--db", d],
            vec!["get", "--db", d, "--key", "00"],
            vec!["check", "--db", d],
        ] {
            let out = run(&args);
            let err = common::stderr(&out);
            assert!(!out.status.success(), "{name} {args:?} succeeded on an unfinished ingest");
            assert!(err.contains("unfinished ingest of version 7"), "{name} {args:?}: {err}");
        }
    }
}
