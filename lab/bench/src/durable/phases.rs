//! The durable-throughput, reopen and memory phases of the store benchmark.

use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use bavl_labkit::stats::percentile;
use bavl_store::{CheckpointPolicy, Options, Recovery, Store};
use serde::Serialize;

use super::ram::{self, RamSample};
use super::util::{
    apply, kernel_write_bytes, load, next_block, process_cpu_secs, remove_dir, round, OPS,
    RAW_BYTES_PER_KEY,
};
use crate::workload::{wait_for_quiet, CpuMeter};

/// Workload B blocks on a store with the default options (automatic checkpoints).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Durable {
    pub keys_loaded: usize,
    pub load_s: f64,
    pub warmup_blocks: usize,
    pub measured_blocks: usize,
    pub ops: u64,
    pub keys_after: u64,
    /// Sum over the measured blocks of the time from a block's first operation to its
    /// `commit()` returning.
    pub store_time_s: f64,
    /// Wall time of the measured loop, including the benchmark drawing each block's
    /// operations (random keys and values; updates and deletes look existing keys up).
    pub loop_time_s: f64,
    pub durable_ops_per_s: f64,
    pub durable_ops_per_s_incl_generation: f64,
    pub generation_ms_mean: f64,
    pub commit_latency_ms_p50: f64,
    pub commit_latency_ms_p90: f64,
    pub commit_latency_ms_p99: f64,
    pub commit_latency_ms_max: f64,
    /// Applying the block's operations to the tree (before `commit()`).
    pub apply_ms_p50: f64,
    /// `Store::last_commit_timing().hash`: rehashing the changed part of the tree.
    pub hash_ms_p50: f64,
    pub hash_ms_p99: f64,
    /// `Store::last_commit_timing().persist`: appending the log record and `fdatasync`.
    pub persist_ms_p50: f64,
    pub persist_ms_p99: f64,
    pub apply_ms_mean: f64,
    pub hash_ms_mean: f64,
    pub persist_ms_mean: f64,
    pub log_bytes_per_block_mean: f64,
    /// Automatic checkpoints started during the measured blocks (each waited for after
    /// the last block, so that its bytes are counted).
    pub checkpoints_during_measurement: u64,
    pub log_bytes: u64,
    pub checkpoint_bytes: u64,
    pub kernel_write_bytes: u64,
    pub bytes_written_per_updated_key: f64,
    pub bytes_written_per_updated_key_kernel: f64,
    pub bytes_written_per_updated_key_log_only: f64,
    /// Log bytes per operation plus the checkpoint bytes the default policy writes per
    /// operation in the long run (a checkpoint of the state's size each time the log
    /// reaches `max(min_log_bytes, log_ratio x checkpoint size)`).
    pub bytes_written_per_updated_key_steady_state: f64,
    pub checkpoint_bytes_last: u64,
    /// CPU time of the whole process over the store time (2 = both cores busy).
    pub process_cores: f64,
    pub others_busy_cores: f64,
    pub waited_for_quiet_s: f64,
}

