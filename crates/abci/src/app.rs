//! The application: shared state behind the four ABCI connections, and the dispatch of
//! ABCI 0.38 requests to the modules that answer them.
//!
//! CometBFT opens four connections (consensus, mempool, query, snapshot) and
//! `tendermint-abci` serves each on its own thread with a clone of [`App`]. Everything
//! that changes state takes one mutex; reading a version (queries, snapshot chunks)
//! takes it only to clone an O(1) [`bavl_core::Snapshot`] and works outside it.
//!
//! Invariant: the store's version is the last committed block height, and its root is
//! that block's app hash. A store failure (I/O, a poisoned log) cannot be answered in
//! ABCI: the handler panics with the cause (the `bavl-abci` binary then exits, CometBFT
//! stops with it, and a restart recovers from the last durable version).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use bavl_store::{CheckpointPolicy, Options, Store};
use tendermint_abci::Application;
use tendermint_proto::v0_38::abci as pb;

#[cfg(feature = "test-rigs")]
use crate::byzantine::Lie;
use crate::home::{Home, HomeError};
use crate::restore::Restorer;
use crate::snapshots::{Retention, Snapshots};
use crate::tx::Tx;

/// How the application runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The application's directory (see [`crate::home`]).
    pub home: PathBuf,
    /// A snapshot every this many heights (0: none).
    pub snapshot_interval: u64,
    /// How many snapshots to keep (the newest; one still being restored by a joiner is
    /// kept a while longer: `docs/chain.md` §5).
    pub snapshot_keep: usize,
    /// Snapshots taken less than this many seconds ago are kept too (0: by count only).
    pub snapshot_keep_secs: u64,
    /// The store's options; `capacity` must be the same on every node of a chain (the
    /// root commits to it). By default paged with [`DEFAULT_CACHE_BYTES`] of chunk bodies
    /// ([`Config::new`]). Its checkpoint policy is applied by the application, which
    /// opens the store with [`CheckpointPolicy::Manual`] (`docs/chain.md` §6).
    pub store: Options,
    /// `ResponseInfo.app_version`.
    pub app_version: u64,
    /// The size a snapshot bundle (ABCI chunk) aims at: the same on every node of a
    /// chain, or their snapshots differ and each is fetched from its own servers only.
    pub bundle_bytes: u64,
    /// The snapshot format served and restored: [`crate::snapshot::FORMAT`] (1, bavl's),
    /// or [`crate::baseline::FORMAT_BASELINE`] (2, the Cosmos-SDK-style baseline, for
    /// comparisons only). Without `test-rigs`, always format 1.
    #[cfg(feature = "test-rigs")]
    pub snapshot_format: u32,
    /// Serve lying snapshots (tests only; see [`crate::byzantine`]).
    #[cfg(feature = "test-rigs")]
    pub byzantine: Option<Lie>,
    /// Restore nothing: accept every bundle unread (a measuring instrument for the join
    /// time CometBFT itself needs; see [`crate::restore::NullRestoring`]).
    #[cfg(feature = "test-rigs")]
    pub restore_null: bool,
    /// A state sync's restore makes the chunks it kept durable (resumable after a crash)
    /// every this many bytes of chunk bodies (`bavl_store::IngestOptions::flush_bytes`).
    pub restore_flush_bytes: u64,
    /// Append a line per committed block to this CSV file ([`crate::metrics::BlockLog`]).
    pub block_log: Option<PathBuf>,
}

/// The store's default budget of chunk bodies in memory (`--cache-mib`): 256 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

impl Config {
    /// The defaults: a snapshot every 100 heights, the last 2 kept; the store paged with
    /// [`DEFAULT_CACHE_BYTES`] of bodies and a checkpoint every 4 MiB of log
    /// ([`CheckpointPolicy::PAGED`]).
    pub fn new(home: impl Into<PathBuf>) -> Config {
        Config {
            home: home.into(),
            snapshot_interval: 100,
            snapshot_keep: 2,
            snapshot_keep_secs: 0,
            store: Options {
                cache_bytes: Some(DEFAULT_CACHE_BYTES),
                checkpoint: CheckpointPolicy::PAGED,
                ..Options::default()
            },
            app_version: 1,
            bundle_bytes: crate::snapshot::TARGET_BUNDLE_BYTES,
            restore_flush_bytes: bavl_store::IngestOptions::default().flush_bytes,
            #[cfg(feature = "test-rigs")]
            snapshot_format: crate::snapshot::FORMAT,
            #[cfg(feature = "test-rigs")]
            byzantine: None,
            #[cfg(feature = "test-rigs")]
            restore_null: false,
            block_log: None,
        }
    }

