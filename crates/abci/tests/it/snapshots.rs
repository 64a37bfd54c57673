//! Snapshots on disk: a restarted node serves the snapshots it served before, byte for
//! byte, from a paged store whose bodies mostly live on disk; retention by count and by
//! age, applied across restarts; a damaged snapshot file is not served.

use crate::support::*;
use bavl_abci::App;
use bavl_core::Tree;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

use pb::response_apply_snapshot_chunk::Result as ApplyResult;
use pb::response_offer_snapshot::Result as OfferResult;

/// A node paged with a budget far below its state (a few chunks' worth).
fn paged(home: &std::path::Path, keep: usize, keep_secs: u64) -> bavl_abci::Config {
    let mut cfg = config(&home.to_path_buf(), 5);
    cfg.store.cache_bytes = Some(16 << 10);
    cfg.snapshot_keep = keep;
    cfg.snapshot_keep_secs = keep_secs;
    cfg
}

/// Every snapshot `app` lists, with every one of its chunks.
fn served(app: &App) -> Vec<(pb::Snapshot, Vec<bytes::Bytes>)> {
    app.list_snapshots()
        .snapshots
        .into_iter()
        .map(|s| {
            let chunks = (0..s.chunks)
                .map(|i| {
                    let req = pb::RequestLoadSnapshotChunk {
                        height: s.height,
                        format: s.format,
                        chunk: i,
                    };
                    app.load_snapshot_chunk(req).chunk
                })
                .collect();
            (s, chunks)
        })
        .collect()
}

fn heights(app: &App) -> Vec<u64> {
    app.list_snapshots().snapshots.iter().map(|s| s.height).collect()
}

#[test]
fn a_restarted_node_serves_the_same_snapshots() {
    let home = temp_home("snapshots-restart");
    let app = App::open(paged(&home, 2, 0)).unwrap();
    init(&app);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&app], &mut model, 1, 12, 20);
    let stats = app.store_stats().unwrap().paging.expect("a paged store");
    assert!(stats.loads > 0, "the state is paged: {stats:?}");
    let before = served(&app);
    assert_eq!(before.iter().map(|(s, _)| s.height).collect::<Vec<_>>(), vec![5, 10]);
    assert!(before.iter().all(|(s, c)| s.chunks >= 3 && c.iter().all(|c| !c.is_empty())));
    drop(app);
    // What an export killed midway leaves: deleted at the next start, never listed.
    let tmp = home.join("snapshots").join(format!("{}.tmp", bavl_abci::snapfile::file_name(15)));
    std::fs::write(&tmp, b"half a snapshot").unwrap();

    let app = App::open(paged(&home, 2, 0)).unwrap();
    assert!(!tmp.exists());
    assert_eq!(info(&app), (12, model.root_hash().to_vec()));
    let after = served(&app);
    assert_eq!(after, before, "the same snapshots, byte for byte");

    // A joiner restores the restarted node's snapshot of 10 to the chain's app hash.
    let (s, chunks) = after.last().unwrap().clone();
    let trusted = model_at(10).root_hash();
    let joiner = App::open(config(&temp_home("snapshots-restart-joiner"), 5)).unwrap();
    let offer = pb::RequestOfferSnapshot { snapshot: Some(s), app_hash: trusted.to_vec().into() };
    assert_eq!(joiner.offer_snapshot(offer).result, OfferResult::Accept as i32);
    for (i, chunk) in chunks.into_iter().enumerate() {
        let req =
            pb::RequestApplySnapshotChunk { index: i as u32, chunk, sender: "restarted".into() };
        assert_eq!(joiner.apply_snapshot_chunk(req).result, ApplyResult::Accept as i32);
    }
    assert_eq!(info(&joiner), (10, trusted.to_vec()));

    // The chain goes on; a damaged snapshot file is not served after the next restart.
    run_blocks(&[&app], &mut model, 13, 13, 20);
    drop(app);
    let file = home.join("snapshots").join(bavl_abci::snapfile::file_name(10));
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - bavl_abci::snapfile::TRAILER_LEN - 3; // in the index
    bytes[at] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let app = App::open(paged(&home, 2, 0)).unwrap();
    assert_eq!(heights(&app), vec![5]);
    assert!(!file.exists());
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn snapshots_are_kept_by_count_and_by_age_across_restarts() {
    let home = temp_home("snapshots-retention");
    // The newest one, and any taken within the hour: all of them here.
    let app = App::open(paged(&home, 1, 3600)).unwrap();
    init(&app);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&app], &mut model, 1, 16, 20);
    assert_eq!(heights(&app), vec![5, 10, 15]);
    drop(app);
    // Reopened keeping the newest two, by count only: 5 is dropped and its file deleted.
    let app = App::open(paged(&home, 2, 0)).unwrap();
    assert_eq!(heights(&app), vec![10, 15]);
    let dir = home.join("snapshots");
    assert!(!dir.join(bavl_abci::snapfile::file_name(5)).exists());
    // By count as the chain goes on.
    run_blocks(&[&app], &mut model, 17, 20, 20);
    assert_eq!(heights(&app), vec![15, 20]);
    drop(app);
    let app = App::open(paged(&home, 1, 0)).unwrap();
    assert_eq!(heights(&app), vec![20]);
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec![bavl_abci::snapfile::file_name(20)]);
    std::fs::remove_dir_all(&home).unwrap();
}
