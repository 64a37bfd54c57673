//! `bavl sync`: downloads a version from many untrusted HTTP sources (peers running
//! `bavl serve`, static mirrors of `bavl export`), verifying every chunk against the
//! trusted root, and writes it durably as a new store.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_store::Store;
use bavl_sync::http::{self, BaseUrl, DownloadError, SourceEvent, SyncConfig};
use bavl_sync::{Health, Options, SourceReport, Status, SyncError, Syncer};
use serde_json::{json, Value};

use crate::store_cmds::store_error;

#[derive(clap::Args)]
pub struct SyncArgs {
    /// Directory of the new store (must not exist, or be empty).
    #[arg(long, value_name = "PATH")]
    db: PathBuf,
    /// The trusted root hash (64 hex digits), e.g. from a block header.
    #[arg(long, value_name = "HEX")]
    root: String,
    /// The trusted version of that root.
    #[arg(long, value_name = "V")]
    version: u64,
    /// A source's base URL (http://host:port[/path]); repeat for more.
    #[arg(long = "peer", value_name = "URL", required = true, num_args = 1..)]
    peers: Vec<String>,
    /// Resume file (default: PATH.sync-resume beside the store; best on the same file
    /// system, where it is renamed into the store rather than copied). A killed sync
    /// continues where it stopped.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Write a JSON summary to FILE (also when the sync fails: `"ok": false`, the reason
    /// and every source's outcome).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Verification worker threads (default: the CPUs).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Per-request timeout, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// Grace period before the minimum rate is enforced, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    grace: f64,
    /// Minimum average body rate per request after the grace, in bytes per second.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    min_rate: u64,
    /// Consecutive transient failures (timeouts, refused connections, 5xx) a source may
    /// have; one more and it is dropped.
    #[arg(long, value_name = "N", default_value_t = 4)]
    max_retries: u32,
    /// Backoff after a source's first transient failure, in seconds (doubling, at most
    /// 10 s).
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    backoff: f64,
    /// Never ask an idle source for a second copy of a chunk a source that delivers
    /// holds (by default the first of two copies to verify wins, against slow sources).
    /// A chunk held only by sources that have delivered nothing, or that are overdue, is
    /// still given to an idle source that delivers.
    #[arg(long)]
    no_speculate: bool,
    /// Requests in flight at once over all sources: the fetch threads and connections
    /// (at most this many more 16). Sources that have not delivered a verified chunk yet
    /// hold at most half of them, and half of the memory budget.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_in_flight: u32,
    /// Memory budget for unverified data (requests in flight at their limits, bodies
    /// awaiting verification, manifests), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 128)]
    budget_mib: u64,
    /// Write a line of progress to FILE about ten times a second (CSV: seconds, chunks
    /// verified, total, requests in flight, chunks being verified, bytes buffered, bytes
    /// fetched), to see where a sync spends its time.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub const SYNC_HELP: &str = "Examples:
  bavl sync --db /var/lib/bavl-new --root 3f2a…e1 --version 1200 \\
            --peer http://10.0.0.5:7070 --peer http://mirror.example.org/bavl
  bavl sync --db new --root HEX --version 1200 --peer URL --json sync.json

Every chunk is verified against --root alone; a source is banned at its first invalid
answer (bad chunk, lying manifest, over-long, stalled or garbage response) and its chunks
are fetched elsewhere. Sources that deliver verified chunks are preferred; one that has
delivered nothing never holds work an idle one that delivers could do, so any number of
slow or silent sources cannot stall the sync (docs/sync-protocol.md §5). Chunks are appended to the resume file as they verify: run the same
command again after a kill and only the missing chunks are fetched. The resume file is the
new store's checkpoint being filled: at the end the tree is rebuilt, its root checked, and
the file sealed and moved into --db, which opens at --version (the state is written once,
while it downloads).

With --json FILE the summary is written whatever happens: \"ok\": true with the totals, or
\"ok\": false with \"reason\" (no_sources, chunk_too_large, restore, error), \"error\" and
every source's outcome (live, banned or dropped, and why).

Exit status: 0 synced, 1 the sync failed (no honest source left; the resume file is
kept), 2 bad arguments, --db not empty, or an I/O error.";

/// What the sync had reached when it stopped, for the summary of a failed run.
#[derive(Default)]
struct Seen {
    urls: Vec<BaseUrl>,
    root: Option<String>,
    resume: Option<PathBuf>,
    /// The syncer's last state, given to the progress callback (once more at the end).
    sources: Vec<SourceReport>,
    status: Option<Status>,
    events: Vec<SourceEvent>,
    fetched_bytes: u64,
}

/// Runs the sync; with `--json`, a summary is written whatever the outcome (`"ok": false`
/// with the error and every source's outcome when it fails).
pub fn run(args: &SyncArgs) -> Result<ExitCode> {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::no_transparent_huge_pages();
    let start = Instant::now();
    let mut seen = Seen::default();
    let outcome = attempt(args, &mut seen);
    let (code, summary) = match outcome {
        Ok(Ok(summary)) => (Ok(ExitCode::SUCCESS), summary),
        Ok(Err(e)) => {
            for ev in &seen.events {
                eprintln!("{}", describe(ev, &seen.urls));
            }
            let kept = seen
                .resume
                .as_ref()
                .map_or(String::new(), |r| format!(" (the resume file {} is kept)", r.display()));
            eprintln!("error: the sync failed: {e}{kept}");
            let reason = match e {
                SyncError::NoSources { .. } => "no_sources",
                SyncError::ChunkTooLarge { .. } => "chunk_too_large",
                SyncError::NotDone | SyncError::Restore(_) => "restore",
            };
            (Ok(ExitCode::from(1)), failure_summary(args, &seen, reason, &e.to_string(), start))
        }
        Err(e) => {
            let summary = failure_summary(args, &seen, "error", &format!("{e:#}"), start);
            (Err(e), summary)
        }
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&summary)? + "\n";
        bavl_store::write_file_atomic(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    code
}

/// The sync up to the written store: its summary, or why the sync failed (exit 1), or
/// another error (bad arguments, I/O: exit 2 or 3).
fn attempt(args: &SyncArgs, seen: &mut Seen) -> Result<Result<Value, SyncError>> {
    let lower = args.root.to_ascii_lowercase();
    let root = bavl_sync::protocol::parse_root(&lower)
        .map_err(|_| anyhow::anyhow!("--root must be 64 hex digits"))?;
    seen.root = Some(lower);
    let sources = args.peers.iter().map(|p| BaseUrl::parse(p)).collect::<Result<Vec<_>, _>>()?;
    seen.urls = sources.clone();
    ensure_empty(&args.db)?;
    let resume = args.resume.clone().unwrap_or_else(|| sibling(&args.db, "sync-resume"));
    seen.resume = Some(resume.clone());
    let secs = |s: f64, what: &str| {
        Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .with_context(|| format!("--{what} must be a positive number of seconds"))
    };
    let floor = Options::default().max_chunk_bytes >> 20;
    anyhow::ensure!(
        args.budget_mib >= floor,
        "--budget-mib must be at least {floor}: it must hold the largest chunk accepted"
    );
    anyhow::ensure!(args.max_in_flight >= 4, "--max-in-flight must be at least 4");
    let options = Options {
        request_timeout: secs(args.timeout, "timeout")?,
        grace: secs(args.grace, "grace")?,
        min_rate: args.min_rate,
        max_retries: args.max_retries,
        backoff_base: secs(args.backoff, "backoff")?,
        speculate: !args.no_speculate,
        max_in_flight: args.max_in_flight,
        max_buffered_bytes: args.budget_mib.saturating_mul(1 << 20),
        ..Options::default()
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let cfg = SyncConfig {
        sources: sources.clone(),
        options,
        verify_threads: threads,
        resume: Some(resume.clone()),
        connect_timeout: Duration::from_secs(10),
    };
    let bar = progress_bar(args.quiet);
    let mut trace = match &args.trace {
        Some(path) => {
            let mut f = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            writeln!(f, "seconds,verified,total,in_flight,verifying,buffered_bytes,fetched_bytes")
                .with_context(|| format!("writing {}", path.display()))?;
            Some(std::io::BufWriter::new(f))
        }
        None => None,
    };
    let traced = Instant::now();
    let mut on_progress = |s: &Syncer, fetched: u64, ev: &[SourceEvent]| {
        update_bar(&bar, s, fetched, ev);
        let st = s.status();
        if let Some(t) = trace.as_mut() {
            // A trace line that cannot be written is not worth failing the sync for.
            let _ = writeln!(
                t,
                "{:.3},{},{},{},{},{},{fetched}",
                traced.elapsed().as_secs_f64(),
                st.verified,
                st.total.unwrap_or(0),
                st.in_flight,
                st.verifying,
                st.buffered
            );
        }
        seen.sources = s.sources();
        seen.status = Some(st);
        seen.events = ev.to_vec();
        seen.fetched_bytes = fetched;
    };
    let result = http::download(root, args.version, &cfg, &mut on_progress);
    bar.finish_and_clear();
    if let Some(mut t) = trace.take() {
        let _ = t.flush();
    }
    let done = match result {
        Ok(d) => d,
        Err(DownloadError::Sync(e)) => return Ok(Err(e)),
        Err(e) => return Err(e.into()),
    };
    let mut tree = done.tree;
    if tree.root_hash() != root {
        bail!("the rebuilt tree's root differs from --root (a bug: every chunk verified)");
    }
    let written = Instant::now();
    write_store(&args.db, &mut tree, done.checkpoint.as_deref(), args.version)?;
    let write_s = written.elapsed().as_secs_f64();
    for e in &done.events {
        eprintln!("{}", describe(e, &sources));
    }
    let secs = done.elapsed.as_secs_f64();
    let mbps = done.fetched_bytes as f64 / 1e6 / secs.max(1e-9);
    let banned = done.events.iter().filter(|e| matches!(e, SourceEvent::Banned { .. })).count();
    println!(
        "synced version {} (root {}, {} keys, {} chunks: {} fetched, {} from the resume file) \
         in {secs:.2} s, {mbps:.1} MB/s; {banned} banned; store written to {}",
        args.version,
        hex::encode(root),
        tree.len(),
        done.status.total.unwrap_or(0),
        done.fetched,
        done.resumed,
        args.db.display()
    );
    let keys = tree.len();
    // The process ends right after: freeing the million allocations of a large tree one
    // by one would only delay the exit (tens of milliseconds at 1M keys); the OS takes the
    // memory back at once.
    std::mem::forget(tree);
    Ok(Ok(json!({
        "ok": true, "db": args.db.display().to_string(), "version": args.version,
        "root": hex::encode(root), "keys": keys, "chunks": done.status.total,
        "fetched": done.fetched, "resumed": done.resumed, "fetched_bytes": done.fetched_bytes,
        "seconds": secs, "mb_per_s": mbps, "write_s": write_s, "refetches": done.status.refetches,
        "speculative": done.status.speculative, "peak_buffered_bytes": done.status.peak_buffered,
        "banned": banned, "sources": sources_json(&done.sources, &sources),
    })))
}

/// The summary of a run that did not write a store.
fn failure_summary(
    args: &SyncArgs,
    seen: &Seen,
    reason: &str,
    error: &str,
    start: Instant,
) -> Value {
    let count = |f: fn(&SourceEvent) -> bool| seen.events.iter().filter(|e| f(e)).count();
    let status = seen.status.clone().unwrap_or_default();
    json!({
        "ok": false, "reason": reason, "error": error,
        "db": args.db.display().to_string(), "version": args.version, "root": seen.root,
        "chunks": status.total, "verified": status.verified,
        "fetched_bytes": seen.fetched_bytes, "seconds": start.elapsed().as_secs_f64(),
        "resume": seen.resume.as_ref().map(|r| r.display().to_string()),
        "banned": count(|e| matches!(e, SourceEvent::Banned { .. })),
        "dropped": count(|e| matches!(e, SourceEvent::Dropped { .. })),
        "sources": sources_json(&seen.sources, &seen.urls),
    })
}

/// One object per source: its URL, health and why, and its counters.
pub fn sources_json(reports: &[SourceReport], urls: &[BaseUrl]) -> Vec<Value> {
    reports
        .iter()
        .zip(urls)
        .map(|(r, url)| {
            let (health, reason) = match &r.health {
                Health::Live => ("live", String::new()),
                Health::Banned(why) => ("banned", why.to_string()),
                Health::Dropped(why) => ("dropped", why.to_string()),
            };
            json!({"url": url.to_string(), "health": health, "reason": reason,
                   "chunks": r.stats.chunks, "bytes": r.stats.bytes,
                   "requests": r.stats.requests, "duplicates": r.stats.duplicates,
                   "transient_failures": r.stats.transient_failures, "window": r.window})
        })
        .collect()
}

fn describe(e: &SourceEvent, sources: &[BaseUrl]) -> String {
    match e {
        SourceEvent::Banned { source, reason } => {
            format!("banned {}: {reason}", sources[source.0 as usize])
        }
        SourceEvent::Dropped { source, reason } => {
            format!("dropped {}: {reason}", sources[source.0 as usize])
        }
    }
}

/// `PATH.ext` beside `path`.
fn sibling(path: &Path, ext: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "store".into());
    name.push(format!(".{ext}"));
    path.with_file_name(name)
}

fn ensure_empty(db: &Path) -> Result<()> {
    match std::fs::read_dir(db) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("reading {}", db.display())),
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => bail!("{} is not empty: bavl sync writes a new store", db.display()),
        },
    }
}

