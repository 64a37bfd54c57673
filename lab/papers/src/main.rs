//! `bavl-papers`: reproduces the B+AVL paper's evaluation on bavl and on the structures it
//! compares itself with (AVL*, Merkle B+tree, the AVL+ baseline). See `--help`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};
use bavl_papers::eval::{self, Options};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bavl-papers",
    about = "The B+AVL paper's evaluation (section V, Table III) on bavl, AVL*, a Merkle \
             B+tree and the AVL+ baseline"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the standalone experiments of the B+AVL paper and writes the results.
    #[command(long_about = "\
Runs the standalone experiments of section V of the B+AVL paper \
(../shared/papers/b-plus-avl-trees.txt) on four structures implemented in this crate, all \
hashing with SHA-256:

  Baseline (AVL+)  an IAVL-like Merkle AVL tree, one leaf per key; its transfer chunks are cut
                   by a depth-first traversal and cannot be verified one by one
  AVL*             the AVL* tree of the OPODIS 2022 paper (appendix Algorithms 1-4)
  Merkle B+tree    leaf cells are chunks; proofs carry every sibling of every cell
  B+AVL (bavl)     bavl_core::Tree, this repository's B+AVL tree

Experiments (elements of 512 bytes: 4-byte keys, 508-byte values, one shared data set):

  V-B  insert every element (root hash every --commit-every inserts) and search 10% of
       them, chunk size 256, trees of 1K, 10K, 100K and 1M elements (Fig. 5)
  V-C  hashes per membership proof on 1M elements, chunk sizes 16..4096 (Fig. 6)
  V-D  space efficiency (chunks / ceil(elements / chunk size)) sampled during insertion,
       chunk sizes 16..4096 (Fig. 7, Table II)

Table III is then computed as the paper does: each figure divided by the baseline's.

Output (--out, default docs/results/papers/): perf.csv, proof-size.csv, \
proof-histogram.csv, space.csv, space-series.csv, perf.png, proof-size.png, space.png and \
README.md (our Table III beside the paper's, with the machine and command); --json \
(default docs/results/papers.json): the Table III rows and summaries.

Unless --all-cores is given, the run pins itself to one core (with taskset) so that bavl, \
which can hash on two threads, is timed on one core like the others. The full run takes \
about 10 minutes and 3 GB of memory; --quick (small trees, for CI) well under a minute.")]
    Eval(EvalArgs),
}

#[derive(clap::Args)]
struct EvalArgs {
    /// Small trees (1K/10K elements; 20K for proofs and space): a smoke run for CI.
    #[arg(long)]
    quick: bool,
    /// Directory for CSV, PNG and README.md.
    #[arg(long, default_value_os_t = bavl_labkit::results_path("papers"))]
    out: PathBuf,
    /// The Table III summary.
    #[arg(long, default_value_os_t = bavl_labkit::results_path("papers.json"))]
    json: PathBuf,
    /// Compute the root hash every this many inserts while timing inserts (1: after every
    /// insert, as an eagerly hashed tree would).
    #[arg(long, default_value_t = 1000)]
    commit_every: usize,
    /// Largest tree of any experiment (caps the paper's 1M, e.g. on a small machine).
    #[arg(long)]
    max_elements: Option<usize>,
    /// Do not pin the run to one core.
    #[arg(long)]
    all_cores: bool,
    /// Skip the PNG plots.
    #[arg(long)]
    no_plots: bool,
    /// Seed of the data set.
    #[arg(long, default_value_t = 2025)]
    seed: u64,
}

const PINNED: &str = "BAVL_PAPERS_PINNED";

/// Re-runs this process under `taskset` on one core; `None` if not needed or impossible.
fn pin_self() -> Option<ExitCode> {
    if std::env::var_os(PINNED).is_some()
        || std::thread::available_parallelism().map_or(1, |n| n.get()) < 2
    {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let cpu = std::thread::available_parallelism().map_or(0, |n| n.get() - 1);
    let status = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED, cpu.to_string())
        .status()
        .ok()?;
    Some(ExitCode::from(status.code().unwrap_or(1) as u8))
}

fn eval_cmd(a: EvalArgs) -> Result<()> {
    let cap = |v: Vec<usize>| -> Vec<usize> {
        let max = a.max_elements.unwrap_or(usize::MAX);
        let mut v: Vec<usize> = v.into_iter().map(|n| n.min(max)).collect();
        v.dedup();
        v
    };
    let command = std::iter::once("bavl-papers".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Options {
        sizes: cap(if a.quick {
            vec![1_000, 10_000]
        } else {
            vec![1_000, 10_000, 100_000, 1_000_000]
        }),
        perf_chunk: 256,
        commit_every: a.commit_every.max(1),
        sweep_elements: cap(vec![if a.quick { 20_000 } else { 1_000_000 }])[0],
        chunks: vec![16, 64, 256, 1024, 4096],
        proof_sample: if a.quick { 2_000 } else { 20_000 },
        space_samples: if a.quick { 200 } else { 1_000 },
        out_dir: a.out.clone(),
        json: a.json.clone(),
        command: format!(
            "cargo run --release -p bavl-papers -- {}{}",
            command.trim_start_matches("bavl-papers").trim(),
            match std::env::var(PINNED) {
                Ok(cpu) => format!(" (pinned to CPU {cpu})"),
                Err(_) => String::new(),
            }
        ),
        quick: a.quick,
        seed: a.seed,
    };
    let r = eval::run(&o)?;
    eval::report::write(&o, &r).context("writing the report")?;
    if !a.no_plots {
        if let Err(err) = eval::plot::all(&o, &r) {
            eprintln!("warning: plots skipped: {err:#}");
        }
    }
    println!(
        "{:.0} s; wrote {}/README.md (Table III), CSV and plots, and {}",
        r.seconds,
        o.out_dir.display(),
        o.json.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Cmd::Eval(a) = cli.command;
    if !a.all_cores {
        if let Some(code) = pin_self() {
            return code;
        }
    }
    match eval_cmd(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
