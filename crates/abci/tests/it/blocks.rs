//! The consensus, mempool and query handlers, driven directly (no CometBFT): app hashes
//! against a model, durability across a reopen (what a kill -9 leaves), the replay of a
//! block finalized but never committed, transaction codes and proofs.

use crate::support::*;
use bavl_abci::tx::{MAX_TX_BYTES, TX_TAG};
use bavl_abci::{App, Tx};
use bavl_core::{verify_absence, verify_membership, Sha256, Tree};
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

fn tree16() -> Tree {
    Tree::with_capacity(16).unwrap()
}

#[test]
fn blocks_apply_deterministically_and_survive_a_reopen() {
    let home = temp_home("blocks");
    let app = App::open(config(&home, 0)).unwrap();
    let genesis = init(&app).app_hash.to_vec();
    let mut model = tree16();
    assert_eq!(genesis, model.root_hash().to_vec());
    run_blocks(&[&app], &mut model, 1, 12, 5);
    let root = model.root_hash().to_vec();
    assert_eq!(info(&app), (12, root.clone()));
    // Block 13 finalized, never committed: what a kill -9 between the two leaves.
    let block = block_txs(13, 5);
    finalize(&app, 13, &block);
    drop(app);
    let app = App::open(config(&home, 0)).unwrap();
    assert_eq!(info(&app), (12, root));
    // CometBFT replays block 13: the same app hash as the model's.
    run_blocks(&[&app], &mut model, 13, 14, 5);
    assert_eq!(info(&app), (14, model.root_hash().to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn a_new_handshake_drops_a_finalized_uncommitted_block() {
    let home = temp_home("handshake");
    let app = App::open(config(&home, 0)).unwrap();
    init(&app);
    let mut model = tree16();
    run_blocks(&[&app], &mut model, 1, 3, 2);
    // CometBFT finalizes block 4 with a key, then dies; the application lives on.
    finalize(&app, 4, &[Tx::set(b"ghost", b"1")]);
    assert_eq!(info(&app), (3, model.root_hash().to_vec()));
    // The replayed block 4 applies to the committed state only: no ghost.
    let block = vec![Tx::set(b"real", b"2")];
    let r = finalize(&app, 4, &block);
    assert_eq!(&r.app_hash[..], &model_apply(&mut model, &block)[..]);
    app.commit();
    assert_eq!(app.get(b"ghost").unwrap(), None);
    assert_eq!(app.get(b"real").unwrap(), Some(b"2".to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn info_between_finalize_and_commit_changes_nothing() {
    // RPC's abci_info asks the app at any time, on the query connection.
    let home = temp_home("info-mid-block");
    let app = App::open(config(&home, 0)).unwrap();
    init(&app);
    let mut model = tree16();
    run_blocks(&[&app], &mut model, 1, 2, 2);
    let committed = model.root_hash().to_vec();
    let block = block_txs(3, 2);
    let want = model_apply(&mut model, &block);
    assert_eq!(&finalize(&app, 3, &block).app_hash[..], &want[..]);
    assert_eq!(info(&app), (2, committed));
    app.commit();
    assert_eq!(info(&app), (3, want.to_vec()));
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn check_tx_and_proposals_refuse_malformed_transactions() {
    let home = temp_home("checktx");
    let app = App::open(config(&home, 0)).unwrap();
    let check = |tx: Vec<u8>| app.check_tx(pb::RequestCheckTx { tx: tx.into(), r#type: 0 });
    let good = Tx::set(b"k", b"v").encode();
    assert_eq!(check(good.clone()).code, 0);
    let cases =
        [(vec![], 5), (vec![0x42, 1], 2), (vec![TX_TAG, 1, 1], 3), (vec![0; MAX_TX_BYTES + 1], 1)];
    for (tx, code) in cases {
        let r = check(tx);
        assert_eq!(r.code, code, "{}", r.log);
        assert!(!r.log.is_empty());
    }
    let txs = vec![good.clone().into(), vec![TX_TAG].into(), good.clone().into()];
    let prepared = app.prepare_proposal(pb::RequestPrepareProposal {
        txs: txs.clone(),
        max_tx_bytes: (good.len() * 2) as i64,
        ..Default::default()
    });
    assert_eq!(prepared.txs.len(), 2);
    let accept = pb::response_process_proposal::ProposalStatus::Accept as i32;
    let process =
        |txs| app.process_proposal(pb::RequestProcessProposal { txs, ..Default::default() });
    assert_eq!(process(prepared.txs).status, accept);
    assert_ne!(process(txs.clone()).status, accept);
    // FinalizeBlock still applies the valid ones, deterministically, and codes the other.
    init(&app);
    let r = app.finalize_block(pb::RequestFinalizeBlock { txs, height: 1, ..Default::default() });
    let codes: Vec<u32> = r.tx_results.iter().map(|t| t.code).collect();
    assert_eq!(codes, vec![0, 3, 0]);
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn queries_carry_proofs_that_verify_against_the_app_hash() {
    let home = temp_home("query");
    let app = App::open(config(&home, 0)).unwrap();
    init(&app);
    let mut model = tree16();
    run_blocks(&[&app], &mut model, 1, 3, 3);
    let v3 = model.root_hash();
    let block = vec![Tx::set(b"key00001", b"changed")];
    run_one(&app, &mut model, 4, &block);
    let ask = |key: &[u8], height: i64| {
        app.query(pb::RequestQuery {
            data: key.to_vec().into(),
            path: "/key".into(),
            height,
            prove: true,
        })
    };
    let r = ask(b"key00001", 0);
    assert_eq!((r.code, r.height, &r.value[..]), (0, 4, &b"changed"[..]));
    let op = &r.proof_ops.as_ref().unwrap().ops[0];
    assert_eq!(op.r#type, bavl_abci::query::OP_MEMBERSHIP);
    let _ =
        verify_membership::<Sha256>(&model.root_hash(), b"key00001", b"changed", &op.data).unwrap();
    // An older retained height, against its own root.
    let r = ask(b"key00001", 3);
    let op = &r.proof_ops.as_ref().unwrap().ops[0];
    if r.log == "exists" {
        let _ = verify_membership::<Sha256>(&v3, b"key00001", &r.value, &op.data).unwrap();
    } else {
        let _ = verify_absence::<Sha256>(&v3, b"key00001", &op.data).unwrap();
    }
    let r = ask(b"nope", 0);
    assert_eq!((r.code, r.log.as_str(), r.value.len()), (0, "absent", 0));
    let op = &r.proof_ops.as_ref().unwrap().ops[0];
    assert_eq!(op.r#type, bavl_abci::query::OP_ABSENCE);
    let _ = verify_absence::<Sha256>(&model.root_hash(), b"nope", &op.data).unwrap();
    assert!(verify_absence::<Sha256>(&v3, b"nope", &op.data).is_err());
    assert_eq!(ask(b"k", 99).code, 2);
    assert_eq!(ask(b"", 0).code, 3);
    let bad_path = app.query(pb::RequestQuery { path: "/store".into(), ..Default::default() });
    assert_eq!(bad_path.code, 1);
    std::fs::remove_dir_all(&home).unwrap();
}

fn run_one(app: &App, model: &mut Tree, h: u64, block: &[Tx]) {
    let want = model_apply(model, block);
    assert_eq!(&finalize(app, h, block).app_hash[..], &want[..]);
    app.commit();
}

#[test]
fn reads_and_queries_of_a_paged_state_read_chunks_back_and_verify() {
    // No body kept between blocks: every read and proof below needs chunks read back.
    let home = temp_home("query-paged");
    let mut cfg = config(&home, 0);
    cfg.store.cache_bytes = Some(0);
    let app = App::open(cfg).unwrap();
    init(&app);
    let mut model = tree16();
    run_blocks(&[&app], &mut model, 1, 4, 5);
    let root = model.root_hash();
    let before = app.store_stats().unwrap().paging.expect("a paged store").loads;
    for i in (0..3000).step_by(97) {
        let key = format!("key{i:05}").into_bytes();
        let want = model.get(&key).unwrap().map(<[u8]>::to_vec);
        assert_eq!(app.get(&key).unwrap(), want);
        let r = app.query(pb::RequestQuery {
            data: key.clone().into(),
            path: "/key".into(),
            height: 0,
            prove: true,
        });
        assert_eq!(r.code, 0, "{}", r.log);
        let op = &r.proof_ops.as_ref().unwrap().ops[0];
        match &want {
            Some(v) => {
                assert_eq!(&r.value[..], &v[..]);
                let _ = verify_membership::<Sha256>(&root, &key, v, &op.data).unwrap();
            }
            None => {
                let _ = verify_absence::<Sha256>(&root, &key, &op.data).unwrap();
            }
        }
    }
    // The reads went to the snapshots' copies, not the working tree: loads by the store
    // itself did not grow (queries read back outside the lock, through a PageLoader).
    let after = app.store_stats().unwrap().paging.expect("a paged store");
    assert_eq!(after.loads, before, "{after:?}");
    assert_eq!(after.resident_bytes, 0, "{after:?}");
    assert!(after.evictions > 0, "{after:?}");
    std::fs::remove_dir_all(&home).unwrap();
}
