//! A state sync into a paged store: the restore writes each verified chunk's body to
//! the new store's chunk files (a `bavl_store::Ingest`), the node reaches the source's
//! app hash and runs with its bodies within its budget; a restore killed midway never
//! opens as a state and resumes when the same snapshot is offered again.

use crate::support::*;
use bavl_abci::App;
use bavl_core::Tree;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

use pb::response_apply_snapshot_chunk::Result as ApplyResult;
use pb::response_offer_snapshot::Result as OfferResult;

/// The joiner's budget of bodies: a few chunks, far below the state.
const BUDGET: u64 = 16 << 10;

fn joiner_config(home: &std::path::Path) -> bavl_abci::Config {
    let mut cfg = config(&home.to_path_buf(), 5);
    cfg.store.cache_bytes = Some(BUDGET);
    cfg.store.cache_counts_slack = false;
    cfg.restore_flush_bytes = 1; // every chunk durable at once: a kill loses none
    cfg
}

/// A source chain through blocks 1..=12 (snapshots at 5 and 10) and its snapshot of 10.
fn source(name: &str) -> (App, Tree, pb::Snapshot) {
    let app = App::open(config(&temp_home(name), 5)).unwrap();
    init(&app);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&app], &mut model, 1, 12, 20);
    let s = newest(&app);
    assert_eq!(s.height, 10);
    (app, model, s)
}

fn offer(app: &App, s: &pb::Snapshot) -> i32 {
    let app_hash = model_at(s.height).root_hash().to_vec().into();
    app.offer_snapshot(pb::RequestOfferSnapshot { snapshot: Some(s.clone()), app_hash }).result
}

fn bundle(app: &App, s: &pb::Snapshot, i: u32) -> bytes::Bytes {
    let req = pb::RequestLoadSnapshotChunk { height: s.height, format: s.format, chunk: i };
    app.load_snapshot_chunk(req).chunk
}

fn apply(app: &App, i: u32, chunk: bytes::Bytes) -> i32 {
    let req = pb::RequestApplySnapshotChunk { index: i, chunk, sender: "peer".into() };
    app.apply_snapshot_chunk(req).result
}

/// The files of the live store's directory.
fn live_files(home: &std::path::Path) -> Vec<String> {
    let current = std::fs::read_to_string(home.join("CURRENT")).unwrap();
    let dir = home.join(current.trim_end());
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}

fn restore_dirs(home: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(home)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("restore-") && home.join(n).is_dir())
        .collect()
}

