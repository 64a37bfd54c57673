//! The `cgroup` subcommand (issue 20, section 2): each store's Workload B run inside a
//! cgroup v1 memory limit, at one or more initial key counts, side by side in one run.
//!
//! Per (key count, store): a fresh memory group with the limit ([`bavl_peers::cgroup`]),
//! the usual child process joined to it, and afterwards the kernel's counters (peak usage,
//! limit hits, OOM kills), the child's own figures (block latencies, VmHWM, `/proc/self/io`
//! before and after the measured blocks, reopen time) and the directory's size. A child the
//! OOM killer ends is a result, not an error: it is recorded with the last progress line
//! it printed (how many keys it had loaded, or which block it was on). The JSON is
//! rewritten after every run, so a run cut short keeps what it measured.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_peers::adapters;
use bavl_peers::cgroup::{self, MemCgroup};
use bavl_peers::stream::{self, Header};
use clap::Args;
use serde::Serialize;

use crate::memplot;
use crate::report::{self, Machine};
use crate::{remove_dir, wait_child, workspace};

#[derive(Args, Clone)]
pub struct CgroupArgs {
    /// Initial key counts, comma-separated (default 1000000,10000000; 200000 with --quick).
    #[arg(long, value_delimiter = ',')]
    keys: Option<Vec<u64>>,
    /// Stores, comma-separated, run in this order at each key count.
    #[arg(long, value_delimiter = ',', default_value = "nomt,bavl")]
    stores: Vec<String>,
    /// The memory limit of each store's group, e.g. 2GiB (default 2GiB; 1GiB with --quick:
    /// nomt's smallest hash table, 64,000 buckets, alone keeps ~480 MB resident, and under
    /// 512 MiB it was OOM-killed at 200k keys).
    #[arg(long)]
    memory_limit: Option<String>,
    /// Measured blocks (default 10; 3 with --quick).
    #[arg(long)]
    blocks: Option<u64>,
    /// Unmeasured blocks after the load (default 2; 1 with --quick).
    #[arg(long)]
    warmup_blocks: Option<u64>,
    /// Operations per block.
    #[arg(long, default_value_t = 10_000)]
    ops: u32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Smoke run: 200k keys, 1 + 3 blocks, 1 GiB (a few seconds).
    #[arg(long)]
    quick: bool,
    /// Where the stream and the stores' directories go (a real disk; default
    /// <workspace>/target/paged-bench). Removed afterwards unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long)]
    keep: bool,
    /// JSON report (default docs/results/paged-baseline.json; the PNG goes to the directory
    /// named after it without `-baseline.json`... i.e. docs/results/paged/baseline.png).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Give up on a store's child after this many seconds.
    #[arg(long, default_value_t = 3600)]
    child_timeout_s: u64,
}

/// One store at one key count under the limit.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    pub store: String,
    pub initial_keys: u64,
    pub memory_limit_bytes: u64,
    /// `ok`, `oom-killed`, `failed` or `wrong-state` (ended with another state than expected).
    pub status: String,
    pub error: Option<String>,
    /// The child's last progress line (where an OOM-killed run was).
    pub last_progress: Option<String>,
    /// Keys the store had committed when it died (from its last `loaded N/..` line).
    pub died_after_keys_loaded: Option<u64>,
    pub oom_kills: u64,
    pub limit_hits: u64,
    pub cgroup_peak_bytes: u64,
    pub cgroup_peak_before_readback_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    pub rss_peak_after_load_bytes: Option<u64>,
    pub keys_final: Option<u64>,
    pub state_matches: Option<bool>,
    pub ops_measured: u64,
    pub ops_per_s: Option<f64>,
    pub commit_p50_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
    pub commit_max_ms: Option<f64>,
    pub ram_bytes_per_key: Option<f64>,
    pub cgroup_bytes_per_key: Option<f64>,
    pub disk_bytes: u64,
    pub disk_bytes_per_key: Option<f64>,
    pub write_bytes_per_op: Option<f64>,
    pub read_bytes_per_op: Option<f64>,
    pub pages_4k_read_per_op: Option<f64>,
    pub load_s: Option<f64>,
    pub load_write_bytes_per_key: Option<f64>,
    pub reopen_s: Option<f64>,
    pub verify_s: Option<f64>,
    pub child_wall_s: f64,
    pub block_ms: Vec<f64>,
    /// What the store reports about itself (scalars only).
    pub store_extra: serde_json::Value,
}

