//! The four snapshot calls: serving retained versions as format-1 snapshots, and
//! restoring one bundle at a time, each verified against the trusted app hash.
//!
//! Taking a snapshot at `Commit` takes the committed version's O(1) snapshot and hands
//! it to a background export ([`crate::snapshots`]), which writes its bundles to a file
//! the node serves from then on, across restarts too. A restore keeps verified chunks in
//! memory and, at the last bundle, writes the tree as a new store (synced) and switches
//! to it ([`crate::home`]); `Info` then reports the snapshot's height and app hash.

#[cfg(feature = "test-rigs")]
use std::sync::Arc;

#[cfg(feature = "test-rigs")]
use bavl_core::Snapshot;
use tendermint_proto::v0_38::abci as pb;

use crate::app::{App, Node};
#[cfg(feature = "test-rigs")]
use crate::baseline::{BaselineRestoring, Export, FORMAT_BASELINE};
#[cfg(feature = "test-rigs")]
use crate::byzantine::{self, Lie};
#[cfg(feature = "test-rigs")]
use crate::restore::NullRestoring;
use crate::restore::{Applied, OfferError, Restorer, Restoring};
use crate::snapshot::{Source, FORMAT, MAX_BUNDLE_BYTES};
use crate::snapshots::{Form, Held};

impl Held {
    fn describe(&self) -> pb::Snapshot {
        let (format, hash, metadata) = match &self.form {
            Form::File(f) => (FORMAT, f.meta.hash(self.height), f.meta.encode()),
            #[cfg(feature = "test-rigs")]
            Form::Baseline(e) => (FORMAT_BASELINE, e.hash(), e.metadata.clone()),
        };
        let chunks = self.chunks() as u32;
        pb::Snapshot {
            height: self.height,
            format,
            chunks,
            hash: hash.to_vec().into(),
            metadata: metadata.into(),
        }
    }

    fn format(&self) -> u32 {
        match self.form {
            Form::File(_) => FORMAT,
            #[cfg(feature = "test-rigs")]
            Form::Baseline(_) => FORMAT_BASELINE,
        }
    }

    fn chunks(&self) -> u64 {
        match &self.form {
            Form::File(f) => f.bundles(),
            #[cfg(feature = "test-rigs")]
            Form::Baseline(e) => e.chunks.len() as u64,
        }
    }

    /// ABCI chunk `i`, if it exists and reads back intact.
    fn chunk(&self, i: u64) -> Option<Vec<u8>> {
        match &self.form {
            Form::File(f) => f.bundle(i).unwrap_or_else(|e| {
                // CometBFT gets no chunk and asks another peer; never damaged bytes.
                tracing::error!(height = self.height, chunk = i, "bundle not served: {e}");
                None
            }),
            #[cfg(feature = "test-rigs")]
            Form::Baseline(e) => e.chunks.get(usize::try_from(i).ok()?).cloned(),
        }
    }
}

/// Takes the snapshot of `height`, just committed: exported to its file in the
/// background ([`crate::snapshots`]). For a paged store the version is made a
/// checkpoint first, so that every body it names is in a sealed chunk file that no
/// deletion touches before the next checkpoint, which waits for the export to end.
pub(crate) fn take_snapshot(app: &App, node: &mut Node, height: u64) {
    // A forging liar advertises a forgery at each of several consecutive heights: it
    // waits for the previous export rather than skip one (a test rig: its commits stall).
    #[cfg(feature = "test-rigs")]
    let wait = *app.cfg().snapshot_offsets().end() > 1;
    #[cfg(not(feature = "test-rigs"))]
    let wait = false;
    node.snapshots.poll(wait);
    if node.snapshots.exporting() {
        tracing::warn!(height, "snapshot skipped: the previous export still runs");
        return;
    }
    let snap = node.store.latest();
    #[cfg(feature = "test-rigs")]
    let snap = forge(app, node, snap, height);
    #[cfg(feature = "test-rigs")]
    if app.cfg().format() == FORMAT_BASELINE {
        let src = Source::new(snap, node.store.page_loader());
        return take_baseline(node, height, &src);
    }
    if node.store.page_loader().is_some() {
        let made = node.store.wait_checkpoint().and_then(|_| node.store.checkpoint());
        if let Err(e) = made {
            panic!("checkpointing the snapshot height {height}: {e}");
        }
        node.log_since_checkpoint = 0;
    }
    // Taken after the checkpoint started: it knows the chunk file the checkpoint
    // completes, where the version's bodies that had none get their location.
    let loader = node.store.page_loader();
    node.snapshots.start(height, Source::new(snap, loader), app.cfg().bundle_bytes);
}

