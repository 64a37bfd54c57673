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
