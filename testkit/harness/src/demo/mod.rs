//! `bavl-harness demo`: state sync for real, on loopback.
//!
//! Builds a state of pseudo-random keys and values and a later version of it, exports both
//! as a `bavl export` directory, starts `--peers` processes serving it on loopback ports —
//! `bavl serve --dir` for the honest ones (its code linked into this binary, or a `bavl`
//! given with `--bavl`), `bavl-harness serve-liar
//! --byzantine KIND --dir` of this binary for the `--liars` — and syncs a
//! fresh node from all of them over HTTP with the real client
//! ([`bavl_sync::http::download`]: per-source adaptive windows, verification on worker
//! threads, bans and refetches), knowing only the root hash and the version. The report
//! shows what each peer served and how it ended, the totals, and whether the rebuilt root
//! is the source's.

mod peers;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bavl_core::{Snapshot, Tree};
use bavl_store::{Ingest, IngestOptions, Options as StoreOptions, Store};
use bavl_sync::http::{self, BaseUrl, Byzantine, SourceEvent, SyncConfig};
use bavl_sync::{Options, SourceReport, Status};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::text::ms;
use peers::Peers;
use report::{PeerReport, Report, Timings};

const KEY_LEN: usize = 20;
const VALUE_LEN: usize = 100;
/// The version synced, and the later one the liars also hold.
const VERSION: u64 = 1;
const LATER: u64 = 2;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keys in the state: 20-byte keys with 100-byte values, pseudo-random from --seed.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Chunk capacity: the most entries a chunk holds (4..=65536).
    #[arg(long, default_value_t = bavl_core::DEFAULT_CAPACITY,
          value_parser = clap::value_parser!(u32).range(4..=65_536))]
    capacity: u32,
    /// Seed for the keys and values and the liars' places.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Peer processes serving the state (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=200))]
    peers: u16,
    /// How many of the peers lie (at most --peers).
    #[arg(long, default_value_t = 4)]
    liars: u16,
    /// The lies the liars tell, in turn (comma-separated kinds of `bavl-harness
    /// serve-liar --byzantine`): wrong-bytes, wrong-index, other-version, truncate, overlong, endless,
    /// stall, trickle, http-error, garbage, redirect-loop, lying-manifest, wrong-version.
    #[arg(
        long,
        value_name = "KINDS",
        value_delimiter = ',',
        default_value = "wrong-bytes,wrong-index,other-version,truncate"
    )]
    lies: Vec<Byzantine>,
    /// Verification worker threads of the syncing node (default: the CPUs).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
    /// Grace period before a slow body counts as stalled, in seconds (a `stall` or
    /// `trickle` liar holds its chunks that long).
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    grace: f64,
    /// Export the state into DIR and keep it (default: a temporary directory, removed at
    /// the end).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also write the report as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// A `bavl` binary whose `bavl serve` the honest peers run (default: the same code,
    /// linked into this binary, as `bavl-harness serve`).
    #[arg(long, value_name = "PATH")]
    bavl: Option<PathBuf>,
}

/// The program and first argument of an honest peer: `PATH serve` for `--bavl PATH`, or
/// this binary's own `serve` (the `bavl serve` code of the `bavl_cli` library).
fn honest_server(given: Option<&Path>) -> Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe().context("locating this binary")?,
    };
    ensure!(path.is_file(), "--bavl {}: no such file", path.display());
    Ok(path)
}

/// Runs the demo; the exit code is non-zero if the sync failed or the roots differ.
pub fn run(args: &DemoArgs) -> Result<ExitCode> {
    ensure!(args.liars <= args.peers, "--liars ({}) exceeds --peers ({})", args.liars, args.peers);
    ensure!(args.liars == 0 || !args.lies.is_empty(), "--lies names no kind");
    let grace = Duration::try_from_secs_f64(args.grace)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--grace must be a positive number of seconds")?;
    let start = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let bavl = honest_server(args.bavl.as_deref())?;
    let work = WorkDir::new(args.dir.as_deref())?;
    let (root, mut report) = source(args, &mut rng, &work.path)?;
    let kinds = peers::assign(args.peers.into(), args.liars.into(), &args.lies, &mut rng);

    let t = Instant::now();
    let peers = Peers::start(&work.path, &kinds, &bavl)?;
    report.timings.peers_ms = ms(t.elapsed());
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
        usize::from,
    );
    report.threads = threads;
    let t = Instant::now();
    let joiner = work.path.join("joiner");
    if joiner.exists() {
        // A store left by an earlier run into the same --dir.
        std::fs::remove_dir_all(&joiner)
            .with_context(|| format!("removing {}", joiner.display()))?;
    }
    let outcome = sync(root, &peers, threads, grace, &joiner);
    report.timings.sync_ms = ms(t.elapsed());
    let started: Vec<(Option<Byzantine>, u32)> =
        peers.peers.iter().map(|p| (p.kind, p.pid)).collect();
    drop(peers); // every child killed and reaped before the report
    report.add_sync(outcome, &started);
    report.timings.total_ms = ms(start.elapsed());
    print!("{}", report.render());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// What the sync came to: the rebuilt tree (or why not) and the last state of each source.