#[derive(Serialize)]
struct Report<'a> {
    benchmark: &'static str,
    issue: u32,
    command: String,
    date_unix_s: u64,
    wall_time_s: f64,
    machine: &'a Machine,
    params: serde_json::Value,
    notes: Vec<&'static str>,
    runs: &'a [RunRecord],
}

const NOTES: &[&str] = &[
    "Baseline before the paged store: bavl is today's in-memory bavl_store::Store (whole state and retained versions in RAM); `paged.json` with the issue's target names comes with the paged store.",
    "Each store runs in its own child process inside its own cgroup v1 memory group (memory.limit_in_bytes = the limit, memory.swappiness = 0; no swap on the machine): anonymous memory and the page cache the child fills count; the kernel reclaims cache at the limit and OOM-kills when it cannot.",
    "cgroup_peak_bytes: memory.max_usage_in_bytes over the child's life (page cache included, so it approaches the limit whenever a store writes more than the limit); cgroup_peak_before_readback_bytes: the same read by the child after the last block, before it reads every key back; rss_peak_bytes: VmHWM after the last block.",
    "limit_hits: memory.failcnt (times usage reached the limit and the kernel had to reclaim); oom_kills: oom_kill of memory.oom_control.",
    "ram_bytes_per_key and cgroup_bytes_per_key: rss_peak_bytes and cgroup_peak_before_readback_bytes over keys_final; disk_bytes_per_key: the store directory's allocated bytes after the run over keys_final.",
    "write_bytes_per_op and read_bytes_per_op: /proc/self/io write_bytes and read_bytes of the child over the measured blocks, per operation (all threads, io_uring workers included; buffered writes count when dirtied); pages_4k_read_per_op = read_bytes_per_op / 4096.",
    "The block stream is written by the parent (outside the group), so the child reads it from the page cache charged to the parent; the parent holds the generated state in a BTreeMap while generating (not charged to the group).",
    "reopen_s: opening the closed store again inside the same group (bavl: Store::open, checkpoint load + log replay; nomt: Nomt::open).",
];

fn defaults(a: &CgroupArgs) -> Result<(Vec<u64>, u64, u64, u64)> {
    let keys =
        a.keys.clone().unwrap_or(if a.quick { vec![200_000] } else { vec![1_000_000, 10_000_000] });
    let limit = a.memory_limit.clone().unwrap_or(if a.quick { "1GiB" } else { "2GiB" }.into());
    let limit = cgroup::parse_size(&limit).context("--memory-limit")?;
    let blocks = a.blocks.unwrap_or(if a.quick { 3 } else { 10 });
    let warmup = a.warmup_blocks.unwrap_or(if a.quick { 1 } else { 2 });
    Ok((keys, limit, blocks, warmup))
}

/// nomt's page and leaf caches for a memory limit: an eighth of it each (its default of
/// 256 MiB each at 2 GiB), so that its caches take a quarter and leave room for its hash
/// table's metadata, io buffers and the kernel's page cache.
pub fn nomt_cache_mib(limit: u64) -> usize {
    ((limit >> 20) / 8).max(16) as usize
}

