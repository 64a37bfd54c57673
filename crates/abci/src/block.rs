//! Blocks: proposals, `FinalizeBlock` (apply, return the bavl root as the app hash) and
//! `Commit` (make that version durable, take a snapshot at the interval).
//!
//! Determinism: a block's transactions are applied in order; one that does not decode
//! (only a faulty proposer includes one: `ProcessProposal` rejects such blocks) gets its
//! error code and changes nothing; a valid one applies all its operations. The app hash
//! depends only on the state, which depends only on the blocks.
//!
//! Crash safety: nothing is durable before `Commit`, which appends one fsynced log record.
//! After a kill -9 of the application, it reopens at the last committed height and
//! CometBFT replays what follows. When CometBFT restarts while this process lives on, a
//! finalized but uncommitted block is dropped (the store reopened) when the next
//! `FinalizeBlock` arrives, so the replayed block applies to the committed state. (`Info`
//! cannot be the signal: RPC's `abci_info` calls it at any time, between `FinalizeBlock`
//! and `Commit` too.)

use tendermint_proto::v0_38::abci as pb;

use crate::app::{App, Node};
use crate::tx::{Op, Tx};

pub(crate) fn init_chain(app: &App, req: pb::RequestInitChain) -> pb::ResponseInitChain {
    let mut node = app.node();
    if req.initial_height > 1 {
        panic!(
            "genesis initial_height {} is not supported: bavl-abci numbers its versions by \
             height from 1",
            req.initial_height
        );
    }
    if node.store.version() != 0 {
        panic!("InitChain on a store at height {}: wrong --home?", node.store.version());
    }
    let preload = match crate::genesis::parse(&req.app_state_bytes) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    // The handshake calls InitChain again after a crash before the first Commit: the
    // state is rebuilt from the genesis each time (deterministic), never trusted from disk.
    // A preload of no keys is the empty state the store already is.
    if let Some(p) = preload.filter(|p| p.keys > 0) {
        let start = std::time::Instant::now();
        let ingest = match preload_into_ingest(app, &node, p) {
            Ok(i) => i,
            Err(e) => panic!("building the genesis state: {e}"),
        };
        let opts = app.cfg().store_options();
        node.reopen_store("writing the genesis state", |home| home.finish_restore(ingest, &opts));
        tracing::info!(
            keys = p.keys,
            seed = p.seed,
            secs = %format!("{:.1}", start.elapsed().as_secs_f64()),
            app_hash = %hex::encode(node.store.root()),
            "genesis state preloaded and written durably"
        );
    }
    pb::ResponseInitChain { app_hash: node.store.root().to_vec().into(), ..Default::default() }
}

/// Builds the genesis preload in a scratch paged store (`<home>/genesis-build/`, deleted
/// first and after), then copies its chunks, each verified against its root, into an
/// ingest of height 0 in the application's directory, as a state sync would: memory is
/// the store's budget and two skeletons, whatever the state's size.
fn preload_into_ingest(
    app: &App,
    node: &Node,
    p: crate::genesis::Preload,
) -> Result<bavl_store::Ingest, String> {
    let cfg = app.cfg();
    let scratch = cfg.home.join("genesis-build");
    let remove = |what: &str| match std::fs::remove_dir_all(&scratch) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{what} {}: {e}", scratch.display()))
        }
        _ => Ok(()),
    };
    remove("removing")?;
    let cache = cfg.store.cache_bytes.unwrap_or(crate::DEFAULT_CACHE_BYTES);
    let store = crate::genesis::build_paged(p, cfg.store.capacity, cache, &scratch)
        .map_err(|e| e.to_string())?;
    let root = store.root();
    let src = crate::snapshot::Source::new(store.latest(), store.page_loader());
    let mut ingest =
        node.home.begin_restore(0, &root, cfg.restore_flush_bytes).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    for j in 0..src.snapshot().chunk_count() {
        if ingest.have(j) {
            continue; // resumed after a crash
        }
        buf.clear();
        src.export_into(j, &mut buf).map_err(|e| e.to_string())?;
        let chunk = bavl_core::verify_chunk::<bavl_core::Sha256>(&root, j, &buf)
            .map_err(|e| format!("chunk {j} of the genesis state: {e}"))?;
        ingest.add_verified(chunk).map_err(|e| e.to_string())?;
    }
    drop((src, store));
    remove("removing")?;
    Ok(ingest)
}

/// The transactions that decode, in order, within `max_tx_bytes`.
pub(crate) fn prepare_proposal(req: pb::RequestPrepareProposal) -> pb::ResponsePrepareProposal {
    let max = usize::try_from(req.max_tx_bytes).unwrap_or(0);
    let mut total = 0usize;
    let mut txs = Vec::with_capacity(req.txs.len());
    for tx in req.txs {
        if Tx::decode(&tx).is_err() || total + tx.len() > max {
            continue;
        }
        total += tx.len();
        txs.push(tx);
    }
    pb::ResponsePrepareProposal { txs }
}

/// Rejects a proposal holding a transaction that does not decode.
pub(crate) fn process_proposal(req: pb::RequestProcessProposal) -> pb::ResponseProcessProposal {
    use pb::response_process_proposal::ProposalStatus;
    let bad = req.txs.iter().position(|tx| Tx::decode(tx).is_err());
    if let Some(i) = bad {
        tracing::warn!(height = req.height, tx = i, "rejecting a proposal with a malformed tx");
    }
    let status = if bad.is_some() { ProposalStatus::Reject } else { ProposalStatus::Accept };
    pb::ResponseProcessProposal { status: status as i32 }
}

