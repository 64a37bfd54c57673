//! `bavl-synclab adversarial`: sync against crowds of adversarial sources. For each state
//! size, one honest `bavl serve --dir` process beside a crowd process of 0, 12 or 48 liars
//! of one adversarial kind (`bavl-synclab crowd`), and the real `bavl sync` binary as a measured
//! child: wall time, peak RSS and CPU of the client, and each source's final health from
//! its `--json` summary.
//!
//! The honest time is the median of several syncs from the honest source alone (after
//! one unmeasured warm-up). A case is **over the time bound** when it takes more than
//! 3 × the honest time + the grace, **over the memory bound** when the client's peak RSS
//! exceeds the honest peak + the client's buffer budget (`max_buffered_bytes`, 128 MiB),
//! and a liar of a delaying or lying kind **never banned or dropped** when it is still
//! live at the end. `slow`, `early-hints` and `gzip-manifest` are honest: they are
//! counted apart, and should stay live. A case that fails or is killed at the timeout is
//! not ok, and over the time bound.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use bavl_labkit::stats::median;
use bavl_sync::http::Byzantine;
use serde::Serialize;
use serde_json::Value;

pub mod cli;
mod report;

pub use report::{csv, document, plots};

use crate::child::{self, Proc};
use crate::state::{self, StateInfo};

/// The client's default buffer budget (`bavl_sync::Options::max_buffered_bytes`).
pub const BUDGET: u64 = 128 << 20;
/// Chunk capacity of the states (Workload A at 64 pairs per chunk: 3,532 chunks at 200k).
pub const CAPACITY: u32 = 64;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `bavl` binary (serve, export, sync).
    pub bavl: PathBuf,
    /// This binary (for `crowd`).
    pub exe: PathBuf,
    /// States, exports and the synced stores go here.
    pub work: PathBuf,
    pub sizes: Vec<u64>,
    pub kinds: Vec<Byzantine>,
    pub liars: Vec<usize>,
    /// Measured honest syncs per size.
    pub reps: u32,
    /// `bavl sync --grace`, seconds.
    pub grace: f64,
    /// A sync still running after this is killed (not ok).
    pub timeout: Duration,
    pub command: String,
    /// The honest source first on `bavl sync`'s command line (the liars after it) instead
    /// of last.
    pub honest_first: bool,
    /// Where the `bavl` measured comes from, taken before the first sync: the commit, the
    /// files under `crates/` that differed from it, the date and the load.
    pub provenance: Value,
}

/// One sync of a case.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub keys: u64,
    /// `none` for the honest baseline.
    pub kind: String,
    pub liars: usize,
    pub seconds: f64,
    pub ratio: f64,
    pub time_bound_s: f64,
    pub peak_rss_bytes: u64,
    pub memory_bound_bytes: u64,
    pub cpu_s: f64,
    pub banned: usize,
    pub dropped: usize,
    pub live_liars: usize,
    /// The liars' final verdicts, digits left out (`dropped: outrun: chunk N ...`).
    pub reasons: BTreeMap<String, usize>,
    pub honest_live: bool,
    pub ok: bool,
    /// Why a sync was not ok: its exit status and the summary's `reason` and `error`.
    pub error: Option<String>,
    pub timed_out: bool,
    pub over_time: bool,
    pub over_memory: bool,
}

/// One `bavl sync` run: its measurements and the sources' final health.
struct Run {
    seconds: f64,
    peak_rss_bytes: u64,
    cpu_s: f64,
    ok: bool,
    timed_out: bool,
    error: Option<String>,
    /// `(health, reason)` per source, in `--peer` order.
    sources: Vec<(String, String)>,
}

/// The honest figures of one size.
#[derive(Debug, Clone, Serialize)]
pub struct Honest {
    pub keys: u64,
    pub chunks: u64,
    pub seconds: Vec<f64>,
    pub median_s: f64,
    pub peak_rss_bytes: Vec<u64>,
    pub median_peak_rss_bytes: u64,
}

/// Runs every size, the honest baseline then every kind × liar count; the cases and the
/// honest figures.
pub fn run(cfg: &Config) -> Result<(Vec<Honest>, Vec<Case>)> {
    let (mut honest, mut cases) = (Vec::new(), Vec::new());
    for &keys in &cfg.sizes {
        let (h, c) = run_size(cfg, keys)?;
        honest.push(h);
        cases.extend(c);
    }
    Ok((honest, cases))
}

fn run_size(cfg: &Config, keys: u64) -> Result<(Honest, Vec<Case>)> {
    let dir = cfg.work.join(format!("k{keys}-c{CAPACITY}"));
    let info = state::ensure(&dir, keys, CAPACITY)?;
    let export = dir.join("export");
    ensure_export(&cfg.bavl, &dir.join("store"), info.version, &export)?;
    let (_server, url): (Proc, String) = child::serve(&cfg.bavl, &export)?;
    let peers = std::slice::from_ref(&url);
    sync_once(cfg, &info, peers)?; // warm-up: page cache, the server's first answers
    let mut runs = Vec::new();
    for rep in 0..cfg.reps {
        let r = sync_once(cfg, &info, peers)?;
        anyhow::ensure!(r.ok, "the honest sync {rep} of {keys} keys failed");
        eprintln!(
            "adversarial: {keys} keys honest rep {rep}: {:.3} s, rss {:.0} MB",
            r.seconds,
            mb(r.peak_rss_bytes)
        );
        runs.push(r);
    }
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let seconds: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
    let rss: Vec<u64> = runs.iter().map(|r| r.peak_rss_bytes).collect();
    let honest = Honest {
        keys,
        chunks: info.chunk_count,
        median_s: median(&seconds),
        median_peak_rss_bytes: median(&rss),
        seconds,
        peak_rss_bytes: rss,
    };
    // The median run (nearest rank, as `median_s`: the lower middle one of an even count).
    let mut cases = vec![case(cfg, &honest, "none", 0, &runs[(runs.len() - 1) / 2])];
    for &kind in &cfg.kinds {
        for &n in cfg.liars.iter().filter(|&&n| n > 0) {
            let (crowd, mut urls) = child::crowd(&cfg.exe, kind.name(), n, &export)?;
            let at = if cfg.honest_first { 0 } else { urls.len() };
            urls.insert(at, url.clone());
            let r = sync_once(cfg, &info, &urls)?;
            drop(crowd);
            let c = case(cfg, &honest, kind.name(), n, &r);
            eprintln!(
                "adversarial: {keys} keys, {n} x {kind}: {:.2} s ({:.1}x), rss {:.0} MB, cpu {:.1} s, banned {} dropped {} live {}{}",
                c.seconds, c.ratio, mb(c.peak_rss_bytes), c.cpu_s, c.banned, c.dropped, c.live_liars,
                if c.ok { "" } else { " NOT OK" }
            );
            cases.push(c);
        }
    }
    Ok((honest, cases))
}

