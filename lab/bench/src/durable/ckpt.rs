//! The checkpoint experiment of SMaRtTrie (§5.3: throughput over time with blocking and
//! with concurrent checkpoints, and the throughput kept during checkpoints), on bavl.
//!
//! The same pre-generated stream of Workload B blocks is applied, one durable commit per
//! block, to copies of one store, with a checkpoint every `every` blocks:
//! - `bavl`: `Store::checkpoint()` starts a background checkpoint of an O(1) snapshot and
//!   the blocks keep committing;
//! - `baseline` (the traditional, blocking checkpoint): the writer stops, writes the
//!   whole state itself with `bavl_store::checkpoint::write` (which syncs it), and
//!   resumes.
//!
//! `control` applies the same blocks to the same store with no checkpoint at all, right
//! after a `bavl` run, and is classified with that run's checkpoint intervals carried
//! over block by block (`timeline::map_intervals`): its during/outside ratios are what the
//! blocks alone make of the measure (Workload B grows the state by half or more over a
//! run, and checkpoints lengthen with it, so "during" falls on later, slower blocks more
//! than "outside" does), the part of bavl's ratios that no checkpoint caused.
//!
//! A fourth kind, `bavl-unpaced`, is bavl with `CheckpointPace::Unpaced`: the background
//! checkpoint written as fast as the disk takes it and synced once at its end, instead of
//! spread over the commits (the store's default, `bavl_store::pace`). It shows what the
//! pacing is for.
//!
//! Runs alternate (bavl, baseline, bavl-unpaced, bavl, ...) so that drifting machine load
//! hits every kind alike.

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use bavl_labkit::stats::mean;
use bavl_store::{Backend, CheckpointPace, CheckpointPolicy, DirBackend, Options, Store};
use bavl_workload::{Mix, Op};
use serde::Serialize;

use super::timeline::{
    block_class, latency_split, local_ratios, map_intervals, throughput_split, windows, BlockRec,
    Class, Interval, Split, Window,
};
use super::util::{apply, copy_store, process_cpu_secs, remove_dir, round, thread_cpu_secs, OPS};
use crate::workload::{wait_for_quiet, CpuMeter};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The store's background checkpoint, with the default pacing.
    Bavl,
    Baseline,
    /// The store's background checkpoint, unpaced.
    BavlUnpaced,
    /// No checkpoint: the same blocks, classified with a bavl run's intervals.
    Control,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bavl => "bavl",
            Kind::Baseline => "baseline",
            Kind::BavlUnpaced => "bavl-unpaced",
            Kind::Control => "control",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        [Kind::Bavl, Kind::Control, Kind::Baseline, Kind::BavlUnpaced]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// The blocks after a store's head `head`, drawn against an in-memory mirror of the
/// state (the initial `keys` of `seed`), so that every run applies identical blocks and
/// no run spends time drawing them.
pub fn stream(seed: u64, keys: usize, head: u64, n: usize) -> Result<Vec<Vec<Op>>> {
    let mut mirror = bavl_core::Tree::new();
    for (k, v) in bavl_workload::initial(seed).take(keys) {
        mirror.insert(&k, &v)?;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let ops = bavl_workload::block(seed, head + 1 + i, Mix::workload_b(OPS), |p| {
            bavl_workload::next_key(|lo| mirror.range(lo, Bound::Unbounded), p).expect("resident")
        });
        for op in &ops {
            match op {
                Op::Put(k, v) => {
                    mirror.insert(k, v)?;
                }
                Op::Delete(k) => {
                    mirror.remove(k);
                }
            }
        }
        out.push(ops);
    }
    Ok(out)
}

/// The schedule of one run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Schedule {
    /// Unmeasured blocks first.
    pub warmup_blocks: usize,
    /// A checkpoint every this many blocks...
    pub every: usize,
    /// ...this many times, the first after `every / 2` measured blocks.
    pub checkpoints: usize,
    /// Measured blocks (`every * checkpoints + every / 2`: as many outside checkpoints
    /// after the last one as before the first).
    pub measured_blocks: usize,
    pub window_s: f64,
}