    /// The snapshot format served and restored.
    pub(crate) fn format(&self) -> u32 {
        #[cfg(feature = "test-rigs")]
        let format = self.snapshot_format;
        #[cfg(not(feature = "test-rigs"))]
        let format = crate::snapshot::FORMAT;
        format
    }

    /// The options the store is opened with: [`Config::store`] with checkpoints left to
    /// the application (`crate::block`), which defers them while a snapshot is exported.
    pub(crate) fn store_options(&self) -> Options {
        Options { checkpoint: CheckpointPolicy::Manual, ..self.store.clone() }
    }

    /// Which snapshots are kept: `snapshot_keep` (at least as many as a forging liar's
    /// forgeries, test-rigs only) and `snapshot_keep_secs`.
    pub(crate) fn retention(&self) -> Retention {
        let forgeries = *self.snapshot_offsets().end() as usize;
        Retention {
            keep: self.snapshot_keep.max(forgeries).max(1),
            keep_secs: self.snapshot_keep_secs,
        }
    }

    /// The heights after each snapshot height at which snapshots are taken: 0 only, or
    /// those of a forging liar's forgeries (`Lie::snapshot_offsets`, test-rigs only).
    pub(crate) fn snapshot_offsets(&self) -> std::ops::RangeInclusive<u64> {
        #[cfg(feature = "test-rigs")]
        let offsets = Lie::snapshot_offsets(self.byzantine);
        #[cfg(not(feature = "test-rigs"))]
        let offsets = 0..=0;
        offsets
    }
}

/// What changes: the live store and what is in flight.
pub(crate) struct Node {
    pub(crate) store: Store,
    pub(crate) home: Home,
    /// The height finalized but not yet committed.
    pub(crate) pending: Option<u64>,
    pub(crate) restoring: Option<Restorer>,
    pub(crate) snapshots: Snapshots,
    /// Log bytes committed since the last checkpoint the application started.
    pub(crate) log_since_checkpoint: u64,
    /// The finalized block's transactions, operations and time in FinalizeBlock.
    pub(crate) pending_work: crate::metrics::BlockTimes,
    pub(crate) block_log: Option<crate::metrics::BlockLog>,
    pub(crate) window: crate::metrics::Window,
    /// How the state sync went (written when it ends).
    pub(crate) sync: crate::report::SyncReport,
    /// The height and app hash a null restore ended at (Info reports them).
    #[cfg(feature = "test-rigs")]
    pub(crate) null_state: Option<(u64, Vec<u8>)>,
}

pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) node: Mutex<Node>,
}

/// The ABCI application over a bavl store. Cheap to clone (one per connection).
#[derive(Clone)]
pub struct App {
    pub(crate) shared: Arc<Shared>,
}

impl App {
    /// Opens (or creates) the application's directory and its store.
    pub fn open(cfg: Config) -> Result<App, HomeError> {
        let (home, store) = Home::open(&cfg.home, &cfg.store_options())?;
        if store.version() > 0 {
            // CometBFT state-syncs only a node with no state: an unfinished restore can
            // no longer be resumed.
            home.remove_restores(None)?;
        }
        let snapshots = Snapshots::open(&cfg.home, cfg.retention()).map_err(|e| HomeError::Io {
            what: format!("opening {}", cfg.home.join(crate::snapshots::DIR).display()),
            source: e,
        })?;
        tracing::info!(
            height = store.version(),
            app_hash = %hex::encode(store.root()),
            "opened the store"
        );
        let window = crate::metrics::Window::new(store.version() + 1);
        let block_log = match &cfg.block_log {
            Some(p) => Some(crate::metrics::BlockLog::open(p).map_err(|e| HomeError::Io {
                what: format!("opening the block log {}", p.display()),
                source: e,
            })?),
            None => None,
        };
        let node = Node {
            store,
            home,
            pending: None,
            restoring: None,
            snapshots,
            log_since_checkpoint: 0,
            pending_work: Default::default(),
            block_log,
            window,
            sync: Default::default(),
            #[cfg(feature = "test-rigs")]
            null_state: None,
        };
        Ok(App { shared: Arc::new(Shared { cfg, node: Mutex::new(node) }) })
    }

    pub(crate) fn node(&self) -> MutexGuard<'_, Node> {
        // A handler that panicked left a fatal error behind; the process is exiting.
        self.shared.node.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn cfg(&self) -> &Config {
        &self.shared.cfg
    }

    /// The last committed height and its app hash.
    pub fn last_commit(&self) -> (u64, [u8; 32]) {
        let node = self.node();
        (node.store.version(), node.store.root())
    }