/// `bavl export` of the state's version into `out`, unless it is there already.
fn ensure_export(bavl: &Path, db: &Path, version: u64, out: &Path) -> Result<()> {
    if out.join("v1/snapshots/index.json").exists() {
        return Ok(());
    }
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    let st = Command::new(bavl)
        .args(["export", "--version", &version.to_string(), "--db"])
        .arg(db)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .context("running bavl export")?;
    anyhow::ensure!(st.success(), "bavl export failed: {st}");
    Ok(())
}

/// One `bavl sync` of the state from `peers` into a fresh store, measured.
fn sync_once(cfg: &Config, info: &StateInfo, peers: &[String]) -> Result<Run> {
    let db = cfg.work.join("sync-db");
    let summary = cfg.work.join("sync.json");
    let _ = std::fs::remove_dir_all(&db);
    let _ = std::fs::remove_file(&summary);
    let mut cmd = Command::new(&cfg.bavl);
    cmd.args(["sync", "--quiet", "--root", &info.root, "--version", &info.version.to_string()])
        .args(["--grace", &cfg.grace.to_string()])
        .arg("--db")
        .arg(&db)
        .arg("--json")
        .arg(&summary);
    for p in peers {
        cmd.args(["--peer", p]);
    }
    let m = child::run_measured(cmd, cfg.timeout)?;
    let s: Value = std::fs::read_to_string(&summary)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let sources = s["sources"]
        .as_array()
        .map(|a| {
            let field = |x: &Value, k: &str| x[k].as_str().unwrap_or_default().to_string();
            a.iter().map(|x| (field(x, "health"), field(x, "reason"))).collect()
        })
        .unwrap_or_default();
    let ok = m.status.is_some_and(|st| st.success())
        && s["ok"] == true
        && s["root"].as_str() == Some(info.root.as_str())
        && s["keys"].as_u64() == Some(info.keys);
    let error = (!ok).then(|| match m.status {
        None => format!("killed at the timeout ({} s)", cfg.timeout.as_secs()),
        Some(st) => format!("{st}; {}: {}", s["reason"], s["error"]),
    });
    let _ = std::fs::remove_dir_all(&db);
    Ok(Run {
        error,
        seconds: m.seconds,
        peak_rss_bytes: m.peak_rss_bytes,
        cpu_s: m.cpu_s,
        ok,
        timed_out: m.status.is_none(),
        sources,
    })
}

fn case(cfg: &Config, honest: &Honest, kind: &str, liars: usize, r: &Run) -> Case {
    let time_bound_s = 3.0 * honest.median_s + cfg.grace;
    let memory_bound_bytes = honest.median_peak_rss_bytes + BUDGET;
    // The honest source is first or last; the liars are the others.
    let at = if cfg.honest_first { 0 } else { liars };
    let liar_health: Vec<&(String, String)> =
        r.sources.iter().enumerate().filter(|&(j, _)| j != at).map(|(_, h)| h).collect();
    let count = |h: &str| liar_health.iter().filter(|(x, _)| x == h).count();
    let mut reasons = BTreeMap::new();
    for (h, why) in &liar_health {
        let key = format!("{h}: {}", without_numbers(why));
        *reasons.entry(key.trim_end_matches(": ").to_string()).or_insert(0) += 1;
    }
    let honest_live = r.sources.get(at).is_some_and(|(h, _)| h == "live");
    let over_time = !r.ok || r.seconds > time_bound_s;
    Case {
        keys: honest.keys,
        kind: kind.to_string(),
        liars,
        seconds: r.seconds,
        ratio: r.seconds / honest.median_s,
        time_bound_s,
        peak_rss_bytes: r.peak_rss_bytes,
        memory_bound_bytes,
        cpu_s: r.cpu_s,
        banned: count("banned"),
        dropped: count("dropped"),
        // A sync killed at the timeout wrote no summary: all its liars count as live.
        live_liars: if r.sources.is_empty() { liars } else { count("live") },
        reasons,
        honest_live,
        ok: r.ok,
        error: r.error.clone(),
        timed_out: r.timed_out,
        over_time,
        over_memory: r.peak_rss_bytes > memory_bound_bytes,
    }
}

/// `why` with every number written `N` (so reasons group across chunk indices).
fn without_numbers(why: &str) -> String {
    let mut out = String::with_capacity(why.len());
    for c in why.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('N') {
            out.push('N');
        }
    }
    out
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_group_across_numbers() {
        assert_eq!(without_numbers("outrun: chunk 1234 came"), "outrun: chunk N came");
        assert_eq!(without_numbers("HTTP 404"), "HTTP N");
    }
}