/// Makes the store in `PATH.partial`, then renames it to `db` (atomic: `db` is either
/// absent or the whole store). With the sealed resume file (`checkpoint`), that file
/// becomes the store's checkpoint: it was filled with the verified chunks while they
/// arrived, so nothing is written again. Otherwise the tree is written. The store is not
/// reopened to check it: every chunk was verified against the trusted root, the rebuilt
/// root was compared, and opening the store (or `bavl check --db`) verifies every chunk
/// of its checkpoint again.
fn write_store(
    db: &Path,
    tree: &mut bavl_core::Tree,
    checkpoint: Option<&Path>,
    version: u64,
) -> Result<()> {
    let partial = sibling(db, "partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .with_context(|| format!("removing the left-over {}", partial.display()))?;
    }
    match checkpoint {
        Some(file) => Store::adopt_checkpoint(&partial, file, version),
        None => Store::create_from_tree(&partial, tree, version),
    }
    .map_err(|e| store_error(&partial, e))?;
    if db.exists() {
        std::fs::remove_dir(db).with_context(|| format!("removing the empty {}", db.display()))?;
    }
    std::fs::rename(&partial, db)
        .with_context(|| format!("renaming {} to {}", partial.display(), db.display()))?;
    let parent = db.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", parent.display()))?;
    Ok(())
}

/// The progress bar of a sync (hidden if `quiet`), fed by [`update_bar`].
pub fn progress_bar(quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} chunks {msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Shows the syncer's progress: chunks verified of the total, rate, sources, bans.
pub fn update_bar(bar: &indicatif::ProgressBar, s: &Syncer, fetched: u64, ev: &[SourceEvent]) {
    let st = s.status();
    if let Some(total) = st.total {
        bar.set_length(total);
    }
    bar.set_position(st.verified);
    let secs = bar.elapsed().as_secs_f64().max(1e-3);
    let reports = s.sources();
    let live = reports.iter().filter(|r| r.health == Health::Live).count();
    let bans = ev.iter().filter(|e| matches!(e, SourceEvent::Banned { .. })).count();
    bar.set_message(format!(
        "{:.1} MB/s, {live}/{} sources, {bans} banned, {} in flight",
        fetched as f64 / 1e6 / secs,
        reports.len(),
        st.in_flight
    ));
}