/// Loads `keys`, runs warm-up blocks, then measures `blocks` blocks.
pub fn durable(
    dir: &Path,
    seed: u64,
    keys: usize,
    warmup: usize,
    blocks: usize,
    wait_quiet: f64,
) -> Result<Durable> {
    remove_dir(dir)?;
    let opts = Options::in_memory();
    let (ratio, min_log) = match opts.checkpoint {
        CheckpointPolicy::Auto { log_ratio, min_log_bytes } => (log_ratio, min_log_bytes),
        CheckpointPolicy::Manual => (f64::INFINITY, 0),
    };
    let mut store = Store::open(dir, opts)?;
    let load_s = load(&mut store, seed, keys)?;
    store.wait_checkpoint()?;
    for _ in 0..warmup {
        let ops = next_block(&store, seed);
        apply(&mut store, &ops)?;
        store.commit()?;
    }
    store.wait_checkpoint()?;
    let waited = wait_for_quiet(wait_quiet, 0.3);

    let meter = CpuMeter::start();
    let before = store.stats()?;
    let io0 = kernel_write_bytes();
    let cpu0 = process_cpu_secs();
    let (mut lat, mut apply_ms, mut hash_ms, mut persist_ms, mut gen_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut ops_total = 0u64;
    let mut log_bytes = 0u64;
    let loop_start = Instant::now();
    for _ in 0..blocks {
        let g = Instant::now();
        let ops = next_block(&store, seed);
        gen_ms.push(g.elapsed().as_secs_f64() * 1e3);
        let t0 = Instant::now();
        apply(&mut store, &ops)?;
        let t1 = Instant::now();
        store.commit()?;
        let t2 = Instant::now();
        let timing = store.last_commit_timing();
        lat.push((t2 - t0).as_secs_f64() * 1e3);
        apply_ms.push((t1 - t0).as_secs_f64() * 1e3);
        hash_ms.push(timing.hash.as_secs_f64() * 1e3);
        persist_ms.push(timing.persist.as_secs_f64() * 1e3);
        ops_total += ops.len() as u64;
        log_bytes += timing.log_bytes;
    }
    let loop_s = loop_start.elapsed().as_secs_f64();
    let cpu = process_cpu_secs() - cpu0;
    let others = meter.others_cores();
    // Checkpoints started during the blocks are counted whole: wait for them (untimed).
    store.wait_checkpoint()?;
    let after = store.stats()?;
    let io = kernel_write_bytes() - io0;
    let keys_after = after.keys;
    let last_ckpt = after
        .files
        .iter()
        .filter(|(n, _)| n.starts_with("ckpt-") && n.ends_with(".bavl"))
        .map(|(_, l)| *l)
        .max()
        .unwrap_or(0);
    let last_ckpt = if last_ckpt > 0 {
        last_ckpt
    } else {
        // No checkpoint yet (a small state): write one, untimed, to know its size.
        store.checkpoint()?;
        store.wait_checkpoint()?.map_or(0, |r| r.bytes)
    };
    store.close()?;
    remove_dir(dir)?;

    ensure!(after.log_bytes_written - before.log_bytes_written == log_bytes, "log bytes differ");
    let store_s: f64 = lat.iter().sum::<f64>() / 1e3;
    let ckpt_bytes = after.checkpoint_bytes_written - before.checkpoint_bytes_written;
    let per = |b: f64| b / ops_total as f64;
    let mean = bavl_labkit::stats::mean;
    let log_per_op = per(log_bytes as f64);
    let interval_log = (ratio * last_ckpt as f64).max(min_log as f64);
    let steady = log_per_op * (1.0 + last_ckpt as f64 / interval_log);
    Ok(Durable {
        keys_loaded: keys,
        load_s: round(load_s, 3),
        warmup_blocks: warmup,
        measured_blocks: blocks,
        ops: ops_total,
        keys_after,
        store_time_s: round(store_s, 4),
        loop_time_s: round(loop_s, 4),
        durable_ops_per_s: round(ops_total as f64 / store_s, 0),
        durable_ops_per_s_incl_generation: round(ops_total as f64 / loop_s, 0),
        generation_ms_mean: round(mean(&gen_ms), 3),
        commit_latency_ms_p50: round(percentile(&lat, 50.0), 3),
        commit_latency_ms_p90: round(percentile(&lat, 90.0), 3),
        commit_latency_ms_p99: round(percentile(&lat, 99.0), 3),
        commit_latency_ms_max: round(percentile(&lat, 100.0), 3),
        apply_ms_p50: round(percentile(&apply_ms, 50.0), 3),
        hash_ms_p50: round(percentile(&hash_ms, 50.0), 3),
        hash_ms_p99: round(percentile(&hash_ms, 99.0), 3),
        persist_ms_p50: round(percentile(&persist_ms, 50.0), 3),
        persist_ms_p99: round(percentile(&persist_ms, 99.0), 3),
        apply_ms_mean: round(mean(&apply_ms), 3),
        hash_ms_mean: round(mean(&hash_ms), 3),
        persist_ms_mean: round(mean(&persist_ms), 3),
        log_bytes_per_block_mean: round(log_bytes as f64 / blocks.max(1) as f64, 0),
        checkpoints_during_measurement: after.checkpoints_written - before.checkpoints_written,
        log_bytes,
        checkpoint_bytes: ckpt_bytes,
        kernel_write_bytes: io,
        bytes_written_per_updated_key: round(per((log_bytes + ckpt_bytes) as f64), 1),
        bytes_written_per_updated_key_kernel: round(per(io as f64), 1),
        bytes_written_per_updated_key_log_only: round(log_per_op, 1),
        bytes_written_per_updated_key_steady_state: round(steady, 1),
        checkpoint_bytes_last: last_ckpt,
        process_cores: round(cpu / store_s, 2),
        others_busy_cores: round(others, 2),
        waited_for_quiet_s: round(waited, 1),
    })
}

/// One timed `Store::open` and what it reported.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Reopen {
    pub ms: f64,
    pub keys: u64,
    pub head: u64,
    /// The checkpoint loaded (`Recovery::checkpoint`).
    pub checkpoint: Option<u64>,
    /// Loading and verifying the checkpoint (`Recovery::load_checkpoint`).
    pub load_checkpoint_ms: f64,
    /// Versions replayed from the log, and the time it took.
    pub replayed_versions: u64,
    pub replay_ms: f64,
    pub replayed_ops: u64,
    pub discarded_bytes: u64,
    pub disk_bytes: u64,
    /// Log bytes on disk (what replay reads).
    pub log_bytes_on_disk: u64,
}