pub fn run(a: CgroupArgs) -> Result<()> {
    let wall = Instant::now();
    let root = workspace();
    let (keys_list, limit, blocks, warmup) = defaults(&a)?;
    for n in &a.stores {
        if adapters::info(n).is_none() || n == "iavl" {
            bail!("store {n:?} cannot run here (Rust stores of `bavl-peers list` only)");
        }
        if !adapters::compiled(n) {
            bail!(
                "{n} is not in this build: pass --features {}",
                adapters::info(n).and_then(|i| i.feature).unwrap_or("?")
            );
        }
    }
    let swept = cgroup::sweep_stale();
    if swept > 0 {
        eprintln!("removed {swept} memory group(s) left by an earlier run that was killed");
    }
    drop(MemCgroup::create("probe", limit)?);
    let dir = a.dir.clone().unwrap_or_else(|| root.join("target/paged-bench"));
    let out = a.out.clone().unwrap_or_else(|| root.join("docs/results/paged-baseline.json"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let fs = report::fs_type(&dir);
    if matches!(fs.as_str(), "tmpfs" | "ramfs") {
        bail!("{} is on {fs}: pass --dir on a real disk", dir.display());
    }
    let mut machine = Machine::probe("go");
    let params = serde_json::json!({
        "quick": a.quick, "initial_keys": keys_list, "stores": a.stores,
        "memory_limit_bytes": limit, "warmup_blocks": warmup, "blocks": blocks,
        "ops_per_block": a.ops, "key_bytes": bavl_workload::KEY_LEN,
        "value_bytes": bavl_workload::VALUE_LEN,
        "mix": "Workload B: 40% inserts, 50% updates, 10% deletes, fsync per block",
        "load_batch": bavl_peers::child::LOAD_BATCH, "seed": a.seed,
        "dir": dir.display().to_string(), "dir_fs": fs,
        "nomt_cache_mib_each": nomt_cache_mib(limit),
        "allocator": if cfg!(feature = "mimalloc") { "mimalloc (bavl-alloc)" } else { "glibc malloc" },
    });
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut runs = Vec::new();
    for &keys in &keys_list {
        let stream_path = dir.join("stream.bin");
        eprintln!(
            "generating the block stream: {keys} keys, {warmup} + {blocks} blocks of {} ops",
            a.ops
        );
        let t = Instant::now();
        let header = Header { initial_keys: keys, warmup_blocks: warmup, blocks, seed: a.seed };
        let expected = stream::generate(&stream_path, header, a.ops, |_| {})?;
        eprintln!(
            "  {:.1} s; expected final state: {} keys",
            t.elapsed().as_secs_f64(),
            expected.keys
        );
        for name in &a.stores {
            eprintln!("\n== {name}, {keys} keys, limit {} MiB ==", limit >> 20);
            let store_dir = dir.join(format!("store-{name}"));
            remove_dir(&store_dir)?;
            let g = MemCgroup::create(&format!("{name}-{keys}"), limit)?;
            let mut c = Command::new(std::env::current_exe()?);
            c.arg("child").args(["--store", name]).arg("--stream").arg(&stream_path);
            c.arg("--dir").arg(&store_dir).arg("--expected-keys").arg(expected.keys.to_string());
            c.arg("--cgroup").arg(g.path()).arg("--reopen");
            c.arg("--nomt-cache-mib").arg(nomt_cache_mib(limit).to_string());
            let t = Instant::now();
            let ended = wait_child(c, Duration::from_secs(a.child_timeout_s));
            let child_wall_s = t.elapsed().as_secs_f64();
            let stats = g.stats()?;
            g.remove()?;
            let disk = report::disk_usage(&store_dir);
            let rec =
                record(name, keys, &stats, ended, disk.allocated_bytes, child_wall_s, &expected);
            eprintln!("  {}", one_line(&rec));
            runs.push(rec);
            if !a.keep {
                remove_dir(&store_dir)?;
            }
            machine.finish();
            write(&out, &machine, &command, &params, &runs, wall.elapsed().as_secs_f64())?;
        }
        std::fs::remove_file(&stream_path).ok();
    }
    let png = png_path(&out);
    match memplot::plot(&png, &runs, limit) {
        Ok(()) => eprintln!("plot: {}", png.display()),
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    for r in &runs {
        println!("{}", one_line(r));
    }
    Ok(())
}

/// `docs/results/paged-baseline.json` → `docs/results/paged/baseline.png`; any other
/// `X.json` → `X/X.png`.
fn png_path(out: &std::path::Path) -> PathBuf {
    let stem = out.file_stem().map_or("report".into(), |s| s.to_string_lossy().to_string());
    let parent = out.parent().map(PathBuf::from).unwrap_or_default();
    match stem.split_once('-') {
        Some((dir, rest)) => parent.join(dir).join(format!("{rest}.png")),
        None => parent.join(&stem).join(format!("{stem}.png")),
    }
}

fn write(
    out: &std::path::Path,
    machine: &Machine,
    command: &str,
    params: &serde_json::Value,
    runs: &[RunRecord],
    wall_s: f64,
) -> Result<()> {
    let rep = Report {
        benchmark: "paged-baseline: Workload B inside a cgroup v1 memory limit",
        issue: 20,
        command: command.to_string(),
        date_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        wall_time_s: (wall_s * 10.0).round() / 10.0,
        machine,
        params: params.clone(),
        notes: NOTES.to_vec(),
        runs,
    };
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(&rep)? + "\n")
        .with_context(|| format!("writing {}", out.display()))
}

/// "nomt 1M: ok, 23.5k ops/s, p99 476 ms, RSS 1253 MB, cgroup 2048 MB".
pub fn one_line(r: &RunRecord) -> String {
    let mb = |b: Option<u64>| b.map_or("-".into(), |b| format!("{:.0} MB", b as f64 / 1e6));
    let mut s = format!("{} {}: {}", r.store, memplot::keys_label(r.initial_keys), r.status);
    if let Some(o) = r.ops_per_s {
        s += &format!(
            ", {o:.0} ops/s, p50 {:.1} ms, p99 {:.1} ms",
            r.commit_p50_ms.unwrap_or(0.0),
            r.commit_p99_ms.unwrap_or(0.0)
        );
    }
    s += &format!(
        ", RSS peak {}, cgroup peak {}",
        mb(r.rss_peak_bytes),
        mb(Some(r.cgroup_peak_bytes))
    );
    if let Some(k) = r.died_after_keys_loaded.filter(|_| r.status != "ok") {
        s += &format!(", died after {k} keys loaded");
    }
    if let Some(e) = &r.error {
        s += &format!(" ({e})");
    }
    s
}

fn last_loaded(tail: &[String]) -> Option<u64> {
    tail.iter().rev().find_map(|l| {
        let rest = l.split_once("] loaded ")?.1;
        rest.split('/').next()?.parse().ok()
    })
}

fn record(
    name: &str,
    keys: u64,
    stats: &cgroup::CgroupStats,
    ended: Result<crate::Ended>,
    disk_bytes: u64,
    child_wall_s: f64,
    expected: &stream::Expected,
) -> RunRecord {
    let mut r = RunRecord {
        store: name.to_string(),
        initial_keys: keys,
        memory_limit_bytes: stats.limit_bytes,
        status: "failed".into(),
        error: None,
        last_progress: None,
        died_after_keys_loaded: None,
        oom_kills: stats.oom_kills,
        limit_hits: stats.failcnt,
        cgroup_peak_bytes: stats.max_usage_bytes,
        cgroup_peak_before_readback_bytes: None,
        rss_peak_bytes: None,
        rss_peak_after_load_bytes: None,
        keys_final: None,
        state_matches: None,
        ops_measured: 0,
        ops_per_s: None,
        commit_p50_ms: None,
        commit_p99_ms: None,
        commit_max_ms: None,
        ram_bytes_per_key: None,
        cgroup_bytes_per_key: None,
        disk_bytes,
        disk_bytes_per_key: None,
        write_bytes_per_op: None,
        read_bytes_per_op: None,
        pages_4k_read_per_op: None,
        load_s: None,
        load_write_bytes_per_key: None,
        reopen_s: None,
        verify_s: None,
        child_wall_s: (child_wall_s * 100.0).round() / 100.0,
        block_ms: Vec::new(),
        store_extra: serde_json::Value::Null,
    };
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    r.last_progress = ended.tail.iter().rev().find(|l| l.starts_with('[')).cloned();
    r.died_after_keys_loaded = last_loaded(&ended.tail);
    if !ended.status.success() {
        let killed = ended.status.signal() == Some(9);
        r.status = if killed && stats.oom_kills > 0 { "oom-killed" } else { "failed" }.into();
        r.error = Some(format!("{}: {}", ended.status, ended.last_lines(3)));
        return r;
    }
    match ended.report() {
        Ok(c) => fill(&mut r, &c, expected),
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    r
}

fn fill(r: &mut RunRecord, c: &bavl_peers::child::ChildReport, expected: &stream::Expected) {
    let matches = c.keys == expected.keys && c.digest == expected.digest;
    r.status = if matches { "ok" } else { "wrong-state" }.into();
    r.state_matches = Some(matches);
    let keys = c.keys.max(1) as f64;
    let ops = c.ops_measured.max(1) as f64;
    let secs: f64 = c.block_ms.iter().sum::<f64>() / 1e3;
    r.ops_measured = c.ops_measured;
    r.ops_per_s = (secs > 0.0).then(|| (c.ops_measured as f64 / secs).round());
    let p = |q| (bavl_workload::percentile(&c.block_ms, q) * 100.0).round() / 100.0;
    r.commit_p50_ms = Some(p(50.0));
    r.commit_p99_ms = Some(p(99.0));
    r.commit_max_ms = Some(p(100.0));
    r.rss_peak_bytes = Some(c.hwm_bytes);
    r.rss_peak_after_load_bytes = Some(c.hwm_after_load_bytes);
    r.cgroup_peak_before_readback_bytes = c.cgroup_max_usage_after_blocks;
    r.keys_final = Some(c.keys);
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    r.ram_bytes_per_key = Some(r1(c.hwm_bytes as f64 / keys));
    r.cgroup_bytes_per_key = c.cgroup_max_usage_after_blocks.map(|b| r1(b as f64 / keys));
    r.disk_bytes_per_key = Some(r1(r.disk_bytes as f64 / keys));
    let (a, b) = (c.io_after_load, c.io_after_blocks);
    r.write_bytes_per_op = Some(r1(b.write_bytes.saturating_sub(a.write_bytes) as f64 / ops));
    let read = b.read_bytes.saturating_sub(a.read_bytes) as f64 / ops;
    r.read_bytes_per_op = Some(r1(read));
    r.pages_4k_read_per_op = Some((read / 4096.0 * 1000.0).round() / 1000.0);
    r.load_s = Some((c.load_s * 100.0).round() / 100.0);
    let lw = c.io_after_load.write_bytes.saturating_sub(c.io_start.write_bytes) as f64;
    r.load_write_bytes_per_key = Some(r1(lw / c.load_keys.max(1) as f64));
    r.reopen_s = c.reopen_s.map(|s| (s * 1000.0).round() / 1000.0);
    r.verify_s = Some((c.verify_s * 100.0).round() / 100.0);
    r.block_ms = c.block_ms.iter().map(|x| (x * 100.0).round() / 100.0).collect();
    if let serde_json::Value::Object(m) = &c.extra {
        let scalars = m.iter().filter(|(_, v)| !v.is_array()).map(|(k, v)| (k.clone(), v.clone()));
        r.store_extra = serde_json::Value::Object(scalars.collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_keys_from_progress() {
        let tail = vec![
            "[bavl] loaded 100000/1000000 keys (0.6 s)".to_string(),
            "[bavl] loaded 200000/1000000 keys (1.2 s)".to_string(),
            "something else".to_string(),
        ];
        assert_eq!(last_loaded(&tail), Some(200_000));
        assert_eq!(last_loaded(&tail[2..]), None);
    }

    #[test]
    fn png_next_to_json() {
        let p = png_path(std::path::Path::new("docs/results/paged-baseline.json"));
        assert_eq!(p, PathBuf::from("docs/results/paged/baseline.png"));
        let q = png_path(std::path::Path::new("/tmp/x.json"));
        assert_eq!(q, PathBuf::from("/tmp/x/x.png"));
    }
}