pub(crate) fn finalize_block(
    app: &App,
    req: pb::RequestFinalizeBlock,
) -> pb::ResponseFinalizeBlock {
    let start = std::time::Instant::now();
    let arrived = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut node = app.node();
    if node.pending.is_some() {
        discard_uncommitted(app, &mut node);
    }
    let expected = node.store.version() + 1;
    let height = u64::try_from(req.height).unwrap_or(0);
    if height != expected {
        panic!("FinalizeBlock at height {height}, but the store is at {}", expected - 1);
    }
    let mut tx_results = Vec::with_capacity(req.txs.len());
    let mut ops = 0usize;
    for tx in &req.txs {
        tx_results.push(match Tx::decode(tx) {
            Ok(tx) => {
                ops += tx.ops.len();
                apply(&mut node, tx);
                pb::ExecTxResult::default()
            }
            Err(e) => pb::ExecTxResult { code: e.code(), log: e.to_string(), ..Default::default() },
        });
    }
    let root = node.store.working_root();
    node.pending = Some(height);
    node.pending_work = crate::metrics::BlockTimes {
        arrived_unix_ms: arrived,
        txs: req.txs.len(),
        ops,
        finalize: start.elapsed(),
        ..Default::default()
    };
    tracing::debug!(height, txs = req.txs.len(), ops, app_hash = %hex::encode(root), "finalized");
    pb::ResponseFinalizeBlock { tx_results, app_hash: root.to_vec().into(), ..Default::default() }
}

fn apply(node: &mut Node, tx: Tx) {
    for op in tx.ops {
        let r = match op {
            Op::Set { key, value } => node.store.insert(&key, &value).map(|_| ()),
            Op::Delete { key } => node.store.remove(&key).map(|_| ()),
        };
        // Keys and values were checked against bavl's limits when decoding: only a
        // failed store (I/O) can refuse, and then nothing can go on.
        if let Err(e) = r {
            panic!("the store refused a valid operation: {e}");
        }
    }
}

pub(crate) fn commit(app: &App) -> pb::ResponseCommit {
    let start = std::time::Instant::now();
    let mut node = app.node();
    let Some(height) = node.pending.take() else {
        panic!("Commit without FinalizeBlock");
    };
    let (version, root) = match node.store.commit() {
        Ok(v) => v,
        Err(e) => panic!("committing height {height}: {e}"),
    };
    if version != height {
        panic!("committed version {version} for height {height}: the store and the chain disagree");
    }
    let interval = app.cfg().snapshot_interval;
    // A forging liar advertises its forgeries one height (or several) after each snapshot
    // height, so that a joiner, which tries the newest snapshot first, is offered a
    // forgery first.
    let offsets = app.cfg().snapshot_offsets();
    let due = interval > 0
        && offsets.into_iter().any(|k| version > k && (version - k).is_multiple_of(interval));
    node.log_since_checkpoint += node.store.last_commit_timing().log_bytes;
    let mut times = std::mem::take(&mut node.pending_work);
    if due {
        // Makes the version a checkpoint itself (a paged store).
        let at = std::time::Instant::now();
        crate::statesync::take_snapshot(app, &mut node, version);
        times.snapshot = at.elapsed();
    } else {
        maybe_checkpoint(app, &mut node);
    }
    tracing::debug!(height, app_hash = %hex::encode(root), "committed");
    times.commit = start.elapsed();
    node.window.record(times.txs, times.ops, times.finalize + times.commit);
    if let Some(log) = node.block_log.as_mut() {
        log.record(height, &times);
    }
    let every = if interval > 0 { interval } else { 100 };
    node.window.maybe_report(height, every);
    pb::ResponseCommit { retain_height: 0 }
}

/// Applies the store's checkpoint policy ([`crate::Config::store`]; the store itself is
/// opened with `Manual`): a checkpoint when the log committed since the last one exceeds
/// `max(min_log_bytes, log_ratio × the last checkpoint's bytes)`, except while a paged
/// store's snapshot is being exported (its version's chunk files must stay until the
/// export has read them: `crate::snapshots`).
fn maybe_checkpoint(app: &App, node: &mut Node) {
    node.snapshots.poll(false);
    let bavl_store::CheckpointPolicy::Auto { log_ratio, min_log_bytes } =
        app.cfg().store.checkpoint
    else {
        return;
    };
    if node.snapshots.exporting() && node.store.page_loader().is_some() {
        return;
    }
    let last = node.store.last_checkpoint_report().map_or(0, |r| r.bytes);
    let due = ((log_ratio * last as f64) as u64).max(min_log_bytes);
    if node.log_since_checkpoint < due || node.store.checkpoint_running().is_some() {
        return;
    }
    match node.store.checkpoint() {
        Ok(Some(_)) => node.log_since_checkpoint = 0,
        Ok(None) => {}
        Err(e) => panic!("checkpointing at height {}: {e}", node.store.version()),
    }
}

/// Drops a finalized, uncommitted block by reopening the store at its last commit.
pub(crate) fn discard_uncommitted(app: &App, node: &mut Node) {
    let height = node.pending.take();
    tracing::warn!(?height, "dropping a finalized block that was never committed");
    let opts = app.cfg().store_options();
    node.reopen_store("reopening the store", |home| -> Result<_, crate::home::HomeError> {
        Ok(bavl_store::Store::open(home.current()?, opts)?)
    });
}
