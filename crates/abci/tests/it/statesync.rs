//! The four snapshot calls, driven directly: an honest server, a Byzantine one of each
//! kind and a fresh node restoring from them, as CometBFT's syncer would call them.

use crate::support::*;
use bavl_abci::byzantine::FORGED_KEY;
use bavl_abci::{App, Lie};
use bavl_core::Tree;
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

use pb::response_apply_snapshot_chunk::Result as ApplyResult;
use pb::response_offer_snapshot::Result as OfferResult;

const HONEST: &str = "honest-peer";
const LIAR: &str = "lying-peer";

/// Runs an honest server and one with `lie` through blocks 1..=12 (snapshots at 5, 10).
fn servers(name: &str, lie: Lie) -> (App, App, Tree) {
    let honest = App::open(config(&temp_home(&format!("{name}-honest")), 5)).unwrap();
    let mut cfg = config(&temp_home(&format!("{name}-liar")), 5);
    cfg.byzantine = Some(lie);
    let liar = App::open(cfg).unwrap();
    init(&honest);
    init(&liar);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&honest, &liar], &mut model, 1, 12, 20);
    (honest, liar, model)
}

fn app_hash_at(model_at: &[u8; 32]) -> bytes::Bytes {
    model_at.to_vec().into()
}

fn offer(app: &App, s: &pb::Snapshot, app_hash: bytes::Bytes) -> i32 {
    app.offer_snapshot(pb::RequestOfferSnapshot { snapshot: Some(s.clone()), app_hash }).result
}

fn load(app: &App, s: &pb::Snapshot, i: u32) -> bytes::Bytes {
    let req = pb::RequestLoadSnapshotChunk { height: s.height, format: s.format, chunk: i };
    app.load_snapshot_chunk(req).chunk
}

fn apply(app: &App, i: u32, chunk: bytes::Bytes, sender: &str) -> pb::ResponseApplySnapshotChunk {
    let req = pb::RequestApplySnapshotChunk { index: i, chunk, sender: sender.into() };
    app.apply_snapshot_chunk(req)
}

/// The trusted app hash at height 10 (the model's), after checking that the honest
/// server's snapshot at 10 claims it.
fn root_at_10(honest: &App) -> [u8; 32] {
    let root = model_at(10).root_hash();
    let s = newest(honest);
    assert_eq!(bavl_abci::snapshot::Metadata::decode(&s.metadata).unwrap().root, root);
    root
}

#[test]
fn a_lying_bundle_costs_one_chunk_from_every_kind_of_liar() {
    for lie in [Lie::WrongBytes, Lie::OtherHeight, Lie::Truncated] {
        let (honest, liar, model) = servers(&format!("lie-{lie}"), lie);
        let trusted = root_at_10(&honest);
        let s = newest(&honest);
        assert_eq!(s.height, 10);
        assert!(s.chunks >= 3, "want several bundles, got {}", s.chunks);
        // Every honest node advertises the same snapshot.
        assert_eq!(newest(&liar), s, "{lie}");
        let home = temp_home(&format!("joiner-{lie}"));
        let joiner = App::open(config(&home, 5)).unwrap();
        assert_eq!(offer(&joiner, &s, app_hash_at(&trusted)), OfferResult::Accept as i32);
        for i in 0..s.chunks {
            // The liar answers first: refused, its sender rejected, the bundle refetched.
            let r = apply(&joiner, i, load(&liar, &s, i), LIAR);
            assert_eq!(r.result, ApplyResult::Retry as i32, "{lie} bundle {i}");
            assert_eq!((r.refetch_chunks, r.reject_senders), (vec![i], vec![LIAR.to_string()]));
            let r = apply(&joiner, i, load(&honest, &s, i), HONEST);
            assert_eq!(r.result, ApplyResult::Accept as i32, "{lie} bundle {i}");
            assert!(r.reject_senders.is_empty());
        }
        assert_eq!(info(&joiner), (10, trusted.to_vec()));
        // Durable: a reopen finds the restored height, and the chain goes on from it.
        drop(joiner);
        let joiner = App::open(config(&home, 5)).unwrap();
        assert_eq!(info(&joiner), (10, trusted.to_vec()));
        let mut model_10 = model_at(10);
        run_blocks(&[&joiner], &mut model_10, 11, 12, 20);
        assert_eq!(model_10.root_hash(), model.clone().root_hash());
        std::fs::remove_dir_all(&home).unwrap();
    }
}