#[test]
fn a_restore_into_a_paged_store_reaches_the_app_hash_with_bodies_within_the_budget() {
    let (source, _, s) = source("paged-restore-source");
    let home = temp_home("paged-restore-joiner");
    let joiner = App::open(joiner_config(&home)).unwrap();
    assert_eq!(offer(&joiner, &s), OfferResult::Accept as i32);
    for i in 0..s.chunks {
        assert_eq!(apply(&joiner, i, bundle(&source, &s, i)), ApplyResult::Accept as i32);
    }
    let trusted = model_at(10).root_hash();
    assert_eq!(info(&joiner), (10, trusted.to_vec()));
    // The restore built a paged store (a skeleton and chunk files), not a checkpoint of
    // the whole state, and left no restore directory behind.
    let files = live_files(&home);
    assert!(files.iter().any(|f| f.starts_with("skel-")), "{files:?}");
    assert!(files.iter().any(|f| f.starts_with("chunks-")), "{files:?}");
    assert!(!files.iter().any(|f| f.starts_with("ckpt-")), "{files:?}");
    assert!(restore_dirs(&home).is_empty());
    let restored = joiner.store_stats().unwrap().paging.expect("a paged store");
    assert_eq!((restored.resident_bytes, restored.loads), (0, 0), "{restored:?}");
    // The node follows the chain from it, reading chunks back from disk: after every
    // commit its bodies are within the budget, and within a block (its chunks loaded
    // and copied on write stay until the commit hashes them) far below the state's, which
    // the source, whose budget holds it all, has in memory.
    let whole = source.store_stats().unwrap().paging.expect("paged").resident_bytes;
    let mut model_10 = model_at(10);
    for h in 11..=14 {
        run_blocks(&[&joiner], &mut model_10, h, h, 1);
        let paging = joiner.store_stats().unwrap().paging.expect("a paged store");
        assert!(paging.resident_bytes <= BUDGET, "height {h}: {paging:?}");
    }
    let paging = joiner.store_stats().unwrap().paging.expect("a paged store");
    assert!(paging.loads > 0, "{paging:?}");
    assert!(paging.peak_resident_bytes * 3 < whole, "{paging:?}, the state {whole}");
    // And after a restart.
    drop(joiner);
    let joiner = App::open(joiner_config(&home)).unwrap();
    assert_eq!(info(&joiner), (14, model_10.root_hash().to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn a_restore_killed_midway_never_opens_and_resumes_the_same_snapshot() {
    let (source, _, s) = source("resume-source");
    assert!(s.chunks >= 4, "want several bundles, got {}", s.chunks);
    let home = temp_home("resume-joiner");
    let joiner = App::open(joiner_config(&home)).unwrap();
    init(&joiner);
    assert_eq!(offer(&joiner, &s), OfferResult::Accept as i32);
    let half = s.chunks / 2;
    for i in 0..half {
        assert_eq!(apply(&joiner, i, bundle(&source, &s, i)), ApplyResult::Accept as i32);
    }
    drop(joiner); // killed mid-restore

    // The half restore is not a state: the node is at height 0, its restore kept.
    let joiner = App::open(joiner_config(&home)).unwrap();
    assert_eq!(info(&joiner).0, 0);
    assert_eq!(restore_dirs(&home).len(), 1);
    // The same snapshot offered again resumes: the bundles kept before are held (a
    // repeat is accepted unread), the others are verified as ever.
    assert_eq!(offer(&joiner, &s), OfferResult::Accept as i32);
    let garbage = bytes::Bytes::from_static(b"not a bundle");
    assert_eq!(apply(&joiner, 0, garbage.clone()), ApplyResult::Accept as i32);
    assert_eq!(apply(&joiner, half, garbage), ApplyResult::Retry as i32);
    for i in half..s.chunks {
        assert_eq!(apply(&joiner, i, bundle(&source, &s, i)), ApplyResult::Accept as i32);
    }
    assert_eq!(info(&joiner), (10, model_at(10).root_hash().to_vec()));
    assert!(restore_dirs(&home).is_empty());
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn an_unfinished_restore_goes_when_another_snapshot_is_accepted_or_the_node_has_a_state() {
    let (source, _, s10) = source("abandon-source");
    let s5 = source.list_snapshots().snapshots.into_iter().find(|s| s.height == 5).unwrap();
    let home = temp_home("abandon-joiner");
    let joiner = App::open(joiner_config(&home)).unwrap();
    init(&joiner);
    assert_eq!(offer(&joiner, &s10), OfferResult::Accept as i32);
    assert_eq!(apply(&joiner, 0, bundle(&source, &s10, 0)), ApplyResult::Accept as i32);
    drop(joiner);
    let joiner = App::open(joiner_config(&home)).unwrap();
    let before = restore_dirs(&home);
    assert_eq!(before.len(), 1);
    // Another snapshot: the restore of 10 is deleted, one of 5 begins.
    assert_eq!(offer(&joiner, &s5), OfferResult::Accept as i32);
    let after = restore_dirs(&home);
    assert_eq!(after.len(), 1);
    assert_ne!(after, before);
    drop(joiner);
    // A node with a state (past height 0) cannot be state-synced: its restores go.
    let joiner = App::open(joiner_config(&home)).unwrap();
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&joiner], &mut model, 1, 1, 20);
    drop(joiner);
    let _joiner = App::open(joiner_config(&home)).unwrap();
    assert!(restore_dirs(&home).is_empty());
    std::fs::remove_dir_all(&home).unwrap();
}
