//! `bavl-chainlab`: the AVL* paper's experiments (sections 5-6) on a real CometBFT
//! network of `bavl-abci` applications, written to `docs/results/chain.json` with CSV and
//! PNG under `docs/results/chain/`.
//!
//! - Join: a fresh node state-syncs a preloaded state (1M Workload B keys by default)
//!   from 4 validators: bavl snapshots (every chunk verified on arrival), the
//!   Cosmos-SDK-style baseline (10 MiB zlib chunks, checked after the last), and a null
//!   application that accepts every chunk unread (what CometBFT needs to move the bytes);
//!   all honest, then with one validator serving a forged snapshot.
//! - Throughput: committed tx/s and block times under load while snapshots are taken
//!   every few heights, bavl (O(1) snapshots) against the baseline (its state serialised
//!   on the committing thread at snapshot heights, as the paper's Tendermint did).
//!
//! Every process is killed on every way out. `--quick` is the CI smoke (a small state,
//! one repetition, nothing written under docs/ unless `--out` says so).
#![forbid(unsafe_code)]

mod blocks;
mod join;
mod net;
mod plot;
mod report;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;

/// The AVL* paper's chain experiments on a real CometBFT network.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    /// A small state, one repetition, snapshots every 5 heights, a short load: the CI smoke
    /// (every network of the full run, each smaller and shorter; about 2 minutes on 2
    /// loaded cores).
    #[arg(long)]
    quick: bool,
    /// Keys of the preloaded state (20-byte keys, 100-byte values) [default: 1000000,
    /// quick 10000].
    #[arg(long)]
    keys: Option<u64>,
    /// Joins per variant [default: 3, quick 1].
    #[arg(long)]
    reps: Option<usize>,
    /// Which experiments: join, throughput, or both.
    #[arg(long, default_value = "both", value_parser = ["join", "throughput", "both"])]
    only: String,
    /// The lies of the one Byzantine snapshot server, one pair of networks (bavl,
    /// baseline) each (see `bavl-abci serve --help`).
    #[arg(long, default_value = "forged,forged-many", value_delimiter = ',')]
    lies: Vec<String>,
    /// Seconds of load in the throughput experiment, after its warm-up (8 s; quick 3 s)
    /// [default: 60, quick 8].
    #[arg(long)]
    load_seconds: Option<u64>,
    /// Concurrent submitters of the load generator.
    #[arg(long, default_value_t = 8)]
    load_threads: u64,
    /// Where results go [default: docs/results; quick: target/chainlab/results].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where networks live while they run.
    #[arg(long, default_value_os_t = bavl_labkit::repo_path("target/chainlab"))]
    work: PathBuf,
    /// The `bavl-abci` to run, built with its feature test-rigs [default: built now, beside
    /// this binary, in the same profile].
    #[arg(long)]
    bavl_abci: Option<PathBuf>,
    /// The first port (each network takes 100 from there).
    #[arg(long, default_value_t = 28000)]
    port: u16,
}

/// What every experiment runs with.
#[derive(Debug, Clone)]
pub struct Setup {
    pub keys: u64,
    pub interval: u64,
    /// Snapshots each validator keeps during a join. They must outlive a slow join, on the
    /// liar too, which takes `FORGERIES` + 1 snapshots per interval: with too few, a baseline
    /// joiner chasing a forged snapshot the liar has since pruned asks for its chunk every
    /// 10 s until the join times out (what the quick run did with 4 kept at interval 10).
    pub snapshot_keep: u64,
    pub reps: usize,
    pub join_timeout_s: u64,
    pub load_interval: u64,
    pub load_s: u64,
    /// Seconds of load before the measured window (the mempool filling, a burst drained).
    pub load_warmup_s: u64,
    pub load_threads: u64,
}