fn timed_open(dir: &Path, opts: Options) -> Result<(Store, Reopen)> {
    let t = Instant::now();
    let store = Store::open(dir, opts)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let r: &Recovery = store.recovery();
    let s = store.stats()?;
    let log_bytes_on_disk =
        s.files.iter().filter(|(n, _)| n.starts_with("wal-")).map(|(_, l)| *l).sum();
    let reopen = Reopen {
        ms: round(ms, 2),
        keys: s.keys,
        head: s.head,
        checkpoint: r.checkpoint,
        load_checkpoint_ms: round(r.load_checkpoint.as_secs_f64() * 1e3, 2),
        replayed_versions: r.replayed,
        replay_ms: round(r.replay.as_secs_f64() * 1e3, 2),
        // Every replayed version is one Workload B block.
        replayed_ops: r.replayed * OPS as u64,
        discarded_bytes: r.discarded_bytes,
        disk_bytes: s.disk_bytes,
        log_bytes_on_disk,
    };
    Ok((store, reopen))
}

/// Reopen times: right after a checkpoint, and with a long log tail.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReopenPhase {
    pub keys_loaded: usize,
    /// Blocks committed after the checkpoint (of the newest version) before the reopen:
    /// with the default keep_recent 4, the 3 that prune every version older than it, so
    /// that the files before it go and the reopen replays those 3 from the log.
    pub blocks_after_checkpoint: usize,
    pub checkpoint_version: u64,
    pub checkpoint_bytes: u64,
    pub checkpoint_s: f64,
    pub after_checkpoint: Reopen,
    /// Blocks committed after that (checkpoints off) before the second reopen.
    pub tail_blocks: usize,
    pub with_log: Reopen,
}

