//! The B+AVL paper's evaluation (section V and Table III) on bavl and the three
//! comparison structures: one run writes CSV files, PNG plots, a Markdown report beside the
//! paper's own figures, and `papers.json`.
//!
//! Every comparison runs side by side in one process on one data set (the structures take
//! turns, in a rotating order, inside each repetition), so machine drift hits all alike.

pub mod measure;
pub mod plot;
pub mod report;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{AuthStructure, AvlPlus, AvlStar, Bavl, MerkleBTree};
use measure::{Dataset, PerfSample, SweepResult};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tree sizes of the insert/search experiment (V-B).
    pub sizes: Vec<usize>,
    /// Chunk size of the insert/search experiment (the paper: 256).
    pub perf_chunk: usize,
    /// Hash (compute the root) every this many inserts while timing inserts.
    pub commit_every: usize,
    /// Elements of the proof and space experiments (the paper: 1M).
    pub sweep_elements: usize,
    /// Chunk sizes of the proof and space experiments (the paper: 16..4096).
    pub chunks: Vec<usize>,
    /// Keys whose proofs are measured per structure and chunk size.
    pub proof_sample: usize,
    /// Space-efficiency samples during insertion.
    pub space_samples: usize,
    pub out_dir: PathBuf,
    pub json: PathBuf,
    pub command: String,
    pub quick: bool,
    pub seed: u64,
}

impl Options {
    /// Repetitions of the insert/search runs of `n` elements.
    pub fn reps(&self, n: usize) -> usize {
        match (self.quick, n) {
            (true, n) if n <= 1_000 => 5,
            (true, _) => 2,
            (false, n) if n <= 1_000 => 20,
            (false, n) if n <= 10_000 => 6,
            (false, n) if n <= 100_000 => 3,
            _ => 2,
        }
    }
}

/// Everything measured.
pub struct Results {
    pub perf: Vec<PerfSample>,
    pub sweeps: Vec<SweepResult>,
    /// AVL*: (splits before rotations, all splits) at each chunk size.
    pub avl_star_splits: Vec<(usize, u64, u64)>,
    pub seconds: f64,
}

fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {percent:>3}% eta {eta:<5} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn perf_one<S: AuthStructure>(
    d: &Dataset,
    o: &Options,
    n: usize,
    search: &[u32],
    rep: usize,
    bar: &ProgressBar,
) -> PerfSample {
    bar.set_message(format!("insert/search {n} elements: {} (run {})", S::NAME, rep + 1));
    measure::perf::<S>(d, n, o.perf_chunk, o.commit_every, search, rep, &mut |k| bar.inc(k))
}

fn sweep_one<S: AuthStructure>(
    d: &Dataset,
    o: &Options,
    cap: usize,
    proof_keys: &[u32],
    bar: &ProgressBar,
) -> (SweepResult, S) {
    bar.set_message(format!("proofs and space, chunk {cap}: {}", S::NAME));
    let n = o.sweep_elements;
    measure::sweep::<S>(d, n, cap, o.space_samples, proof_keys, 200, &mut |k| bar.inc(k))
}

/// Runs every experiment.
pub fn run(o: &Options) -> Result<Results> {
    let start = Instant::now();
    let max = o.sizes.iter().copied().chain([o.sweep_elements]).max().unwrap_or(0);
    let d = Dataset::new(max, o.seed);
    let perf_work: usize = o.sizes.iter().map(|&n| 4 * n * o.reps(n)).sum();
    let sweep_work = o.sweep_elements * (3 * o.chunks.len() + 1);
    let bar = progress((perf_work + sweep_work) as u64);

    let mut perf = Vec::new();
    for &n in &o.sizes {
        let search = measure::sample(n, (n / 10).max(1), o.seed ^ n as u64);
        for rep in 0..o.reps(n) {
            // A rotating order, so no structure always runs first (or last).
            for turn in 0..4 {
                let s = match (turn + rep) % 4 {
                    0 => perf_one::<AvlPlus>(&d, o, n, &search, rep, &bar),
                    1 => perf_one::<AvlStar>(&d, o, n, &search, rep, &bar),
                    2 => perf_one::<MerkleBTree>(&d, o, n, &search, rep, &bar),
                    _ => perf_one::<Bavl>(&d, o, n, &search, rep, &bar),
                };
                perf.push(s);
            }
        }
    }

    let n = o.sweep_elements;
    let proof_keys = measure::sample(n, o.proof_sample.min(n), o.seed ^ 0x9e37);
    let mut sweeps = Vec::new();
    let mut avl_star_splits = Vec::new();
    // The baseline's tree does not depend on the chunk size (one node per key): one build
    // serves every chunk size.
    let (base, _) = sweep_one::<AvlPlus>(&d, o, o.chunks[0], &proof_keys, &bar);
    for &cap in &o.chunks {
        sweeps.push(SweepResult { chunk: cap, ..base.clone() });
        let (r, t) = sweep_one::<AvlStar>(&d, o, cap, &proof_keys, &bar);
        avl_star_splits.push((cap, t.rotation_splits, t.splits));
        drop(t);
        sweeps.push(r);
        sweeps.push(sweep_one::<MerkleBTree>(&d, o, cap, &proof_keys, &bar).0);
        sweeps.push(sweep_one::<Bavl>(&d, o, cap, &proof_keys, &bar).0);
    }
    bar.finish_with_message("done");
    Ok(Results { perf, sweeps, avl_star_splits, seconds: start.elapsed().as_secs_f64() })
}
