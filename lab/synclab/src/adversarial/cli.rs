//! The `bavl-synclab adversarial` and `crowd` command lines.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use bavl_sync::http::Byzantine;

use super::Config;

/// `bavl-synclab adversarial`: sync against crowds of liars (see `docs/sync-adversarial.md`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Smoke run: 20k keys, drip-head, no-chunk-zero and gzip-manifest, 12 liars, one
    /// honest repetition; written under target/synclab/adversarial-quick (~1 minute).
    #[arg(long)]
    pub quick: bool,
    /// State sizes in keys (default 200000,1000000; quick 20000).
    #[arg(long, value_delimiter = ',')]
    pub keys: Option<Vec<u64>>,
    /// Kinds of liars (default: every adversarial kind of docs/sync-adversarial.md).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Option<Vec<Byzantine>>,
    /// Liar counts beside the honest source (default 12,48; quick 12).
    #[arg(long, value_delimiter = ',')]
    pub liars: Option<Vec<usize>>,
    /// Measured all-honest syncs per size, after one warm-up (default 5; quick 1).
    #[arg(long)]
    pub reps: Option<u32>,
    /// `bavl sync --grace`, seconds (its default).
    #[arg(long, default_value_t = 5.0)]
    pub grace: f64,
    /// Seconds before a sync is killed (the case is then not ok).
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// The `bavl` binary (default: beside this one).
    #[arg(long)]
    pub bavl: Option<PathBuf>,
    /// States, exports and synced stores (kept between runs: states are built once).
    #[arg(long, default_value_os_t = bavl_labkit::repo_path("target/synclab/adversarial"))]
    pub work: PathBuf,
    /// CSV and PNG directory (default docs/results/sync-adversarial; quick
    /// target/synclab/adversarial-quick).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The JSON document (default docs/results/sync-adversarial.json; quick OUT/...).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// List the honest source first on `bavl sync`'s command line, before the liars
    /// (default: last, after them).
    #[arg(long)]
    pub honest_first: bool,
    /// A note recorded in the JSON (e.g. which build of `bavl` is measured when --bavl
    /// names another one than this tree's).
    #[arg(long)]
    pub note: Option<String>,
    /// Exit 1 also when a case is over a bound or a delaying liar ends live, not only when
    /// a sync fails.
    #[arg(long)]
    pub strict: bool,
}

/// Runs the benchmark and writes its outputs. Exit 1 if a sync failed (or, `--strict`,
/// any target is missed).
pub fn main(args: &Args) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let bavl = args.bavl.clone().unwrap_or_else(|| exe.with_file_name("bavl"));
    anyhow::ensure!(
        bavl.exists(),
        "{} not found (cargo build --release -p bavl-cli)",
        bavl.display()
    );
    let quick = args.quick;
    let kinds = args.kinds.clone().unwrap_or_else(|| {
        if quick {
            vec![Byzantine::DripHead, Byzantine::NoChunkZero, Byzantine::GzipManifest]
        } else {
            Byzantine::ADVERSARIAL.to_vec()
        }
    });
    let pick = |full: Vec<u64>, small: Vec<u64>| if quick { small } else { full };
    let cfg = Config {
        bavl,
        exe,
        work: args.work.clone(),
        sizes: args.keys.clone().unwrap_or_else(|| pick(vec![200_000, 1_000_000], vec![20_000])),
        kinds,
        liars: args.liars.clone().unwrap_or_else(|| if quick { vec![12] } else { vec![12, 48] }),
        reps: args.reps.unwrap_or(if quick { 1 } else { 5 }).max(1),
        grace: args.grace,
        timeout: Duration::from_secs(args.timeout),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        honest_first: args.honest_first,
        provenance: super::report::provenance(args.note.as_deref()),
    };
    let out = args.out.clone().unwrap_or_else(|| {
        if quick {
            bavl_labkit::repo_path("target/synclab/adversarial-quick")
        } else {
            bavl_labkit::results_path("sync-adversarial")
        }
    });
    let json_path = args.json.clone().unwrap_or_else(|| {
        if quick {
            out.join("sync-adversarial.json")
        } else {
            bavl_labkit::results_path("sync-adversarial.json")
        }
    });
    std::fs::create_dir_all(&out)?;
    std::fs::create_dir_all(&cfg.work)?;
    let (honest, cases) = super::run(&cfg)?;
    let doc = super::document(&cfg, &honest, &cases, quick);
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    std::fs::write(out.join("cases.csv"), super::csv(&cases))?;
    if let Err(e) = super::plots(&out, &honest, &cases, cfg.grace) {
        eprintln!("adversarial: no plot: {e:#}");
    }
    let n = |k: &str| doc[k].as_u64().unwrap_or(0);
    eprintln!(
        "adversarial: {} cases, {} failed, {} over the time bound, {} over the memory bound, {} delaying liars never banned or dropped, {} honest-kind sources banned or dropped -> {}",
        n("cases_total"), n("cases_failed"), n("cases_over_time_bound"), n("cases_over_memory_bound"),
        n("liars_never_banned_or_dropped"), n("honest_kind_sources_banned_or_dropped"), json_path.display()
    );
    let missed = n("cases_over_time_bound")
        + n("cases_over_memory_bound")
        + n("liars_never_banned_or_dropped")
        + n("honest_kind_sources_banned_or_dropped");
    let failed = n("cases_failed") > 0 || (args.strict && missed > 0);
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