/// Builds a store of `keys`, checkpoints it, reopens (timed), commits `tail` more blocks
/// without checkpoints, reopens again (timed). The page cache is warm in both (the
/// files were just written): this is the CPU cost of opening, not a cold disk read.
pub fn reopen(
    dir: &Path,
    seed: u64,
    keys: usize,
    tail: impl FnOnce(u64) -> usize,
) -> Result<ReopenPhase> {
    remove_dir(dir)?;
    let manual = Options { checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let mut store = Store::open(dir, manual.clone())?;
    load(&mut store, seed, keys)?;
    store.checkpoint()?.context("a checkpoint was already running")?;
    let rep = store.wait_checkpoint()?.context("the checkpoint was abandoned")?;
    let after = (manual.keep_recent - 1) as usize;
    for _ in 0..after {
        let ops = next_block(&store, seed);
        apply(&mut store, &ops)?;
        store.commit()?;
    }
    store.close()?;

    let (mut store, after_checkpoint) = timed_open(dir, manual.clone())?;
    let tail_blocks = tail(rep.bytes);
    for _ in 0..tail_blocks {
        let ops = next_block(&store, seed);
        apply(&mut store, &ops)?;
        store.commit()?;
    }
    store.close()?;
    let (store, with_log) = timed_open(dir, manual)?;
    drop(store);
    remove_dir(dir)?;
    Ok(ReopenPhase {
        keys_loaded: keys,
        blocks_after_checkpoint: after,
        checkpoint_version: rep.version,
        checkpoint_bytes: rep.bytes,
        checkpoint_s: round(rep.elapsed.as_secs_f64(), 3),
        after_checkpoint,
        tail_blocks,
        with_log,
    })
}

/// Memory per key of an opened store, measured in a child process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ram {
    pub keys: u64,
    /// Seconds to build the store (bulk load in commits of 100k keys, one checkpoint).
    pub build_s: f64,
    /// (VmRSS with the store open - VmRSS before) / keys.
    pub ram_bytes_per_key: f64,
    /// (VmHWM - VmRSS before) / keys: the peak while opening.
    pub peak_bytes_per_key: f64,
    /// After `malloc_trim(0)`: what the tree holds, without the allocator's free pages.
    pub trimmed_bytes_per_key: f64,
    pub raw_bytes_per_key: u64,
    pub disk_bytes_per_key: f64,
    pub sample: RamSample,
}

impl Ram {
    pub fn from_sample(s: RamSample, build_s: f64) -> Ram {
        let k = s.keys.max(1) as f64;
        let d = |b: u64| round(b.saturating_sub(s.rss_before_bytes) as f64 / k, 1);
        Ram {
            keys: s.keys,
            build_s: round(build_s, 2),
            ram_bytes_per_key: d(s.rss_open_bytes),
            peak_bytes_per_key: d(s.hwm_bytes),
            trimmed_bytes_per_key: d(s.rss_trimmed_bytes),
            raw_bytes_per_key: RAW_BYTES_PER_KEY,
            disk_bytes_per_key: round(s.disk_bytes as f64 / k, 1),
            sample: s,
        }
    }
}

/// Builds a store of exactly `keys` keys whose checkpoint is its head (keep_recent 1,
/// manual checkpoints: bulk load in commits of 100k keys, then one checkpoint), closed.
/// Returns its head version, the checkpoint's report and the build time.
pub fn build_checkpointed(
    dir: &Path,
    seed: u64,
    keys: usize,
) -> Result<(u64, bavl_store::CheckpointReport, f64)> {
    remove_dir(dir)?;
    let t = Instant::now();
    let opts =
        Options { keep_recent: 1, checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let mut store = Store::open(dir, opts)?;
    load(&mut store, seed, keys)?;
    store.checkpoint()?.context("a checkpoint was already running")?;
    let rep = store.wait_checkpoint()?.context("the checkpoint was abandoned")?;
    let head = store.version();
    ensure!(rep.version == head, "the checkpoint is not of the head");
    store.close()?;
    Ok((head, rep, t.elapsed().as_secs_f64()))
}

/// Memory per key of the store at `dir` (measured in a child process).
pub fn ram(dir: &Path, build_s: f64) -> Result<Ram> {
    Ok(Ram::from_sample(ram::measure(dir)?, build_s))
}
