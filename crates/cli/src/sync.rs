//! `bavl sync`: downloads a version from many untrusted HTTP sources (peers running
//! `bavl serve`, static mirrors of `bavl export`), verifying every chunk against the
//! trusted root, and writes each into the new store's own files as it arrives
//! (`bavl_store::Ingest`): the state is never held in memory, and the directory being
//! built is what a killed sync resumes from. At the end the store is installed paged and
//! opened once to check its version and root.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_store::{Ingest, IngestOptions, StoreError};
use bavl_sync::http::{self, BaseUrl, DownloadError, Progress, SourceEvent, SyncConfig};
use bavl_sync::{Health, Options, SourceReport, Status, SyncError};
use serde_json::{json, Value};

use crate::store_cmds::{open_existing_with, store_error};

#[derive(clap::Args)]
pub struct SyncArgs {
    /// Directory of the new store: absent, empty, or holding an unfinished sync of the
    /// same --root and --version, which is resumed (what it holds is not fetched again).
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
    /// fetched, chunks written, of which durable: a kill loses none of those), to see where
    /// a sync spends its time.
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
slow or silent sources cannot stall the sync (docs/sync-protocol.md §5).

Each verified chunk is written into --db as it arrives (the store's chunk files and a
journal, made durable every second); the state is never held in memory. Memory: the
--budget-mib of unverified data, 16 MiB of verified chunks on their way to the disk, and
about 100 bytes per chunk (the skeleton being built), whatever the state's size. Killed,
or stopped by an error (a full disk, no source left), the sync leaves --db holding what it
wrote: run the same command again and only the missing chunks are fetched. Until the sync
completes, --db is not a store (opening it is refused). At the end the store is installed
paged at --version and opened once to check its root; open it paged (bavl serve, export,
get: --cache-mib; the library: Options::paged) so the state stays on disk.

With --json FILE the summary is written whatever happens: \"ok\": true with the totals, or
\"ok\": false with \"reason\" (no_sources, chunk_too_large, restore, write, error),
\"error\" and every source's outcome (live, banned or dropped, and why).

Exit status: 0 synced, 1 the sync failed (no honest source left; --db keeps what was
written), 2 bad arguments, --db holding something else, or an I/O error (a full disk:
--db keeps what was written; free space and resume).";

/// What the sync had reached when it stopped, for the summary of a failed run.
#[derive(Default)]
struct Seen {
    urls: Vec<BaseUrl>,
    root: Option<String>,
    /// The syncer's last state, given to the progress callback (once more at the end).
    sources: Vec<SourceReport>,
    status: Option<Status>,
    events: Vec<SourceEvent>,
    fetched_bytes: u64,
    written: u64,
    /// Of those, made durable: what a later run does not fetch again.
    durable: u64,
    /// Chunks --db held when the run started.
    resumed: u64,
}

/// Runs the sync; with `--json`, a summary is written whatever the outcome (`"ok": false`
/// with the error and every source's outcome when it fails).
pub fn run(args: &SyncArgs) -> Result<ExitCode> {
    #[cfg(feature = "mimalloc")]
    {
        bavl_alloc::no_transparent_huge_pages();
        // Freed memory goes back to the OS after 100 ms, as a paged store's does: kept, the
        // freed response buffers of many fetch threads raise the resident set. Measured on
        // 8M keys from one loopback peer, interleaved, on a loaded machine (load 10-16):
        // peak RSS 87-115 MB purged against 96-138 MB kept, in 7.6-13.3 s against
        // 7.5-11.8 s (the spread of the load, not a measured cost).
        bavl_alloc::paged_memory();
    }
    let start = Instant::now();
    let mut seen = Seen::default();
    let outcome = attempt(args, &mut seen);
    let (code, summary) = match outcome {
        Ok(Ok(summary)) => (Ok(ExitCode::SUCCESS), summary),
        Ok(Err(e)) => {
            for ev in &seen.events {
                eprintln!("{}", describe(ev, &seen.urls));
            }
            eprintln!(
                "error: the sync failed: {e} ({} keeps at least {} chunks: run the same command \
                 again to resume)",
                args.db.display(),
                seen.durable
            );
            let reason = match e {
                SyncError::NoSources { .. } => "no_sources",
                SyncError::ChunkTooLarge { .. } => "chunk_too_large",
                SyncError::NotDone | SyncError::Restore(_) => "restore",
            };
            (Ok(ExitCode::from(1)), failure_summary(args, &seen, reason, &e.to_string(), start))
        }
        Err(e) => {
            let reason = if e.is::<WriteFailed>() { "write" } else { "error" };
            let summary = failure_summary(args, &seen, reason, &format!("{e:#}"), start);
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

/// Writing the verified chunks into --db failed (a full disk, say).
#[derive(Debug)]
struct WriteFailed(String);

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteFailed {}

/// The sync up to the installed store: its summary, or why the sync failed (exit 1), or
/// another error (bad arguments, I/O: exit 2).
fn attempt(args: &SyncArgs, seen: &mut Seen) -> Result<Result<Value, SyncError>> {
    let lower = args.root.to_ascii_lowercase();
    let root = bavl_sync::protocol::parse_root(&lower)
        .map_err(|_| anyhow::anyhow!("--root must be 64 hex digits"))?;
    seen.root = Some(lower);
    let sources = args.peers.iter().map(|p| BaseUrl::parse(p)).collect::<Result<Vec<_>, _>>()?;
    seen.urls = sources.clone();
    let cfg = SyncConfig {
        sources: sources.clone(),
        options: options(args)?,
        verify_threads: args.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
        }),
        connect_timeout: Duration::from_secs(10),
    };
    let mut ingest = Ingest::open(&args.db, root, args.version, IngestOptions::default())
        .map_err(|e| ingest_error(&args.db, e))?;
    seen.resumed = ingest.received();
    let bar = progress_bar(args.quiet);
    let mut trace = match &args.trace {
        Some(path) => {
            let mut f = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let head = "seconds,verified,total,in_flight,verifying,buffered_bytes,fetched_bytes,\
                        written,durable";
            writeln!(f, "{head}").with_context(|| format!("writing {}", path.display()))?;
            Some(std::io::BufWriter::new(f))
        }
        None => None,
    };
    let traced = Instant::now();
    let mut on_progress = |p: &Progress| {
        update_bar(&bar, p);
        let st = p.syncer.status();
        if let Some(t) = trace.as_mut() {
            // A trace line that cannot be written is not worth failing the sync for.
            let _ = writeln!(
                t,
                "{:.3},{},{},{},{},{},{},{},{}",
                traced.elapsed().as_secs_f64(),
                st.verified,
                st.total.unwrap_or(0),
                st.in_flight,
                st.verifying,
                st.buffered,
                p.fetched_bytes,
                p.written,
                p.durable
            );
            let _ = t.flush();
        }
        seen.sources = p.syncer.sources();
        seen.status = Some(st);
        seen.events = p.events.to_vec();
        seen.fetched_bytes = p.fetched_bytes;
        seen.written = p.written;
        seen.durable = p.durable;
    };
    let result = http::download(root, args.version, &cfg, &mut ingest, &mut on_progress);
    bar.finish_and_clear();
    if let Some(mut t) = trace.take() {
        let _ = t.flush();
    }
    let done = match result {
        Ok(d) => d,
        Err(DownloadError::Sync(e)) => return Ok(Err(e)),
        Err(DownloadError::Sink(e)) => {
            return Err(WriteFailed(write_failure(&args.db, &*e, seen.durable)).into())
        }
        Err(e) => return Err(e.into()),
    };
    let installed = Instant::now();
    if let Some(shape) = done.shape.filter(|s| s.chunk_count == 0) {
        // The empty tree has no chunk to tell the ingest its capacity; the root proved it
        // (with the manifest): the ingest, which holds nothing, is reopened with it.
        drop(ingest);
        let opts = IngestOptions { empty_capacity: shape.capacity, ..IngestOptions::default() };
        ingest = Ingest::open(&args.db, root, args.version, opts)
            .map_err(|e| ingest_error(&args.db, e))?;
    }
    let (version, installed_root) = ingest.finish().map_err(|e| ingest_error(&args.db, e))?;
    if (version, installed_root) != (args.version, root) {
        bail!("the store was installed at another version or root (a bug: every chunk verified)");
    }
    // Opened as any later user would, paged: the skeleton is read and its root checked
    // against its chunk hashes; no body is read.
    let store = open_existing_with(&args.db, 1, Some(0))?;
    if (store.version(), store.root()) != (args.version, root) {
        bail!("{} opens at another version or root than synced", args.db.display());
    }
    let keys = store.latest().len();
    drop(store);
    let install_s = installed.elapsed().as_secs_f64();
    for e in &done.events {
        eprintln!("{}", describe(e, &sources));
    }
    let secs = done.elapsed.as_secs_f64();
    let mbps = done.fetched_bytes as f64 / 1e6 / secs.max(1e-9);
    let banned = done.events.iter().filter(|e| matches!(e, SourceEvent::Banned { .. })).count();
    let chunks = done.status.total.unwrap_or(0);
    let peak_rss = peak_rss_bytes();
    let rss = peak_rss.map_or(String::new(), |b| format!(", peak RSS {:.0} MB", b as f64 / 1e6));
    println!(
        "synced version {} (root {}): {keys} keys, {chunks} chunks ({} fetched, {} resumed) \
         in {secs:.2} s, {mbps:.1} MB/s{rss}; {banned} banned; store written to {}",
        args.version,
        hex::encode(root),
        done.fetched,
        done.resumed,
        args.db.display()
    );
    Ok(Ok(json!({
        "ok": true, "db": args.db.display().to_string(), "version": args.version,
        "root": hex::encode(root), "keys": keys, "chunks": chunks,
        "fetched": done.fetched, "resumed": done.resumed, "fetched_bytes": done.fetched_bytes,
        "seconds": secs, "mb_per_s": mbps, "install_s": install_s,
        "peak_rss_bytes": peak_rss, "refetches": done.status.refetches,
        "speculative": done.status.speculative, "peak_buffered_bytes": done.status.peak_buffered,
        "banned": banned, "sources": sources_json(&done.sources, &sources),
    })))
}

/// The syncer's options from the flags.
fn options(args: &SyncArgs) -> Result<Options> {
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
    Ok(Options {
        request_timeout: secs(args.timeout, "timeout")?,
        grace: secs(args.grace, "grace")?,
        min_rate: args.min_rate,
        max_retries: args.max_retries,
        backoff_base: secs(args.backoff, "backoff")?,
        speculate: !args.no_speculate,
        max_in_flight: args.max_in_flight,
        max_buffered_bytes: args.budget_mib.saturating_mul(1 << 20),
        ..Options::default()
    })
}

/// An error of the store being built, with what to do about it.
fn ingest_error(db: &Path, e: StoreError) -> anyhow::Error {
    match e {
        StoreError::InvalidOption(_) | StoreError::UnfinishedIngest(_) => anyhow::anyhow!(
            "{e} (bavl sync writes a new store into an absent or empty directory, or resumes \
             its own unfinished sync of the same --root and --version)"
        ),
        e => store_error(db, e),
    }
}

/// What to say when writing the chunks failed: the cause, and that --db can be resumed.
fn write_failure(db: &Path, e: &(dyn std::error::Error + 'static), durable: u64) -> String {
    let mut full = false;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            // ENOSPC, EDQUOT.
            full |= matches!(io.raw_os_error(), Some(28 | 122));
        }
        cause = c.source();
    }
    let what = if full { "the disk is full" } else { "writing the store failed" };
    format!(
        "{what}: {e}; {} keeps the {durable} chunks made durable before it: free space or fix \
         the cause and run the same command again to resume (only the others are fetched)",
        db.display()
    )
}

/// The process's peak resident set (`VmHWM` of `/proc/self/status`), if the system says.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The summary of a run that did not install a store.
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
        "chunks": status.total, "verified": status.verified, "written": seen.written,
        "durable": seen.durable,
        "resumed": seen.resumed,
        "fetched_bytes": seen.fetched_bytes, "seconds": start.elapsed().as_secs_f64(),
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

/// Shows the sync's progress: chunks written of the total, rate, sources, bans.
pub fn update_bar(bar: &indicatif::ProgressBar, p: &Progress) {
    let st = p.syncer.status();
    if let Some(total) = st.total {
        bar.set_length(total);
    }
    bar.set_position(p.written);
    let secs = bar.elapsed().as_secs_f64().max(1e-3);
    let reports = p.syncer.sources();
    let live = reports.iter().filter(|r| r.health == Health::Live).count();
    let bans = p.events.iter().filter(|e| matches!(e, SourceEvent::Banned { .. })).count();
    bar.set_message(format!(
        "written, {:.1} MB/s, {live}/{} sources, {bans} banned, {} in flight",
        p.fetched_bytes as f64 / 1e6 / secs,
        reports.len(),
        st.in_flight
    ));
}
