//! The four snapshot calls: serving retained versions as format-1 snapshots, and
//! restoring one bundle at a time, each verified against the trusted app hash.
//!
//! Taking a snapshot at `Commit` keeps the committed version's O(1) [`Snapshot`] and plans
//! its bundles from 16 sampled chunks ([`crate::snapshot::plan`]); nothing is exported or
//! written. Snapshots live in memory: a restarted node serves them again from the next
//! snapshot height on. A restore keeps verified chunks in memory and, at the last bundle,
//! writes the tree as a new store (synced) and switches to it ([`crate::home`]); `Info`
//! then reports the snapshot's height and app hash.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
use crate::snapshot::{encode_bundle, plan, Metadata, FORMAT, MAX_BUNDLE_BYTES};

/// A snapshot that served a chunk this recently is kept beyond `snapshot_keep` (a joiner
/// is still restoring it), up to [`EXTRA_KEPT`] more snapshots.
pub const SERVING_GRACE: Duration = Duration::from_secs(120);
/// How many snapshots beyond `snapshot_keep` the grace may keep (bounded memory even if
/// peers keep asking for old ones).
pub const EXTRA_KEPT: usize = 2;

/// How a held snapshot is cut into ABCI chunks.
#[derive(Clone)]
pub(crate) enum Form {
    /// Format 1: bundles of bavl chunks, encoded when asked for.
    Bavl(Metadata),
    /// Format 2, the baseline: a compressed stream exported at the snapshot height.
    #[cfg(feature = "test-rigs")]
    Baseline(Arc<Export>),
}

/// A snapshot this node serves.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) height: u64,
    pub(crate) form: Form,
    pub(crate) snap: Snapshot,
    /// When it last served a chunk.
    pub(crate) served: Arc<Mutex<Option<Instant>>>,
}

impl Held {
    fn describe(&self) -> pb::Snapshot {
        let (format, hash, metadata) = match &self.form {
            Form::Bavl(m) => (FORMAT, m.hash(self.height), m.encode()),
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
            Form::Bavl(_) => FORMAT,
            #[cfg(feature = "test-rigs")]
            Form::Baseline(_) => FORMAT_BASELINE,
        }
    }

    fn chunks(&self) -> u64 {
        match &self.form {
            Form::Bavl(m) => m.bundles(),
            #[cfg(feature = "test-rigs")]
            Form::Baseline(e) => e.chunks.len() as u64,
        }
    }

    /// ABCI chunk `i`, if it exists.
    fn chunk(&self, i: u64) -> Option<Vec<u8>> {
        match &self.form {
            Form::Bavl(m) => encode_bundle(&self.snap, m, i).unwrap_or_else(|e| {
                // CometBFT gets no chunk and asks another peer; never a short bundle.
                eprintln!("bavl-abci: bundle {i} cannot be encoded: {e}");
                None
            }),
            #[cfg(feature = "test-rigs")]
            Form::Baseline(e) => e.chunks.get(usize::try_from(i).ok()?).cloned(),
        }
    }
}

pub(crate) fn take_snapshot(app: &App, node: &mut Node, height: u64) {
    let start = std::time::Instant::now();
    let snap = node.store.latest();
    #[cfg(feature = "test-rigs")]
    let snap = forge(app, snap, height);
    let Some(meta) = plan(&snap, app.cfg().bundle_bytes) else {
        tracing::info!(height, "no snapshot of an empty state");
        return;
    };
    let form = match app.cfg().format() {
        #[cfg(feature = "test-rigs")]
        FORMAT_BASELINE => match Export::new(&snap) {
            Ok(export) => Form::Baseline(Arc::new(export)),
            Err(e) => {
                tracing::error!(height, "no baseline snapshot: {e}");
                return;
            }
        },
        _ => Form::Bavl(meta),
    };
    let held = Held { height, form, snap, served: Default::default() };
    tracing::info!(
        height,
        format = held.format(),
        bundles = held.chunks(),
        micros = start.elapsed().as_micros() as u64,
        "snapshot taken"
    );
    node.snapshots.push(held);
    let forgeries = *app.cfg().snapshot_offsets().end() as usize;
    prune(&mut node.snapshots, app.cfg().snapshot_keep.max(forgeries).max(1));
}