    /// The value of `key` in the last committed state; a paged-out chunk is read back
    /// (verified), and one that cannot be is an error, never "absent".
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, bavl_store::StoreError> {
        let node = self.node();
        let snap = node.store.resident_for(&node.store.latest(), |s| s.get(key).err())?;
        Ok(snap.get(key).map_err(bavl_core::InputError::from)?.map(<[u8]>::to_vec))
    }

    /// The heights of the snapshots this node serves.
    pub fn snapshot_heights(&self) -> Vec<u64> {
        let mut node = self.node();
        node.snapshots.poll(false);
        node.snapshots.held().iter().map(|h| h.height).collect()
    }

    /// Waits for the running snapshot export, if any, and lists its snapshot (a snapshot
    /// is served once its file is complete: tests and tools that want it at once call
    /// this).
    pub fn wait_snapshots(&self) {
        self.node().snapshots.poll(true);
    }

    /// The store's counters (paging included: resident bodies, loads, evictions).
    pub fn store_stats(&self) -> Result<bavl_store::StoreStats, bavl_store::StoreError> {
        self.node().store.stats()
    }
}

impl Node {
    /// Replaces the live store by what `open` returns, dropping the old one first (its
    /// directory lock goes with it). A failure is fatal: there is no store to go on with.
    pub(crate) fn reopen_store<E: std::fmt::Display>(
        &mut self,
        what: &str,
        open: impl FnOnce(&Home) -> Result<Store, E>,
    ) {
        let empty = Options { cache_bytes: None, ..Options::default() };
        let none = Store::open_backend(Arc::new(bavl_store::MemBackend::new()), empty);
        let Ok(none) = none else { panic!("{what}: opening an in-memory store") };
        drop(std::mem::replace(&mut self.store, none));
        match open(&self.home) {
            Ok(store) => self.store = store,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

impl Application for App {
    fn info(&self, _req: pb::RequestInfo) -> pb::ResponseInfo {
        // The last *committed* height, even between FinalizeBlock and Commit: Info is also
        // how RPC's abci_info reads the app, on the query connection, at any time.
        let node = self.node();
        #[cfg(feature = "test-rigs")]
        if let Some((height, hash)) = &node.null_state {
            return pb::ResponseInfo {
                data: "bavl (null restore: no state)".into(),
                last_block_height: *height as i64,
                last_block_app_hash: hash.clone().into(),
                ..Default::default()
            };
        }
        pb::ResponseInfo {
            data: "bavl".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            app_version: self.cfg().app_version,
            last_block_height: node.store.version() as i64,
            last_block_app_hash: node.store.root().to_vec().into(),
        }
    }

    fn init_chain(&self, req: pb::RequestInitChain) -> pb::ResponseInitChain {
        crate::block::init_chain(self, req)
    }

    fn query(&self, req: pb::RequestQuery) -> pb::ResponseQuery {
        crate::query::query(self, req)
    }

    fn check_tx(&self, req: pb::RequestCheckTx) -> pb::ResponseCheckTx {
        match Tx::decode(&req.tx) {
            Ok(tx) => pb::ResponseCheckTx { gas_wanted: tx.ops.len() as i64, ..Default::default() },
            Err(e) => {
                tracing::debug!(code = e.code(), "CheckTx refused: {e}");
                pb::ResponseCheckTx { code: e.code(), log: e.to_string(), ..Default::default() }
            }
        }
    }

    fn prepare_proposal(&self, req: pb::RequestPrepareProposal) -> pb::ResponsePrepareProposal {
        crate::block::prepare_proposal(req)
    }

    fn process_proposal(&self, req: pb::RequestProcessProposal) -> pb::ResponseProcessProposal {
        crate::block::process_proposal(req)
    }

    fn finalize_block(&self, req: pb::RequestFinalizeBlock) -> pb::ResponseFinalizeBlock {
        crate::block::finalize_block(self, req)
    }

    fn commit(&self) -> pb::ResponseCommit {
        crate::block::commit(self)
    }

    fn list_snapshots(&self) -> pb::ResponseListSnapshots {
        crate::statesync::list_snapshots(self)
    }

    fn offer_snapshot(&self, req: pb::RequestOfferSnapshot) -> pb::ResponseOfferSnapshot {
        crate::statesync::offer_snapshot(self, req)
    }

    fn load_snapshot_chunk(
        &self,
        req: pb::RequestLoadSnapshotChunk,
    ) -> pb::ResponseLoadSnapshotChunk {
        crate::statesync::load_snapshot_chunk(self, req)
    }

    fn apply_snapshot_chunk(
        &self,
        req: pb::RequestApplySnapshotChunk,
    ) -> pb::ResponseApplySnapshotChunk {
        crate::statesync::apply_snapshot_chunk(self, req)
    }
}