/// Installs CometBFT (pinned, idempotent) and, unless `app` names one, builds bavl-abci.
fn binaries(root: &Path, app: Option<&Path>) -> Result<net::Bins> {
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/install-cometbft.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running scripts/install-cometbft.sh")?;
    if !out.status.success() {
        bail!("scripts/install-cometbft.sh failed");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let cometbft = PathBuf::from(text.lines().last().unwrap_or("").trim());
    let app = match app {
        Some(app) => app.to_path_buf(),
        None => build_abci(root)?,
    };
    Ok(net::Bins { cometbft, app })
}

/// Builds bavl-abci beside this binary: the same target directory, in the profile this
/// binary was built in (`target/release`: release; `target/debug`: CI's `test`, or `dev`
/// when BAVL_PROFILE says so, as in scripts/profile.sh; any other directory: the custom
/// profile of that name). The rigs the experiments run (--snapshot-format baseline,
/// --byzantine, --restore-null) are in bavl-abci's feature test-rigs only.
fn build_abci(root: &Path) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let bin = exe.parent().context("this binary's directory")?;
    let target = bin.parent().context("the target directory")?;
    let dir = bin.file_name().and_then(|n| n.to_str()).context("the profile's directory")?;
    let profile = match dir {
        "release" => "release".to_string(),
        "debug" => match std::env::var("BAVL_PROFILE").ok().as_deref() {
            Some("dev") => "dev".to_string(),
            _ => "test".to_string(),
        },
        custom => custom.to_string(),
    };
    eprintln!("chainlab: building bavl-abci --features test-rigs ({profile} profile)");
    let st = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "--profile", &profile, "-p", "bavl-abci", "--features", "test-rigs"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(root)
        .status()
        .context("running cargo build")?;
    if !st.success() {
        bail!("building bavl-abci failed");
    }
    Ok(bin.join("bavl-abci"))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = bavl_labkit::repo_root();
    let q = cli.quick;
    let setup = Setup {
        keys: cli.keys.unwrap_or(if q { 10_000 } else { 1_000_000 }),
        interval: if q { 5 } else { 100 },
        snapshot_keep: if q { 50 } else { 4 },
        reps: cli.reps.unwrap_or(if q { 1 } else { 3 }).max(1),
        join_timeout_s: if q { 120 } else { 400 },
        load_interval: if q { 5 } else { 10 },
        load_s: cli.load_seconds.unwrap_or(if q { 8 } else { 60 }),
        load_warmup_s: if q { 3 } else { 8 },
        load_threads: cli.load_threads.max(1),
    };
    let out = cli.out.clone().unwrap_or_else(|| {
        if q {
            root.join("target/chainlab/results")
        } else {
            root.join("docs/results")
        }
    });
    let work = std::path::absolute(&cli.work).context("the work directory")?;
    let bins = binaries(&root, cli.bavl_abci.as_deref())?;
    let lies: Vec<&'static str> =
        cli.lies.iter().map(|l| &*Box::leak(l.clone().into_boxed_str())).collect();
    let mut rep = report::Report::new(&setup, &bins, &lies);
    let mut port = cli.port;
    if cli.only != "throughput" {
        let mut networks = vec![
            join::Network {
                format: "bavl",
                liar: None,
                modes: vec![join::Mode::Verify, join::Mode::Null],
            },
            join::Network { format: "baseline", liar: None, modes: vec![join::Mode::Verify] },
        ];
        for &lie in &lies {
            for format in ["bavl", "baseline"] {
                let modes = vec![join::Mode::Verify];
                networks.push(join::Network { format, liar: Some(lie), modes });
            }
        }
        for (k, n) in networks.iter().enumerate() {
            let tag = n.liar.map_or(String::new(), |l| format!("-{l}"));
            let dir = work.join(format!("join{k}-{}{tag}", n.format));
            eprintln!(
                "chainlab: join network {k}: {} snapshots, liar {:?}, {} keys",
                n.format, n.liar, setup.keys
            );
            match join::run(&bins, &dir, port, n, &setup) {
                Ok(joins) => rep.joins.extend(joins),
                Err(e) => {
                    eprintln!("chainlab: join network {k} failed: {e:#}");
                    rep.errors.push(format!("join network {k} ({}): {e:#}", dir.display()));
                }
            }
            port += 100;
        }
    }
    if cli.only != "join" {
        for format in ["bavl", "baseline"] {
            let dir = work.join(format!("load-{format}"));
            eprintln!(
                "chainlab: throughput: {format} snapshots every {} heights",
                setup.load_interval
            );
            match blocks::run(&bins, &dir, port, format, &setup) {
                Ok(t) => rep.throughput.push(t),
                Err(e) => {
                    eprintln!("chainlab: throughput of {format} failed: {e:#}");
                    rep.errors.push(format!("throughput {format} ({}): {e:#}", dir.display()));
                }
            }
            port += 100;
        }
    }
    rep.write(&out, &std::env::args().collect::<Vec<_>>().join(" "))?;
    if !rep.errors.is_empty() {
        bail!("{} experiment(s) failed (recorded in chain.json)", rep.errors.len());
    }
    Ok(())
}
