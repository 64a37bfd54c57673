//! Shared by the handler tests: a chain driven through the ABCI handlers, and a model of
//! its state (a bavl `Tree` fed the same operations) to compare app hashes with.

use std::path::PathBuf;

use bavl_abci::{App, Config, Op, Tx};
use bavl_core::Tree;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

/// A fresh home for the node `name`: under cargo's directory for integration tests'
/// files (`target/tmp`), emptied first, so every run reuses the same directories instead of
/// leaving one set per process in the system's temporary directory.
pub fn temp_home(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bavl-abci-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn config(home: &PathBuf, interval: u64) -> Config {
    let mut cfg = Config::new(home);
    cfg.snapshot_interval = interval;
    cfg.snapshot_keep = 2;
    cfg.store.capacity = Some(16);
    cfg.bundle_bytes = 16 << 10; // several bundles from a small state
    cfg
}

/// The blocks of a deterministic test chain: `txs` transactions of 20 operations each.
pub fn block_txs(height: u64, txs: usize) -> Vec<Tx> {
    let mut rng = ChaCha8Rng::seed_from_u64(height);
    (0..txs)
        .map(|_| Tx {
            ops: (0..20)
                .map(|_| {
                    let key = format!("key{:05}", rng.gen_range(0..3000)).into_bytes();
                    if rng.gen_ratio(1, 6) {
                        Op::Delete { key }
                    } else {
                        Op::Set { key, value: vec![rng.gen(); rng.gen_range(0..120)] }
                    }
                })
                .collect(),
        })
        .collect()
}

pub fn finalize(app: &App, height: u64, txs: &[Tx]) -> pb::ResponseFinalizeBlock {
    let txs = txs.iter().map(|t| t.encode().into()).collect();
    app.finalize_block(pb::RequestFinalizeBlock {
        txs,
        height: height as i64,
        ..Default::default()
    })
}

/// Applies `txs` to the model and returns its root.
pub fn model_apply(model: &mut Tree, txs: &[Tx]) -> [u8; 32] {
    for tx in txs {
        for op in &tx.ops {
            match op {
                Op::Set { key, value } => {
                    model.insert(key, value).unwrap();
                }
                Op::Delete { key } => {
                    model.remove(key);
                }
            }
        }
    }
    model.root_hash()
}

pub fn init(app: &App) -> pb::ResponseInitChain {
    app.init_chain(pb::RequestInitChain { initial_height: 1, ..Default::default() })
}

/// Runs blocks `from..=to` on every app, checking each app hash against the model's.
pub fn run_blocks(apps: &[&App], model: &mut Tree, from: u64, to: u64, txs: usize) {
    for h in from..=to {
        let block = block_txs(h, txs);
        let want = model_apply(model, &block);
        for app in apps {
            let r = finalize(app, h, &block);
            assert_eq!(&r.app_hash[..], &want[..], "height {h}");
            assert!(r.tx_results.iter().all(|t| t.code == 0));
            app.commit();
            // A snapshot is listed once its export ends; one taken while an export runs
            // is skipped. Waiting makes every snapshot height's snapshot listed.
            app.wait_snapshots();
        }
    }
}

pub fn info(app: &App) -> (i64, Vec<u8>) {
    let r = app.info(pb::RequestInfo::default());
    (r.last_block_height, r.last_block_app_hash.to_vec())
}

/// The model's state after block `h` of the test chain (20 transactions a block).
pub fn model_at(h: u64) -> Tree {
    let mut m = Tree::with_capacity(16).unwrap();
    for b in 1..=h {
        model_apply(&mut m, &block_txs(b, 20));
    }
    m
}

/// The newest snapshot `app` lists.
pub fn newest(app: &App) -> pb::Snapshot {
    app.list_snapshots().snapshots.into_iter().max_by_key(|s| s.height).expect("a snapshot")
}