#[test]
fn offers_are_checked_against_the_trusted_app_hash() {
    let (honest, liar, _) = servers("forged", Lie::Forged);
    let trusted = root_at_10(&honest);
    assert_eq!(trusted, model_at(10).root_hash());
    let home = temp_home("joiner-forged");
    let joiner = App::open(config(&home, 5)).unwrap();
    // The forged snapshot is self-consistent: same height, its hash matches its metadata,
    // its chunks verify against its own root. Only that root is not the chain's.
    // The forgery is one height newer, so that CometBFT offers it first.
    let forged = newest(&liar);
    let honest_s = newest(&honest);
    assert_eq!(forged.height, honest_s.height + 1);
    let heights: Vec<u64> = liar.list_snapshots().snapshots.iter().map(|s| s.height).collect();
    assert_eq!(heights, vec![6, 11]);
    let meta = bavl_abci::snapshot::Metadata::decode(&forged.metadata).unwrap();
    assert_eq!(&meta.hash(forged.height)[..], &forged.hash[..]);
    let trusted_11 = model_at(11).root_hash();
    assert_eq!(offer(&joiner, &forged, app_hash_at(&trusted_11)), OfferResult::Reject as i32);
    let mut own = bavl_abci::restore::Restoring::offer(
        forged.height,
        forged.format,
        forged.chunks,
        &forged.hash,
        &forged.metadata,
        &meta.root,
    )
    .unwrap();
    for i in 0..forged.chunks {
        let done = own.apply(i, &load(&liar, &forged, i));
        assert!(matches!(
            done,
            bavl_abci::restore::Applied::Accepted { .. } | bavl_abci::restore::Applied::Complete(_)
        ));
        if let bavl_abci::restore::Applied::Complete(tree) = done {
            assert_eq!(tree.get(FORGED_KEY), Ok(Some(&b"forged at 11"[..])));
        }
    }
    // Other refusals: a wrong format, a hash that does not match, a chunk count that
    // disagrees, an app hash of another height.
    let mut bad = honest_s.clone();
    bad.format = 2;
    assert_eq!(offer(&joiner, &bad, app_hash_at(&trusted)), OfferResult::RejectFormat as i32);
    let mut bad = honest_s.clone();
    bad.hash = vec![0; 32].into();
    assert_eq!(offer(&joiner, &bad, app_hash_at(&trusted)), OfferResult::Reject as i32);
    let mut bad = honest_s.clone();
    bad.chunks += 1;
    assert_eq!(offer(&joiner, &bad, app_hash_at(&trusted)), OfferResult::Reject as i32);
    let at_5 = model_at(5).root_hash();
    assert_eq!(offer(&joiner, &honest_s, app_hash_at(&at_5)), OfferResult::Reject as i32);
    // Nothing was accepted, so a chunk now aborts, and the node is still empty.
    let r = apply(&joiner, 0, load(&honest, &honest_s, 0), HONEST);
    assert_eq!(r.result, ApplyResult::Abort as i32);
    assert_eq!(info(&joiner).0, 0);
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn metadata_lying_under_the_right_root_rejects_the_snapshot() {
    let (honest, _liar, _) = servers("meta-lie", Lie::WrongBytes);
    let trusted = root_at_10(&honest);
    let s = newest(&honest);
    let mut meta = bavl_abci::snapshot::Metadata::decode(&s.metadata).unwrap();
    meta.chunk_count += u64::from(meta.per_bundle); // one more bundle than there is
    let lying = pb::Snapshot {
        chunks: s.chunks + 1,
        hash: meta.hash(s.height).to_vec().into(),
        metadata: meta.encode().into(),
        ..s.clone()
    };
    let home = temp_home("joiner-meta-lie");
    let joiner = App::open(config(&home, 5)).unwrap();
    assert_eq!(offer(&joiner, &lying, app_hash_at(&trusted)), OfferResult::Accept as i32);
    let r = apply(&joiner, 0, load(&honest, &s, 0), HONEST);
    assert_eq!(r.result, ApplyResult::RejectSnapshot as i32);
    // CometBFT then offers the honest one, which restores.
    assert_eq!(offer(&joiner, &s, app_hash_at(&trusted)), OfferResult::Accept as i32);
    for i in 0..s.chunks {
        assert_eq!(
            apply(&joiner, i, load(&honest, &s, i), HONEST).result,
            ApplyResult::Accept as i32
        );
    }
    assert_eq!(info(&joiner), (10, trusted.to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn an_interrupted_restore_leaves_the_old_state() {
    let (honest, _liar, _) = servers("interrupted", Lie::Truncated);
    let trusted = root_at_10(&honest);
    let s = newest(&honest);
    let home = temp_home("joiner-interrupted");
    let joiner = App::open(config(&home, 5)).unwrap();
    init(&joiner);
    assert_eq!(offer(&joiner, &s, app_hash_at(&trusted)), OfferResult::Accept as i32);
    apply(&joiner, 0, load(&honest, &s, 0), HONEST);
    drop(joiner); // killed mid-restore
    let joiner = App::open(config(&home, 5)).unwrap();
    assert_eq!(info(&joiner), (0, Tree::with_capacity(16).unwrap().root_hash().to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn a_liar_with_many_forgeries_lists_them_newest_first_and_each_is_refused() {
    let (honest, liar, _) = servers("forged-many", Lie::ForgedMany);
    let heights: Vec<u64> = liar.list_snapshots().snapshots.iter().map(|s| s.height).collect();
    // Blocks 1..=12, snapshots every 5: forgeries at 6..=9 and 11, 12, of which the
    // newest FORGERIES (4) are kept.
    assert_eq!(heights, vec![8, 9, 11, 12]);
    assert_eq!(newest(&honest).height, 10);
    let joiner = App::open(config(&temp_home("joiner-forged-many"), 5)).unwrap();
    for s in liar.list_snapshots().snapshots {
        let trusted = model_at(s.height).root_hash();
        assert_eq!(
            offer(&joiner, &s, app_hash_at(&trusted)),
            OfferResult::Reject as i32,
            "{}",
            s.height
        );
    }
    assert_eq!(info(&joiner).0, 0);
}

#[test]
fn a_forging_liar_on_a_paged_store_still_forges() {
    // The forged key's chunk is paged out: the liar reads it back before inserting.
    let mut cfg = config(&temp_home("forged-paged-liar"), 5);
    cfg.byzantine = Some(Lie::Forged);
    cfg.store.cache_bytes = Some(0);
    let liar = App::open(cfg).unwrap();
    init(&liar);
    let mut model = Tree::with_capacity(16).unwrap();
    run_blocks(&[&liar], &mut model, 1, 12, 20);
    let forged = newest(&liar);
    assert_eq!(forged.height, 11);
    let meta = bavl_abci::snapshot::Metadata::decode(&forged.metadata).unwrap();
    assert_ne!(meta.root, model_at(11).root_hash(), "a forgery, not the honest state");
    let mut own = bavl_abci::restore::Restoring::offer(
        forged.height,
        forged.format,
        forged.chunks,
        &forged.hash,
        &forged.metadata,
        &meta.root,
    )
    .unwrap();
    let mut found = false;
    for i in 0..forged.chunks {
        if let bavl_abci::restore::Applied::Complete(tree) = own.apply(i, &load(&liar, &forged, i))
        {
            found = tree.get(FORGED_KEY) == Ok(Some(&b"forged at 11"[..]));
        }
    }
    assert!(found, "the forged key is in the forged snapshot");
}
