//! Snapshot format 2, the Cosmos-SDK-style baseline, through the same handlers: it
//! restores; a chunk that disagrees with the metadata's checksum is refetched; a forged
//! snapshot with consistent checksums is caught only after its last chunk.

use crate::support::*;
use bavl_abci::baseline::FORMAT_BASELINE;
use bavl_abci::{App, Config, Lie};
use bavl_core::Tree;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

use pb::response_apply_snapshot_chunk::Result as ApplyResult;
use pb::response_offer_snapshot::Result as OfferResult;

fn baseline_config(name: &str, lie: Option<Lie>) -> Config {
    let mut cfg = config(&temp_home(name), 5);
    cfg.snapshot_format = FORMAT_BASELINE;
    cfg.byzantine = lie;
    cfg
}

fn offer(app: &App, s: &pb::Snapshot, h: u64) -> i32 {
    let app_hash = model_at(h).root_hash().to_vec().into();
    app.offer_snapshot(pb::RequestOfferSnapshot { snapshot: Some(s.clone()), app_hash }).result
}

fn chunk(app: &App, s: &pb::Snapshot, i: u32) -> bytes::Bytes {
    let req = pb::RequestLoadSnapshotChunk { height: s.height, format: s.format, chunk: i };
    app.load_snapshot_chunk(req).chunk
}

fn apply(app: &App, i: u32, chunk: bytes::Bytes, sender: &str) -> pb::ResponseApplySnapshotChunk {
    app.apply_snapshot_chunk(pb::RequestApplySnapshotChunk {
        index: i,
        chunk,
        sender: sender.into(),
    })
}

#[test]
fn the_baseline_restores_and_finds_a_forgery_only_at_the_end() {
    // The honest server is paged with no body kept: its export reads every chunk back.
    let mut paged = baseline_config("base-honest", None);
    paged.store.cache_bytes = Some(0);
    let honest = App::open(paged).unwrap();
    let liar = App::open(baseline_config("base-liar", Some(Lie::WrongBytes))).unwrap();
    let forger = App::open(baseline_config("base-forger", Some(Lie::Forged))).unwrap();
    let mut model = Tree::with_capacity(16).unwrap();
    for app in [&honest, &liar, &forger] {
        init(app);
    }
    run_blocks(&[&honest, &liar, &forger], &mut model, 1, 12, 20);
    let s = newest(&honest);
    assert_eq!((s.height, s.format), (10, FORMAT_BASELINE));
    // A node restoring bavl's format refuses this one.
    let bavl_joiner = App::open(config(&temp_home("base-bavl-joiner"), 5)).unwrap();
    assert_eq!(offer(&bavl_joiner, &s, 10), OfferResult::RejectFormat as i32);

    let home = temp_home("base-joiner");
    let joiner = App::open(baseline_config("base-joiner", None)).unwrap();
    // The forgery: accepted at the offer (nothing to check it against), every chunk
    // matches its checksum, and it is refused only after the last one.
    let f = newest(&forger);
    assert_eq!(f.height, 11);
    assert_eq!(offer(&joiner, &f, 11), OfferResult::Accept as i32);
    let mut results = vec![];
    for i in 0..f.chunks {
        results.push(apply(&joiner, i, chunk(&forger, &f, i), "forger").result);
    }
    let last = results.pop().unwrap();
    assert!(results.iter().all(|r| *r == ApplyResult::Accept as i32));
    assert_eq!(last, ApplyResult::RejectSnapshot as i32);
    // The honest snapshot, with a lying chunk first: refetched, then restored.
    assert_eq!(offer(&joiner, &s, 10), OfferResult::Accept as i32);
    for i in 0..s.chunks {
        let r = apply(&joiner, i, chunk(&liar, &s, i), "liar");
        assert_eq!((r.result, r.refetch_chunks), (ApplyResult::Retry as i32, vec![i]));
        assert_eq!(
            apply(&joiner, i, chunk(&honest, &s, i), "honest").result,
            ApplyResult::Accept as i32
        );
    }
    assert_eq!(info(&joiner), (10, model_at(10).root_hash().to_vec()));
    drop(joiner);
    let _ = std::fs::remove_dir_all(&home);
}