pub struct SyncOutcome {
    pub result: Result<Downloaded, String>,
    pub urls: Vec<String>,
    pub sources: Vec<SourceReport>,
    pub status: Status,
    pub events: Vec<SourceEvent>,
    pub fetched_bytes: u64,
}

pub struct Downloaded {
    /// The root and key count of the store the sync wrote, as opened afterwards.
    pub root: bavl_core::Digest,
    pub keys: u64,
    pub fetched: u64,
    pub seconds: f64,
}

/// Syncs `(root, VERSION)` from every peer with the real HTTP client into a new store at
/// `db`, as `bavl sync` does: each verified chunk is written to the store's files as it
/// arrives (`bavl_store::Ingest`), and the store is then opened, paged, at that version.
fn sync(
    root: bavl_core::Digest,
    peers: &Peers,
    threads: usize,
    grace: Duration,
    db: &Path,
) -> SyncOutcome {
    let urls: Vec<String> = peers.peers.iter().map(|p| p.url.clone()).collect();
    let mut out = SyncOutcome {
        result: Err(String::new()),
        urls: urls.clone(),
        sources: Vec::new(),
        status: Status::default(),
        events: Vec::new(),
        fetched_bytes: 0,
    };
    let sources = match urls.iter().map(|u| BaseUrl::parse(u)).collect::<Result<Vec<_>, _>>() {
        Ok(s) => s,
        Err(e) => {
            out.result = Err(e.to_string());
            return out;
        }
    };
    let cfg = SyncConfig {
        sources,
        options: Options { grace, ..Options::default() },
        verify_threads: threads,
        connect_timeout: Duration::from_secs(5),
    };
    let bar = crate::sync::progress_bar(false);
    let mut on_progress = |p: &http::Progress| {
        crate::sync::update_bar(&bar, p);
        out.sources = p.syncer.sources();
        out.status = p.syncer.status();
        out.events = p.events.to_vec();
        out.fetched_bytes = p.fetched_bytes;
    };
    let mut ingest = match Ingest::open(db, root, VERSION, IngestOptions::default()) {
        Ok(i) => i,
        Err(e) => {
            out.result = Err(format!("starting the store at {}: {e}", db.display()));
            return out;
        }
    };
    let result = http::download(root, VERSION, &cfg, &mut ingest, &mut on_progress);
    bar.finish_and_clear();
    out.result = match result {
        Ok(d) => {
            out.sources = d.sources;
            out.status = d.status;
            out.events = d.events;
            out.fetched_bytes = d.fetched_bytes;
            let seconds = d.elapsed.as_secs_f64();
            let fetched = d.fetched;
            installed(ingest, db).map(|(root, keys)| Downloaded { root, keys, fetched, seconds })
        }
        Err(e) => Err(e.to_string()),
    };
    out
}

/// Finishes the ingest and opens the new store (paged, read-only): its root and keys.
fn installed(ingest: Ingest, db: &Path) -> Result<(bavl_core::Digest, u64), String> {
    ingest.finish().map_err(|e| format!("installing the store: {e}"))?;
    let store = Store::open(db, StoreOptions { read_only: true, ..StoreOptions::default() })
        .map_err(|e| format!("opening the synced store at {}: {e}", db.display()))?;
    let stats = store.stats().map_err(|e| e.to_string())?;
    Ok((stats.head_root, stats.keys))
}