impl Schedule {
    /// Whether a checkpoint starts before measured block `i`.
    pub fn checkpoint_before(&self, i: usize) -> bool {
        let first = self.every / 2;
        i >= first
            && (i - first).is_multiple_of(self.every)
            && (i - first) / self.every < self.checkpoints
    }
}

/// One measured block, for the JSON.
#[derive(Clone, Debug, Serialize)]
pub struct BlockOut {
    pub start_s: f64,
    pub end_s: f64,
    pub latency_ms: f64,
    pub apply_ms: f64,
    pub hash_ms: f64,
    pub persist_ms: f64,
    /// CPU time of the whole process during the block over its length.
    pub process_cores: f64,
    pub in_checkpoint: Class,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub series: String,
    pub kind: &'static str,
    /// Position in the sequence of runs (0 first).
    pub order: usize,
    pub keys_start: u64,
    pub keys_end: u64,
    pub measured_s: f64,
    pub ops_per_s: f64,
    /// Mean window throughput during checkpoints / outside them.
    pub throughput: Split,
    /// Per checkpoint: its windows' mean throughput over that of the outside windows
    /// around it (`timeline::local_ratios`), and their mean.
    pub throughput_local: Vec<f64>,
    pub throughput_ratio_local: f64,
    /// p99 and p50 block latency (ms) during checkpoints / outside them.
    pub latency_p99: Split,
    pub latency_p50: Split,
    /// Means of the block's parts (ms) and of the process's cores, during / outside: what
    /// the checkpoint slows down.
    pub apply_ms: Split,
    pub hash_ms: Split,
    pub persist_ms: Split,
    pub process_cores: Split,
    /// CPU of the writer thread alone (without the commit's helper hashing thread and
    /// the checkpoint thread) over the block's length.
    pub writer_cores: Split,
    /// Checkpoint (bavl) or pause (baseline) intervals, seconds from the run's start.
    pub intervals: Vec<Interval>,
    /// Their lengths (bavl: to the middle of the uncertain end).
    pub checkpoint_s: Vec<f64>,
    pub checkpoint_bytes: Vec<u64>,
    /// bavl: time spent inside `Store::checkpoint()` by the writer (log rotation).
    pub checkpoint_call_ms: Vec<f64>,
    /// bavl: checkpoints not started because the previous one was still running.
    pub skipped_checkpoints: usize,
    pub others_busy_cores: f64,
    pub waited_for_quiet_s: f64,
    pub root: String,
    pub blocks: Vec<BlockOut>,
    #[serde(skip)]
    pub windows: Vec<Window>,
    #[serde(skip)]
    pub classified: Vec<(BlockRec, Class)>,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Per-block measurements besides the time line.
struct Detail {
    apply_ms: f64,
    hash_ms: f64,
    persist_ms: f64,
    cores: f64,
    writer_cores: f64,
}

/// Runs one kind on a copy of the store at `base`. A `control` run is classified with
/// the intervals of `reference` (a bavl run of the same blocks).
#[allow(clippy::too_many_arguments)]
pub fn run(
    kind: Kind,
    order: usize,
    series: String,
    base: &Path,
    work: &Path,
    blocks: &[Vec<Op>],
    s: &Schedule,
    wait_quiet: f64,
    reference: Option<&Run>,
) -> Result<Run> {
    ensure!(
        (kind == Kind::Control) == reference.is_some(),
        "a control run, and only one, needs the bavl run it controls"
    );
    ensure!(blocks.len() >= s.warmup_blocks + s.measured_blocks, "stream too short");
    let dir = work.join("store");
    let ckpt_dir = work.join("baseline-checkpoints");
    remove_dir(work)?;
    copy_store(base, &dir)?;
    let pace =
        if kind == Kind::BavlUnpaced { CheckpointPace::Unpaced } else { CheckpointPace::default() };
    let opts = Options {
        checkpoint: CheckpointPolicy::Manual,
        checkpoint_pace: pace,
        ..Options::in_memory()
    };
    let mut store = Store::open(&dir, opts)?;
    let keys_start = store.working().len();
    let backend: Option<DirBackend> =
        if kind == Kind::Baseline { Some(DirBackend::open(&ckpt_dir)?) } else { None };
    for ops in &blocks[..s.warmup_blocks] {
        apply(&mut store, ops)?;
        store.commit()?;
    }
    let waited = wait_for_quiet(wait_quiet, 0.3);

    let meter = CpuMeter::start();
    let stop = AtomicBool::new(false);
    let mut recs: Vec<BlockRec> = Vec::with_capacity(s.measured_blocks);
    let mut details: Vec<Detail> = Vec::with_capacity(s.measured_blocks);
    let mut intervals = Vec::new();
    let (mut ckpt_bytes, mut call_ms) = (Vec::new(), Vec::new());
    let mut skipped = 0;
    let mut last_baseline: Option<String> = None;
    // bavl: (start, last poll at which it was still running). Only cheap calls between
    // blocks: `Store::stats` walks the tree and lists the directory (6 ms at 1M keys).
    let mut open: Option<(f64, f64)> = None;
    let last_bytes = |store: &Store| store.last_checkpoint_report().map_or(0, |r| r.bytes);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_secs_f64();
    let measured = &blocks[s.warmup_blocks..s.warmup_blocks + s.measured_blocks];
    for (i, ops) in measured.iter().enumerate() {
        if s.checkpoint_before(i) {
            match kind {
                Kind::Bavl | Kind::BavlUnpaced => {
                    let start = now();
                    let started = store.checkpoint()?;
                    let end = now();
                    match (started, open) {
                        (None, _) => skipped += 1,
                        (Some(_), None) => {
                            open = Some((start, start));
                            call_ms.push(round((end - start) * 1e3, 3));
                        }
                        (Some(_), Some((cs, last_poll))) => {
                            // The previous checkpoint ended after the last commit's poll
                            // and was collected by this call, which started the next one.
                            intervals.push(Interval {
                                start: cs,
                                end_min: last_poll,
                                end_max: start,
                            });
                            ckpt_bytes.push(last_bytes(&store));
                            open = Some((start, start));
                            call_ms.push(round((end - start) * 1e3, 3));
                        }
                    }
                }
                Kind::Control => {}
                Kind::Baseline => {
                    let backend = backend.as_ref().expect("baseline backend");
                    let start = now();
                    let snap = store.latest();
                    let version = store.version();
                    let rep = bavl_store::checkpoint::write(backend, version, snap, &stop, None)?
                        .context("the baseline checkpoint was abandoned")?;
                    let name = bavl_store::meta::checkpoint_name(version);
                    if let Some(old) = last_baseline.replace(name) {
                        backend.remove(&old).with_context(|| format!("deleting {old}"))?;
                    }
                    let end = now();
                    intervals.push(Interval::exact(start, end));
                    ckpt_bytes.push(rep.bytes);
                }
            }
        }
        let (cpu0, tcpu0, start) = (process_cpu_secs(), thread_cpu_secs(), now());
        apply(&mut store, ops)?;
        let commit_start = now();
        store.commit()?;
        let end = now();
        let cpu = process_cpu_secs() - cpu0;
        let writer_cpu = thread_cpu_secs() - tcpu0;
        let timing = store.last_commit_timing();
        recs.push(BlockRec { start, commit_start, end, ops: ops.len() as u64 });
        details.push(Detail {
            apply_ms: (commit_start - start) * 1e3,
            hash_ms: timing.hash.as_secs_f64() * 1e3,
            persist_ms: timing.persist.as_secs_f64() * 1e3,
            cores: cpu / (end - start),
            writer_cores: writer_cpu / (end - start),
        });
        if let Some((cs, last_poll)) = open {
            // The commit polled the checkpoint thread when it began: running then means
            // it ends after `commit_start`; finished means it ended after the last poll.
            if store.checkpoint_running().is_none() {
                intervals.push(Interval { start: cs, end_min: last_poll, end_max: commit_start });
                ckpt_bytes.push(last_bytes(&store));
                open = None;
            } else {
                open = Some((cs, commit_start));
            }
        }
    }
    let measured_s = now();
    if let Some((cs, last_poll)) = open {
        store.wait_checkpoint()?;
        let end = now();
        intervals.push(Interval { start: cs, end_min: last_poll, end_max: end });
        ckpt_bytes.push(last_bytes(&store));
    }
    if let Some(r) = reference {
        let from: Vec<BlockRec> = r.classified.iter().map(|(b, _)| *b).collect();
        intervals = map_intervals(&from, &recs, &r.intervals);
    }
    let others = meter.others_cores();
    let keys_end = store.working().len();
    let root = hex(&store.root());
    drop(store);
    drop(backend);
    remove_dir(work)?;

    let wins = windows(&recs, s.window_s, measured_s, &intervals);
    let local = local_ratios(&wins, s.window_s, &intervals);
    let classified: Vec<(BlockRec, Class)> =
        recs.iter().map(|b| (*b, block_class(b, &intervals))).collect();
    let split_of = |f: &dyn Fn(&Detail) -> f64| {
        let (mut d, mut o) = (Vec::new(), Vec::new());
        for ((_, c), det) in classified.iter().zip(&details) {
            match c {
                Class::During => d.push(f(det)),
                Class::Outside => o.push(f(det)),
                Class::Edge => {}
            }
        }
        rounded(split_means(&d, &o))
    };
    let ops: u64 = recs.iter().map(|b| b.ops).sum();
    Ok(Run {
        series,
        kind: kind.name(),
        order,
        keys_start,
        keys_end,
        measured_s: round(measured_s, 3),
        ops_per_s: round(ops as f64 / measured_s, 0),
        throughput: rounded(throughput_split(&wins)),
        throughput_local: local.iter().map(|&x| round(x, 4)).collect(),
        throughput_ratio_local: round(mean(&local), 4),
        latency_p99: rounded(latency_split(&classified, 99.0)),
        latency_p50: rounded(latency_split(&classified, 50.0)),
        apply_ms: split_of(&|d| d.apply_ms),
        hash_ms: split_of(&|d| d.hash_ms),
        persist_ms: split_of(&|d| d.persist_ms),
        process_cores: split_of(&|d| d.cores),
        writer_cores: split_of(&|d| d.writer_cores),
        checkpoint_s: intervals
            .iter()
            .map(|c| round((c.end_min + c.end_max) / 2.0 - c.start, 3))
            .collect(),
        intervals: intervals
            .iter()
            .map(|c| Interval {
                start: round(c.start, 4),
                end_min: round(c.end_min, 4),
                end_max: round(c.end_max, 4),
            })
            .collect(),
        checkpoint_bytes: ckpt_bytes,
        checkpoint_call_ms: call_ms,
        skipped_checkpoints: skipped,
        others_busy_cores: round(others, 2),
        waited_for_quiet_s: round(waited, 1),
        root,
        blocks: classified
            .iter()
            .zip(&details)
            .map(|((b, c), d)| BlockOut {
                start_s: round(b.start, 4),
                end_s: round(b.end, 4),
                latency_ms: round(b.latency() * 1e3, 2),
                apply_ms: round(d.apply_ms, 2),
                hash_ms: round(d.hash_ms, 2),
                persist_ms: round(d.persist_ms, 2),
                process_cores: round(d.cores, 2),
                in_checkpoint: *c,
            })
            .collect(),
        windows: wins,
        classified,
    })
}

fn split_means(d: &[f64], o: &[f64]) -> Split {
    let (dm, om) = (mean(d), mean(o));
    Split { during: dm, outside: om, ratio: dm / om, n_during: d.len(), n_outside: o.len() }
}

pub fn rounded(s: Split) -> Split {
    Split {
        during: round(s.during, 3),
        outside: round(s.outside, 3),
        ratio: round(s.ratio, 4),
        ..s
    }
}

/// The runs of one kind pooled.
#[derive(Clone, Debug, Serialize)]
pub struct KindSummary {
    pub runs: usize,
    /// Windows of every run of this kind pooled.
    pub throughput: Split,
    /// Mean of the per-checkpoint local ratios of every run of this kind.
    pub throughput_ratio_local: f64,
    /// Blocks of every run of this kind pooled.
    pub latency_p99: Split,
    pub latency_p50: Split,
    pub ops_per_s: f64,
    pub checkpoint_s: Vec<f64>,
    pub checkpoint_s_mean: f64,
    pub checkpoint_mb_mean: f64,
    /// Means over the pooled blocks, during / outside checkpoints: where a slower block's
    /// time goes (apply: CPU and memory; hash: CPU on two threads; persist: the log's
    /// fdatasync, i.e. I/O).
    pub apply_ms: Split,
    pub hash_ms: Split,
    pub persist_ms: Split,
    pub process_cores: Split,
}

pub fn summarize(runs: &[&Run]) -> KindSummary {
    let wins: Vec<Window> = runs.iter().flat_map(|r| r.windows.iter().copied()).collect();
    let blocks: Vec<(BlockRec, Class)> =
        runs.iter().flat_map(|r| r.classified.iter().copied()).collect();
    let durations: Vec<f64> = runs.iter().flat_map(|r| r.checkpoint_s.iter().copied()).collect();
    let bytes: Vec<f64> =
        runs.iter().flat_map(|r| r.checkpoint_bytes.iter().map(|&b| b as f64)).collect();
    let ops: u64 = blocks.iter().map(|(b, _)| b.ops).sum();
    let secs: f64 = runs.iter().map(|r| r.measured_s).sum();
    let pooled = |f: &dyn Fn(&BlockOut) -> f64| {
        let (mut d, mut o) = (Vec::new(), Vec::new());
        for b in runs.iter().flat_map(|r| r.blocks.iter()) {
            match b.in_checkpoint {
                Class::During => d.push(f(b)),
                Class::Outside => o.push(f(b)),
                Class::Edge => {}
            }
        }
        rounded(split_means(&d, &o))
    };
    KindSummary {
        apply_ms: pooled(&|b| b.apply_ms),
        hash_ms: pooled(&|b| b.hash_ms),
        persist_ms: pooled(&|b| b.persist_ms),
        process_cores: pooled(&|b| b.process_cores),
        runs: runs.len(),
        throughput: rounded(throughput_split(&wins)),
        throughput_ratio_local: round(
            mean(&runs.iter().flat_map(|r| r.throughput_local.iter().copied()).collect::<Vec<_>>()),
            4,
        ),
        latency_p99: rounded(latency_split(&blocks, 99.0)),
        latency_p50: rounded(latency_split(&blocks, 50.0)),
        ops_per_s: round(ops as f64 / secs, 0),
        checkpoint_s_mean: round(mean(&durations), 3),
        checkpoint_s: durations,
        checkpoint_mb_mean: round(mean(&bytes) / 1e6, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    #[test]
    fn checkpoints_start_mid_interval_and_stop_at_the_count() {
        let s = Schedule {
            warmup_blocks: 0,
            every: 10,
            checkpoints: 3,
            measured_blocks: 35,
            window_s: 0.1,
        };
        let at: Vec<usize> = (0..s.measured_blocks).filter(|&i| s.checkpoint_before(i)).collect();
        assert_eq!(at, [5, 15, 25]);
    }
}