/// The baseline's snapshot (a comparison rig): the whole state compressed on the
/// committing thread and held in memory.
#[cfg(feature = "test-rigs")]
fn take_baseline(node: &mut Node, height: u64, snap: &Source) {
    let start = std::time::Instant::now();
    match Export::new(snap) {
        Ok(export) => {
            let held =
                Held::new(height, crate::snapfile::unix_ms(), Form::Baseline(Arc::new(export)));
            tracing::info!(
                height,
                format = held.format(),
                bundles = held.chunks(),
                micros = start.elapsed().as_micros() as u64,
                "snapshot taken"
            );
            node.snapshots.add(held);
        }
        Err(e) => tracing::error!(height, "no baseline snapshot: {e}"),
    }
}

/// A forging liar's snapshot: the true state plus [`byzantine::FORGED_KEY`].
#[cfg(feature = "test-rigs")]
fn forge(app: &App, node: &Node, honest: Snapshot, height: u64) -> Snapshot {
    let (Some(Lie::Forged | Lie::ForgedMany), key) = (app.cfg().byzantine, byzantine::FORGED_KEY)
    else {
        return honest;
    };
    // The chunks the insert needs are read back first (a paged store): an insert that
    // meets an absent chunk is refused, and the "forgery" would be the honest state.
    let mut snap = honest;
    loop {
        let mut tree = snap.to_tree();
        let needs = tree.absent_for_insert(key);
        if needs.is_empty() {
            let forged = tree.insert(key, format!("forged at {height}").as_bytes());
            forged.unwrap_or_else(|e| panic!("forging a snapshot: {e}"));
            return tree.snapshot();
        }
        snap = match node.store.load_pages(&snap, &needs) {
            Ok(s) => s,
            Err(e) => panic!("forging a snapshot: {e}"),
        };
    }
}

pub(crate) fn list_snapshots(app: &App) -> pb::ResponseListSnapshots {
    let mut node = app.node();
    node.snapshots.poll(false);
    let snapshots = node.snapshots.held().iter().map(Held::describe).collect();
    pb::ResponseListSnapshots { snapshots }
}

pub(crate) fn load_snapshot_chunk(
    app: &App,
    req: pb::RequestLoadSnapshotChunk,
) -> pb::ResponseLoadSnapshotChunk {
    let held = app.node().snapshots.find(req.height);
    let Some(held) = held.filter(|h| req.format == h.format()) else {
        return pb::ResponseLoadSnapshotChunk::default();
    };
    *held.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    let i = u64::from(req.chunk);
    let Some(bytes) = held.chunk(i) else {
        return pb::ResponseLoadSnapshotChunk::default();
    };
    if bytes.len() > MAX_BUNDLE_BYTES {
        tracing::error!(height = req.height, chunk = i, bytes = bytes.len(), "bundle over 16 MiB");
        return pb::ResponseLoadSnapshotChunk::default();
    }
    #[cfg(feature = "test-rigs")]
    let bytes = lie(app, &held, i, bytes);
    pb::ResponseLoadSnapshotChunk { chunk: bytes.into() }
}

/// What a lying server serves instead of bundle `i` of `held`.
#[cfg(feature = "test-rigs")]
fn lie(app: &App, held: &Held, i: u64, honest: Vec<u8>) -> Vec<u8> {
    let Some(lie) = app.cfg().byzantine else { return honest };
    let other = app.node().snapshots.held().iter().find(|s| s.height != held.height).cloned();
    let other_bundle = match other {
        Some(o) => o.chunk(i),
        None => held.chunk((i + 1) % held.chunks()),
    };
    tracing::warn!(height = held.height, chunk = i, %lie, "serving a lying chunk");
    byzantine::corrupt(lie, honest, other_bundle)
}

pub(crate) fn offer_snapshot(
    app: &App,
    req: pb::RequestOfferSnapshot,
) -> pb::ResponseOfferSnapshot {
    use pb::response_offer_snapshot::Result as R;
    let Some(s) = req.snapshot else {
        return pb::ResponseOfferSnapshot { result: R::Reject as i32 };
    };
    let wanted = app.cfg().format();
    let offered = match s.format {
        f if f != wanted => Err(OfferError::Format(f)),
        #[cfg(feature = "test-rigs")]
        _ if app.cfg().restore_null => {
            NullRestoring::offer(s.height, s.chunks, &req.app_hash).map(Restorer::Null)
        }
        #[cfg(feature = "test-rigs")]
        FORMAT_BASELINE => BaselineRestoring::offer(s.height, s.chunks, &s.metadata, &req.app_hash)
            .map(Restorer::Baseline)
            .map_err(OfferError::Metadata),
        _ => Restoring::offer(s.height, s.format, s.chunks, &s.hash, &s.metadata, &req.app_hash)
            .map(Restorer::Bavl),
    };
    let mut node = app.node();
    node.sync.offered(offered.is_err());
    let result = match offered {
        Ok(r) => {
            // The previous restore's ingest (and its directory's lock) goes first.
            node.restoring = None;
            let r = match r {
                Restorer::Bavl(r) => {
                    Restorer::Bavl(into_store(&node, r, app.cfg().restore_flush_bytes))
                }
                #[cfg(feature = "test-rigs")]
                other => other,
            };
            tracing::info!(height = s.height, bundles = s.chunks, "snapshot accepted, restoring");
            node.restoring = Some(r);
            R::Accept
        }
        Err(e) => {
            tracing::warn!(height = s.height, "snapshot rejected: {e}");
            match e {
                OfferError::Format(_) => R::RejectFormat,
                _ => R::Reject,
            }
        }
    };
    pb::ResponseOfferSnapshot { result: result as i32 }
}

