//! A paged store (`docs/design.md` §8.5.1) is served and exported without reading its
//! state into memory: `bavl serve` and `bavl export` open it paged (by default, and with
//! `--cache-mib 0`, which keeps no body) and read each chunk back per request; what they
//! give is byte for byte what the same store gives fully loaded, and a sync from them
//! writes a store at the same root.

use std::io::{Read, Write};

use crate::common::{self, TempDir};
use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_sync::Manifest;

/// A paged store of 3000 keys whose newest checkpoint is a skeleton and whose every
/// body is in its chunk files; (version, root hex).
fn make_paged_store(db: &std::path::Path) -> (u64, String) {
    let opts = Options {
        capacity: Some(16),
        cache_bytes: Some(0),
        checkpoint: CheckpointPolicy::Manual,
        ..Options::default()
    };
    let mut store = Store::open(db, opts).unwrap();
    for i in 0u32..3000 {
        store.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.wait_checkpoint().unwrap();
    store.insert(b"second", b"version").unwrap();
    let (v, root) = store.commit().unwrap();
    store.close().unwrap();
    (v, hex::encode(root))
}

/// GET `path` from a `bavl serve` URL: the body.
fn get(url: &str, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&all[..end]));
    all.split_off(end)
}

#[test]
fn a_paged_store_is_served_and_exported_chunk_by_chunk() {
    let dir = TempDir::new("bavl-cli", "paged-serve");
    let (src, export, dst) = (dir.join("src"), dir.join("export"), dir.join("dst"));
    let (v, root) = make_paged_store(&src);
    assert!(std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .any(|e| { e.file_name().to_string_lossy().starts_with("skel-") }));
    // What the same version gives fully loaded (an unpaged, read-only open).
    let whole = Store::open(&src, Options { read_only: true, ..Options::in_memory() }).unwrap();
    let snap = whole.snapshot(v).unwrap();
    let manifest = Manifest::from_snapshot(v, &snap).unwrap();
    assert!(manifest.chunk_sizes.iter().all(|&s| s > 0));
    let chunks: Vec<Vec<u8>> =
        (0..snap.chunk_count()).map(|i| snap.export_chunk(i).unwrap()).collect();
    drop((snap, whole));

    let out = common::bavl(&[
        "export",
        "--db",
        src.to_str().unwrap(),
        "--cache-mib",
        "0",
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let m = std::fs::read(export.join(format!("v1/snapshots/{v}/manifest.json"))).unwrap();
    assert_eq!(m, manifest.to_json(), "the exported manifest");
    for (i, c) in chunks.iter().enumerate() {
        let f = export.join(format!("v1/chunks/{root}/{i}"));
        assert_eq!(&std::fs::read(f).unwrap(), c, "exported chunk {i}");
    }

    for cache in [None, Some("0")] {
        let mut args = vec!["--db", src.to_str().unwrap()];
        args.extend(cache.iter().flat_map(|c| ["--cache-mib", c]));
        let (_server, url) = common::serve(&args);
        assert_eq!(get(&url, &format!("/v1/snapshots/{v}/manifest.json")), manifest.to_json());
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(&get(&url, &format!("/v1/chunks/{root}/{i}")), c, "served chunk {i}");
        }
        if cache.is_some() {
            let json = dir.join("s.json");
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bavl"));
            cmd.args(["sync", "--quiet", "--root", &root, "--version", &v.to_string()]);
            cmd.arg("--db").arg(&dst).arg("--json").arg(&json).args(["--peer", &url]);
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let mut store = Store::open(&dst, Options::default()).unwrap();
            assert_eq!((store.version(), hex::encode(store.root())), (v, root.clone()));
            assert_eq!(store.get(b"second").unwrap(), Some(&b"version"[..]));
        }
    }
}
