//! `bavl-clusterlab`: the DynaTree experiments (the DynaTree paper §6) on real `bavl-cluster` node
//! processes over loopback TCP with fsynced Raft logs, written to
//! `docs/results/cluster.json` with CSV and PNG under `docs/results/cluster/`.
//!
//! Measured: CPU-seconds (every node process and the client process, from /proc),
//! messages and bytes (counted by each node's server loop) per operation, single-client
//! latency and throughput with concurrent clients, for 1, 2, 4 and 8 partitions; the client
//! cache on and off; chunk capacities; retries and directory load while ranges split; and
//! the linearizability of histories recorded while node processes are killed with SIGKILL
//! and restarted. Modelled: throughput on machines with enough cores, from the measured
//! per-operation costs (`model.rs`, formula in the JSON and in docs/cluster.md §11).
//!
//! `--quick` is the CI smoke: every experiment once, at 1 and 2 partitions (the capacity and
//! settings runs at 2), 5k keys, phases under a second (`setup.rs`); the figures at 8
//! partitions are then null. Writes under `--out`.
#![forbid(unsafe_code)]

mod cluster;
mod csv;
mod entrycost;
mod experiments;
mod interval;
mod isolated;
mod keys;
mod load;
mod merges;
mod metrics;
mod model;
mod node;
mod plot;
mod probe;
mod report;
mod setup;
mod wire;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

/// The DynaTree experiments on a real local bavl cluster.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Every experiment once at 1 and 2 partitions, small state, short phases, one history:
    /// the CI smoke (about a minute).
    #[arg(long)]
    pub quick: bool,
    /// Where results go [default: docs/results; quick: target/clusterlab/results].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where clusters live while they run.
    #[arg(long, default_value = "target/clusterlab/work")]
    pub work: PathBuf,
    /// The first loopback port (each cluster takes 10 from there); the default is below
    /// Linux's ephemeral range (32768-60999), where an outgoing connection may hold it.
    #[arg(long, default_value_t = 22000)]
    pub port: u16,
    /// Run the nodes without fsync (measurement of what the fsyncs cost only).
    #[arg(long)]
    pub no_fsync: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// (internal) One node process.
    Node(node::NodeArgs),
    /// (internal) The client process: phases of a workload, result as JSON on stdout.
    Load {
        #[arg(long)]
        spec: String,
    },
    /// One workload's throughput at a few partition counts, printed side by side (a quick
    /// A/B of a cost change; clusters live under --work, no results are written). Example: `probe --partitions 1,8 --workload update`.
    Probe(probe::ProbeArgs),
}

/// `--work`, relative to the repository's root unless absolute.
fn work_dir(root: &Path, a: &RunArgs) -> PathBuf {
    if a.work.is_absolute() {
        a.work.clone()
    } else {
        root.join(&a.work)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Node(a)) => runtime()?.block_on(node::run(a)),
        Some(Cmd::Load { spec }) => {
            let spec: load::Spec = serde_json::from_str(&spec).context("decoding --spec")?;
            let r = runtime()?.block_on(load::run(spec))?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
        Some(Cmd::Probe(p)) => {
            let work = work_dir(&bavl_labkit::repo_root(), &cli.run);
            runtime()?.block_on(probe::run(&cli.run, &p, &work))
        }
        None => {
            let root = bavl_labkit::repo_root();
            let a = cli.run;
            let out = a.out.clone().unwrap_or_else(|| {
                if a.quick {
                    root.join("target/clusterlab/results")
                } else {
                    root.join("docs/results")
                }
            });
            let work = work_dir(&root, &a);
            runtime()?.block_on(experiments::run_all(&a, &root, &out, &work))
        }
    }
}