pub(crate) fn apply_snapshot_chunk(
    app: &App,
    req: pb::RequestApplySnapshotChunk,
) -> pb::ResponseApplySnapshotChunk {
    use pb::response_apply_snapshot_chunk::Result as R;
    let answer =
        |result: R| pb::ResponseApplySnapshotChunk { result: result as i32, ..Default::default() };
    let mut node = app.node();
    let Some(restoring) = node.restoring.as_mut() else {
        tracing::warn!(chunk = req.index, "ApplySnapshotChunk with no snapshot accepted");
        return answer(R::Abort);
    };
    let height = restoring.height();
    let applied = restoring.apply(req.index, &req.chunk);
    node.sync.bytes_received += req.chunk.len() as u64;
    match applied {
        Applied::Accepted { bundles_left } => {
            node.sync.bundles_kept += 1;
            tracing::info!(height, chunk = req.index, bytes = req.chunk.len(), bundles_left, sender = %req.sender, "bundle verified and kept");
            answer(R::Accept)
        }
        Applied::Duplicate => answer(R::Accept),
        Applied::Retry { reason } => {
            node.sync.bundles_refused += 1;
            tracing::warn!(height, chunk = req.index, sender = %req.sender, "bundle rejected, refetching it from another peer: {reason}");
            pb::ResponseApplySnapshotChunk {
                result: R::Retry as i32,
                refetch_chunks: vec![req.index],
                reject_senders: if req.sender.is_empty() { vec![] } else { vec![req.sender] },
            }
        }
        Applied::RejectSnapshot { reason } => {
            node.sync.snapshots_rejected += 1;
            tracing::warn!(height, "snapshot rejected: {reason}");
            node.restoring = None;
            answer(R::RejectSnapshot)
        }
        Applied::Failed { reason } => panic!("restoring the snapshot of height {height}: {reason}"),
        Applied::Ingested(ingest) => {
            let Some(restoring) = node.restoring.take() else { return answer(R::Abort) };
            node.sync.bundles_kept += 1;
            let opts = app.cfg().store_options();
            let what = format!("finishing the restored state at height {height}");
            node.reopen_store(&what, |home| home.finish_restore(*ingest, &opts));
            installed(&mut node, &restoring);
            node.sync.write(&app.cfg().home, height, restoring.mode(), restoring.bytes());
            answer(R::Accept)
        }
        Applied::Complete(mut tree) => {
            let Some(restoring) = node.restoring.take() else { return answer(R::Abort) };
            node.sync.bundles_kept += 1;
            install(app, &mut node, &mut tree, &restoring);
            node.sync.write(&app.cfg().home, height, restoring.mode(), restoring.bytes());
            answer(R::Accept)
        }
        #[cfg(feature = "test-rigs")]
        Applied::CompleteNull => {
            let Some(Restorer::Null(r)) = node.restoring.take() else { return answer(R::Abort) };
            node.sync.bundles_kept += 1;
            tracing::info!(height, bytes = r.bytes, "null restore: every bundle accepted unread");
            node.sync.write(&app.cfg().home, height, "null", r.bytes);
            node.null_state = Some((height, r.app_hash));
            answer(R::Accept)
        }
    }
}

/// Restores `r` into a store built in the application's directory (resuming what an
/// interrupted restore of the same snapshot kept). A failure to start it is fatal, as a
/// store failure is.
fn into_store(node: &Node, r: Restoring, flush_bytes: u64) -> Restoring {
    let (height, root) = (r.height, r.root());
    let ingest = match node.home.begin_restore(height, &root, flush_bytes) {
        Ok(i) => i,
        Err(e) => panic!("starting the restore of height {height}: {e}"),
    };
    let r = r.into_store(ingest);
    if r.bundles_kept() > 0 {
        tracing::info!(height, bundles = r.bundles_kept(), "resuming an interrupted restore");
    }
    r
}

/// Writes a tree restored in memory (the baseline's) as the live store.
fn install(app: &App, node: &mut Node, tree: &mut bavl_core::Tree, r: &Restorer) {
    let (height, opts) = (r.height(), app.cfg().store_options());
    let what = format!("writing the restored state at height {height}");
    node.reopen_store(&what, |home| home.install(tree, height, &opts));
    installed(node, r);
}

/// The restored store is live: the node goes on from its height.
fn installed(node: &mut Node, r: &Restorer) {
    let height = r.height();
    node.pending = None;
    node.window = crate::metrics::Window::new(height + 1);
    tracing::info!(
        height,
        app_hash = %hex::encode(node.store.root()),
        bytes = r.bytes(),
        "snapshot restored and written durably"
    );
}
