//! The genesis preload (a large state every validator builds from `app_state`), the null
//! restore of the chain experiments, and the restore report a joiner writes.

use crate::support::*;
use bavl_abci::genesis::{self, Preload};
use bavl_abci::App;
use bavl_core::Tree;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

use pb::response_apply_snapshot_chunk::Result as ApplyResult;
use pb::response_offer_snapshot::Result as OfferResult;

const STATE: &[u8] = br#"{"bavl_preload":{"keys":3000,"seed":11}}"#;

fn init_with(app: &App, state: &[u8]) -> Vec<u8> {
    let req = pb::RequestInitChain {
        initial_height: 1,
        app_state_bytes: state.to_vec().into(),
        ..Default::default()
    };
    app.init_chain(req).app_hash.to_vec()
}

fn report(app_home: &std::path::Path) -> serde_json::Value {
    let bytes = std::fs::read(app_home.join("restore-report.json")).expect("a restore report");
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn validators_preload_the_same_state_durably_and_again_after_a_crash() {
    let want = genesis::build(Preload { keys: 3000, seed: 11 }, Some(16)).unwrap().root_hash();
    let home = temp_home("genesis-a");
    let a = App::open(config(&home, 0)).unwrap();
    let b = App::open(config(&temp_home("genesis-b"), 0)).unwrap();
    assert_eq!(init_with(&a, STATE), want);
    assert_eq!(init_with(&b, STATE), want);
    // A crash before the first Commit: Info says height 0, and the handshake's second
    // InitChain rebuilds the same state.
    drop(a);
    let a = App::open(config(&home, 0)).unwrap();
    assert_eq!(info(&a), (0, want.to_vec()));
    assert_eq!(init_with(&a, STATE), want);
    // Blocks apply on top of it, on both.
    let mut model = genesis::build(Preload { keys: 3000, seed: 11 }, Some(16)).unwrap();
    run_blocks(&[&a, &b], &mut model, 1, 3, 5);
    drop(a);
    let a = App::open(config(&home, 0)).unwrap();
    assert_eq!(info(&a), (3, model.root_hash().to_vec()));
}

#[test]
fn an_empty_genesis_is_an_empty_state() {
    let a = App::open(config(&temp_home("genesis-empty"), 0)).unwrap();
    assert_eq!(init_with(&a, b"{}"), Tree::with_capacity(16).unwrap().root_hash());
}

/// A server with snapshots at 5 and 10 (blocks of 20 transactions).
fn server(name: &str) -> App {
    let app = App::open(config(&temp_home(name), 5)).unwrap();
    init(&app);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&app], &mut model, 1, 11, 20);
    app
}

#[test]
fn a_verifying_joiner_reports_its_restore() {
    let server = server("report-server");
    let s = newest(&server);
    let home = temp_home("report-joiner");
    let joiner = App::open(config(&home, 5)).unwrap();
    let root = model_at(s.height).root_hash();
    let offer =
        pb::RequestOfferSnapshot { snapshot: Some(s.clone()), app_hash: root.to_vec().into() };
    assert_eq!(joiner.offer_snapshot(offer).result, OfferResult::Accept as i32);
    let mut total = 0;
    for i in 0..s.chunks {
        let req = pb::RequestLoadSnapshotChunk { height: s.height, format: s.format, chunk: i };
        let chunk = server.load_snapshot_chunk(req).chunk;
        total += chunk.len() as u64;
        let req = pb::RequestApplySnapshotChunk { index: i, chunk, sender: "p".into() };
        assert_eq!(joiner.apply_snapshot_chunk(req).result, ApplyResult::Accept as i32);
    }
    let r = report(&home);
    assert_eq!((r["mode"].as_str(), r["height"].as_u64()), (Some("bavl"), Some(s.height)));
    assert_eq!(r["bundles_kept"].as_u64(), Some(u64::from(s.chunks)));
    assert_eq!((r["bytes"].as_u64(), r["bytes_received"].as_u64()), (Some(total), Some(total)));
    assert_eq!(info(&joiner), (s.height as i64, root.to_vec()));
}

#[test]
fn the_null_restore_accepts_anything_and_reports_the_trusted_hash() {
    let server = server("null-server");
    let s = newest(&server);
    let home = temp_home("null-joiner");
    let mut cfg = config(&home, 5);
    cfg.restore_null = true;
    let joiner = App::open(cfg).unwrap();
    let trusted = [7u8; 32]; // not the snapshot's root: the null restore does not look
    let offer =
        pb::RequestOfferSnapshot { snapshot: Some(s.clone()), app_hash: trusted.to_vec().into() };
    assert_eq!(joiner.offer_snapshot(offer).result, OfferResult::Accept as i32);
    for i in 0..s.chunks {
        let req = pb::RequestApplySnapshotChunk {
            index: i,
            chunk: vec![0xAB; 10].into(),
            sender: "p".into(),
        };
        assert_eq!(joiner.apply_snapshot_chunk(req).result, ApplyResult::Accept as i32);
    }
    let r = report(&home);
    assert_eq!(
        (r["mode"].as_str(), r["bytes"].as_u64()),
        (Some("null"), Some(10 * u64::from(s.chunks)))
    );
    assert_eq!(info(&joiner), (s.height as i64, trusted.to_vec()));
}

#[test]
fn the_preload_builds_in_a_paged_store_within_its_budget_to_the_same_root() {
    const BUDGET: u64 = 64 << 10;
    let p = Preload { keys: 30_000, seed: 11 };
    let mut reference = genesis::build(p, Some(16)).unwrap();
    let raw: u64 = reference.iter().unwrap().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert!(raw > 4 * BUDGET, "the state ({raw} bytes) dwarfs the budget");
    let dir = temp_home("genesis-paged-build");
    let store = genesis::build_paged(p, Some(16), BUDGET, &dir).unwrap();
    assert_eq!(store.root(), reference.root_hash());
    let paging = store.stats().unwrap().paging.expect("a paged store");
    // The store's documented bound (docs/design.md §8.5.1, "Within a block"): the budget,
    // plus the growth between two eviction passes (256 KiB at least) and one operation's
    // chunks (three of at most 16 entries here). How often the preload commits decides
    // how close to the budget it stays, which this test does not pin down.
    let bound = BUDGET + (256 << 10) + 3 * 16 * (raw / 30_000 + 64);
    assert!(raw > 4 * bound, "the state ({raw} bytes) dwarfs the bound ({bound})");
    assert!(paging.evictions > 0 && paging.loads > 0, "{paging:?}");
    assert!(paging.peak_resident_bytes <= bound, "{paging:?}");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
    // Through InitChain, with the application's budget that small too: the same app hash,
    // and no scratch or restore directory left.
    let home = temp_home("genesis-paged-app");
    let mut cfg = config(&home, 0);
    cfg.store.cache_bytes = Some(BUDGET);
    let app = App::open(cfg).unwrap();
    let state = br#"{"bavl_preload":{"keys":30000,"seed":11}}"#;
    assert_eq!(init_with(&app, state), reference.root_hash());
    let left: Vec<String> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("genesis-") || n.starts_with("restore-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&home).unwrap();
}