/// A forging liar's snapshot: the true state plus [`byzantine::FORGED_KEY`].
#[cfg(feature = "test-rigs")]
fn forge(app: &App, honest: Snapshot, height: u64) -> Snapshot {
    match app.cfg().byzantine {
        Some(Lie::Forged | Lie::ForgedMany) => {
            let mut tree = honest.to_tree();
            let _ = tree.insert(byzantine::FORGED_KEY, format!("forged at {height}").as_bytes());
            tree.snapshot()
        }
        _ => honest,
    }
}

/// Drops the oldest snapshots beyond `keep`, except those a joiner is still restoring
/// (served within [`SERVING_GRACE`]; at most [`EXTRA_KEPT`] of them).
pub(crate) fn prune(held: &mut Vec<Held>, keep: usize) {
    while held.len() > keep {
        let serving = |h: &Held| {
            let last = *h.served.lock().unwrap_or_else(|p| p.into_inner());
            last.is_some_and(|t| t.elapsed() < SERVING_GRACE)
        };
        let old = held.len() - keep;
        let victim =
            if old > EXTRA_KEPT { Some(0) } else { held[..old].iter().position(|h| !serving(h)) };
        let Some(i) = victim else { break };
        let h = held.remove(i);
        tracing::info!(height = h.height, "snapshot dropped");
    }
}

pub(crate) fn list_snapshots(app: &App) -> pb::ResponseListSnapshots {
    let node = app.node();
    pb::ResponseListSnapshots { snapshots: node.snapshots.iter().map(Held::describe).collect() }
}

pub(crate) fn load_snapshot_chunk(
    app: &App,
    req: pb::RequestLoadSnapshotChunk,
) -> pb::ResponseLoadSnapshotChunk {
    let held = app.node().snapshots.iter().find(|s| s.height == req.height).cloned();
    let Some(held) = held.filter(|h| req.format == h.format()) else {
        return pb::ResponseLoadSnapshotChunk::default();
    };
    *held.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
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
    let other = app.node().snapshots.iter().find(|s| s.height != held.height).cloned();
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

fn install(app: &App, node: &mut Node, tree: &mut bavl_core::Tree, r: &Restorer) {
    let (height, opts) = (r.height(), app.cfg().store.clone());
    let what = format!("writing the restored state at height {height}");
    node.reopen_store(&what, |home| home.install(tree, height, &opts));
    node.pending = None;
    node.window = crate::metrics::Window::new(height + 1);
    tracing::info!(
        height,
        app_hash = %hex::encode(node.store.root()),
        bytes = r.bytes(),
        "snapshot restored and written durably"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(height: u64, served: Option<Instant>) -> Held {
        let mut t = bavl_core::Tree::new();
        t.insert(&height.to_be_bytes(), b"v").unwrap();
        let snap = t.snapshot();
        let meta = plan(&snap, 1 << 20).unwrap();
        Held { height, form: Form::Bavl(meta), snap, served: Arc::new(Mutex::new(served)) }
    }

    fn heights(h: &[Held]) -> Vec<u64> {
        h.iter().map(|h| h.height).collect()
    }

    #[test]
    fn a_snapshot_being_restored_outlives_keep_within_bounds() {
        let now = Some(Instant::now());
        let mut h = vec![held(10, None), held(20, None), held(30, None)];
        prune(&mut h, 2);
        assert_eq!(heights(&h), vec![20, 30]);
        // 20 is being served: kept when 40 comes, dropped once 2 more are beyond keep.
        *h[0].served.lock().unwrap() = now;
        h.push(held(40, None));
        prune(&mut h, 2);
        assert_eq!(heights(&h), vec![20, 30, 40]);
        h.push(held(50, now));
        prune(&mut h, 2);
        assert_eq!(heights(&h), vec![20, 40, 50]);
        for x in [60, 70, 80] {
            h.push(held(x, now));
            prune(&mut h, 2);
        }
        assert_eq!(h.len(), 2 + EXTRA_KEPT);
        assert_eq!(heights(&h), vec![50, 60, 70, 80]);
    }
}