/// Builds the state and its later version, exports both to `dir`; the root to sync and
/// the report's first part. The trees are dropped before the peers start.
fn source(
    args: &DemoArgs,
    rng: &mut ChaCha8Rng,
    dir: &Path,
) -> Result<(bavl_core::Digest, Report)> {
    let (mut tree, insert) = build(args, rng)?;
    let t = Instant::now();
    let snap = tree.snapshot();
    let hash = t.elapsed();
    ensure!(
        snap.chunk_count() >= 2,
        "the demo needs at least two chunks: raise --keys or lower --capacity"
    );
    let (later, changed) = later_version(&mut tree, &snap)?;
    drop(tree);
    let t = Instant::now();
    let bar = progress(snap.chunk_count() + later.chunk_count(), "export", "chunks");
    let exported = http::export(&snap, VERSION, dir, &mut |_| bar.inc(1))
        .with_context(|| format!("exporting to {}", dir.display()))?;
    http::export(&later, LATER, dir, &mut |_| bar.inc(1))
        .with_context(|| format!("exporting to {}", dir.display()))?;
    bar.finish_and_clear();
    let report = Report {
        keys: snap.len(),
        key_len: KEY_LEN,
        value_len: VALUE_LEN,
        seed: args.seed,
        capacity: snap.capacity(),
        chunks: snap.chunk_count(),
        total_chunk_bytes: exported.manifest.chunk_sizes.iter().sum(),
        later_changed: changed,
        version: VERSION,
        timings: Timings {
            insert_ms: ms(insert),
            hash_ms: ms(hash),
            export_ms: ms(t.elapsed()),
            ..Timings::default()
        },
        source_root: hex::encode(snap.root_hash()),
        ..Report::default()
    };
    Ok((snap.root_hash(), report))
}

fn progress(len: u64, prefix: &'static str, unit: &str) -> ProgressBar {
    let template = format!(
        "{{prefix}} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, eta {{eta}})"
    );
    let style =
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(len).with_style(style.progress_chars("=> ")).with_prefix(prefix)
}

/// Inserts `--keys` random entries; returns the tree and the time spent inserting.
fn build(args: &DemoArgs, rng: &mut ChaCha8Rng) -> Result<(Tree, Duration)> {
    let mut tree = Tree::with_capacity(args.capacity)?;
    let bar = progress(args.keys, "build ", "keys");
    let (mut key, mut value) = ([0u8; KEY_LEN], [0u8; VALUE_LEN]);
    let start = Instant::now();
    for i in 0..args.keys {
        rng.fill_bytes(&mut key);
        rng.fill_bytes(&mut value);
        tree.insert(&key, &value)?;
        if i % 8192 == 8191 {
            bar.inc(8192);
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok((tree, elapsed))
}

/// A later version of the state: 16 values changed, spread over the keys, so every chunk
/// of it verifies against another root than `snap`'s. Returns it and how many changed.
fn later_version(tree: &mut Tree, snap: &Snapshot) -> Result<(Snapshot, u64)> {
    let step = (snap.len() / 16).max(1) as usize;
    let keys: Vec<Vec<u8>> = snap.iter()?.step_by(step).map(|(k, _)| k.to_vec()).collect();
    for key in &keys {
        tree.insert(key, b"changed in a later version")?;
    }
    let later = tree.snapshot();
    ensure!(later.root_hash() != snap.root_hash(), "the later version has the same root");
    Ok((later, keys.len() as u64))
}

/// Where the state is exported: `--dir` (kept), or a temporary directory removed on drop.
struct WorkDir {
    path: PathBuf,
    remove: bool,
}

impl WorkDir {
    fn new(dir: Option<&Path>) -> Result<WorkDir> {
        let (path, remove) = match dir {
            Some(d) => (d.to_path_buf(), false),
            None => {
                remove_stale(&std::env::temp_dir());
                let name = format!("{TEMP_PREFIX}{}", std::process::id());
                (std::env::temp_dir().join(name), true)
            }
        };
        if remove && path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing the stale {}", path.display()))?;
        }
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path, remove })
    }
}

const TEMP_PREFIX: &str = "bavl-demo-";

/// Removes the temporary directories of demos that were killed (their process is gone),
/// where `/proc` tells which processes live.
fn remove_stale(tmp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The report's view of one peer.
fn peer_report(
    i: usize,
    kind: Option<Byzantine>,
    url: &str,
    pid: u32,
    r: Option<&SourceReport>,
) -> PeerReport {
    let (health, reason) = match r.map(|r| &r.health) {
        Some(bavl_sync::Health::Live) | None => ("live", None),
        Some(bavl_sync::Health::Banned(why)) => ("banned", Some(why.to_string())),
        Some(bavl_sync::Health::Dropped(why)) => ("dropped", Some(why.to_string())),
    };
    let stats = r.map(|r| r.stats.clone()).unwrap_or_default();
    PeerReport {
        peer: i,
        url: url.to_string(),
        pid,
        behaviour: kind.map_or("honest", Byzantine::name).to_string(),
        health: health.to_string(),
        reason,
        chunks: stats.chunks,
        bytes: stats.bytes,
        requests: stats.requests,
        transient_failures: stats.transient_failures,
    }
}
