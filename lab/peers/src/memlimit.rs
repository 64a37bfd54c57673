//! The `cgroup` subcommand (larger than memory, against nomt): each store's Workload B run
//! inside a cgroup v1 memory limit, at one or more initial key counts, side by side in one
//! run.
//!
//! Per (key count, store): a fresh memory group with the limit ([`bavl_peers::cgroup`]),
//! the usual child process joined to it, and afterwards the kernel's counters (peak usage,
//! limit hits, OOM kills), the child's own figures (block latencies, VmHWM, `/proc/self/io`
//! before and after the measured blocks, reopen time) and the directory's size; then a
//! second child, outside the group, reads every key back to check the final state. A child the
//! OOM killer ends is a result, not an error: it is recorded with the last progress line
//! it printed (how many keys it had loaded, or which block it was on). The JSON is
//! rewritten after every run, so a run cut short keeps what it measured.

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
use crate::memrecord::{self, one_line, record, RunRecord};
use crate::report::{self, Machine};
use crate::{remove_dir, wait_child};

#[derive(Args, Clone)]
pub struct CgroupArgs {
    /// Initial key counts, comma-separated (default 1000000,10000000; 200000 with --quick).
    #[arg(long, value_delimiter = ',')]
    keys: Option<Vec<u64>>,
    /// Stores, comma-separated, run in this order at each key count: the Rust stores of
    /// `bavl-peers list`, and `bavl-purge` and `bavl-paged-purge`: bavl and bavl-paged with
    /// mimalloc returning freed memory to the OS after 10 ms (MIMALLOC_PURGE_DELAY=10;
    /// bavl keeps it, `bavl_alloc::keep_freed_memory`, and bavl-paged returns it after
    /// 100 ms, `bavl_alloc::paged_memory`); `bavl-paged-keep`: bavl-paged keeping freed
    /// memory (MIMALLOC_PURGE_DELAY=-1, as before 2026-11-28); `bavl-paged-nothp`:
    /// bavl-paged with no transparent huge pages (MIMALLOC_ALLOW_THP=0); and
    /// `bavl-paged-bounded`: that and freed memory returned after 1 s
    /// (`bavl_alloc::bounded_memory`, by environment); `bavl-paged-heap`: bavl-paged with
    /// `Options::cache_counts_slack` off (its budget counts heap bytes only).
    #[arg(long, value_delimiter = ',', default_value = "nomt,bavl,bavl-paged,bavl-paged-cached")]
    stores: Vec<String>,
    /// The memory limit of each store's group, e.g. 2GiB (default 2GiB; 1GiB with --quick:
    /// nomt's smallest hash table, 64,000 buckets, alone keeps ~480 MB resident, and under
    /// 512 MiB it was OOM-killed at 200k keys). Several, comma-separated, run each store
    /// once per limit (with --preload, on copies of one loaded state).
    #[arg(long, value_delimiter = ',')]
    memory_limit: Option<Vec<String>>,
    /// For the stores meant to outgrow memory (nomt, bavl-paged): load the initial state in
    /// a loader process outside the memory group (commits of 100,000 keys; bavl-paged with
    /// nothing evicted, then a checkpoint), and have the measured process inside the group
    /// open it (`open_s`) and run only the blocks. The load is then not a measurement under
    /// the limit; it is what makes 30M keys take minutes, not hours. The in-memory stores
    /// (bavl, bavl-purge, bavl-paged-cached) still load inside the group, where they die
    /// (or, cached, hold every body as they go).
    #[arg(long)]
    preload: bool,
    /// Run the in-memory stores (`bavl`, `bavl-purge`, `bavl-paged-cached`) only at key
    /// counts up to this many (the in-memory bavl dies long before 30M under 2 GiB; running
    /// it there again only repeats that).
    #[arg(long)]
    in_memory_up_to: Option<u64>,
    /// Measured blocks (default 10; 3 with --quick).
    #[arg(long)]
    blocks: Option<u64>,
    /// Unmeasured blocks after the load (default 2; 1 with --quick).
    #[arg(long)]
    warmup_blocks: Option<u64>,
    /// Operations per block.
    #[arg(long, default_value_t = 10_000)]
    ops: u32,
    /// Initial keys per commit while loading (the `run` subcommand loads in commits of
    /// 100,000: nomt's page pool never shrinks and holds every page such a commit touches,
    /// which OOM-killed it at 4M keys under 2 GiB).
    #[arg(long, default_value_t = 10_000)]
    load_batch: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Smoke run: 200k keys, 1 + 3 blocks, 1 GiB (a few seconds).
    #[arg(long)]
    quick: bool,
    /// Where the stream and the stores' directories go (a real disk; default
    /// <repo>/target/paged-bench). Removed afterwards unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long)]
    keep: bool,
    /// JSON report (default docs/results/paged.json); the PNG goes beside it,
    /// `A-B.json` -> `A/B.png` (docs/results/paged/baseline.png), `X.json` -> `X/X.png`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Give up on a store's child after this many seconds.
    #[arg(long, default_value_t = 3600)]
    child_timeout_s: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    benchmark: &'static str,
    command: String,
    date_unix_s: u64,
    wall_time_s: f64,
    machine: &'a Machine,
    params: serde_json::Value,
    notes: Vec<&'static str>,
    /// The larger-than-memory targets from these runs (`memtargets`).
    targets: serde_json::Value,
    runs: &'a [RunRecord],
}

const NOTES: &[&str] = &[
    "bavl is the in-memory bavl_store::Store (whole state and retained versions in RAM); bavl-paged is the same store with Options::cache_bytes (docs/design.md §8.5.1: chunk bodies beyond the budget in its durable chunk files, loaded and verified on demand; a block's chunks prefetched on up to 16 threads; a checkpoint every 4 MiB of log, Options::paged), budget twice nomt's cache (nomt_cache_mib_each: 512 MiB at 2 GiB, 256 MiB at 1 GiB); bavl-paged-cached is bavl-paged with a 1 TiB budget (nothing evicted: the paged code path's own cost). bavl-paged counts the allocator's slack against its budget (Options::cache_counts_slack, the default since 2026-11-28 evening: it evicts to the budget divided by the memory the process gained per byte of body and skeleton counted; store_extra.paging.slack_permille is that factor at the last block); bavl-paged-heap is bavl-paged with it off (the budget counts the bodies' heap bytes, as before). Every bavl keeps 4 versions (keep_recent 4); nomt keeps one.",
    "--preload (params.preload), for nomt and bavl-paged only: the initial state is committed by a loader process outside the memory group (commits of 100,000 keys; bavl-paged with nothing evicted, then a checkpoint: every chunk body in a chunk file and a skeleton), copied, and opened by the measured process inside the group (open_s); load_s is the loader's. The in-memory stores (bavl, bavl-paged-cached), and every store without --preload, load inside the group in commits of load_batch keys.",
    "Before each measured process starts, the page cache is dropped (the store's files fsynced; /proc/sys/vm/drop_caches = 1): the store's files were written or copied outside the group, and their cached pages, charged elsewhere, would otherwise be read free by a store that reads through the page cache (bavl) while nomt reads with O_DIRECT.",
    "store_extra.cache_hit_rate (bavl-paged): operations whose key's chunk was resident when their block began, over every block after the load (warm-up included); store_extra.paging.loads: chunk bodies read back (the warm-up and measured blocks, and the reopen's none).",
    "Each store runs in its own child process inside its own cgroup v1 memory group (memory.limit_in_bytes = the limit, memory.swappiness = 0; no swap on the machine): anonymous memory and the page cache the child fills count; the kernel reclaims cache at the limit and OOM-kills when it cannot.",
    "cgroup_peak_bytes: memory.max_usage_in_bytes over the child's life (page cache included, so it approaches the limit whenever a store writes more than the limit); cgroup_peak_before_readback_bytes: the same read by the child after the last block, before it reads every key back; rss_peak_bytes: VmHWM after the last block.",
    "limit_hits: memory.failcnt (times usage reached the limit and the kernel had to reclaim); oom_kills: oom_kill of memory.oom_control.",
    "ram_bytes_per_key and cgroup_bytes_per_key: rss_peak_bytes and cgroup_peak_before_readback_bytes over keys_final; disk_bytes_per_key: the store directory's allocated bytes after the run over keys_final.",
    "write_bytes_per_op and read_bytes_per_op: /proc/self/io write_bytes and read_bytes of the child over the measured blocks, per operation (all threads, io_uring workers included; buffered writes count when dirtied); pages_4k_read_per_op = read_bytes_per_op / 4096.",
    "The block stream is written by the parent (outside the group), so the child reads it from the page cache charged to the parent; the parent holds the generated state in a BTreeMap while generating (not charged to the group).",
    "Every child runs on mimalloc as the `bavl` binary ships: an in-memory store (bavl, bavl-paged-cached) keeps the memory it frees (bavl_alloc::keep_freed_memory), so its resident set never falls below its high-water mark; a store with a bounded budget (bavl-paged and its variants) returns freed memory after 100 ms (bavl_alloc::paged_memory, since 2026-11-28; kept before), huge pages still allowed. `bavl-purge` and `bavl-paged-purge` run with MIMALLOC_PURGE_DELAY=10 (freed memory returned after 10 ms); `bavl-paged-keep` with MIMALLOC_PURGE_DELAY=-1 (freed memory kept, as bavl-paged ran before 2026-11-28); `bavl-paged-nothp` with MIMALLOC_ALLOW_THP=0 (no transparent huge pages); `bavl-paged-bounded` with MIMALLOC_ALLOW_THP=0 MIMALLOC_PURGE_DELAY=1000 (what bavl_alloc::bounded_memory sets: no transparent huge pages, freed memory returned after 1 s). nomt's page pool is its own mmap and never shrinks either way.",
    "The final state (key count and digest of every key the stream ever wrote) is checked by a second child process outside the memory group, after the measured one has closed the store: that read-back holds the sorted list of keys (200 MB at 10M) and is a check, not a measurement (inside the group, nomt at 10M was OOM-killed by it after its last block).",
    "reopen_s: opening the closed store again inside the same group (bavl: Store::open, checkpoint load + log replay; nomt: Nomt::open).",
];

fn defaults(a: &CgroupArgs) -> Result<(Vec<u64>, Vec<u64>, u64, u64)> {
    let keys =
        a.keys.clone().unwrap_or(if a.quick { vec![200_000] } else { vec![1_000_000, 10_000_000] });
    let given = a.memory_limit.clone();
    let limits = given.unwrap_or(vec![if a.quick { "1GiB" } else { "2GiB" }.into()]);
    let limit = limits
        .iter()
        .map(|l| cgroup::parse_size(l).context("--memory-limit"))
        .collect::<Result<Vec<u64>>>()?;
    let blocks = a.blocks.unwrap_or(if a.quick { 3 } else { 10 });
    let warmup = a.warmup_blocks.unwrap_or(if a.quick { 1 } else { 2 });
    Ok((keys, limit, blocks, warmup))
}

/// Makes the store's pages clean (every file under `dir` fsynced), then drops the kernel's
/// clean page cache (`/proc/sys/vm/drop_caches` = 1; root). Not a system-wide `sync`: on a
/// machine shared with other builds that waited for everyone's dirty data, about a minute
/// per measured process.
fn drop_page_cache(dir: &std::path::Path) -> Result<()> {
    fsync_tree(dir).with_context(|| format!("fsyncing {}", dir.display()))?;
    std::fs::write("/proc/sys/vm/drop_caches", "1")
        .context("dropping the page cache before a measured run (needs root)")
}

/// fsyncs every file and directory under `path` (nothing if it does not exist).
fn fsync_tree(path: &std::path::Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            fsync_tree(&entry?.path())?;
        }
    } else if !meta.is_file() {
        return Ok(());
    }
    std::fs::File::open(path)?.sync_all()
}

/// Keys per commit of a loader outside the memory group.
const PRELOAD_BATCH: usize = 100_000;

/// `cp -a` of a loaded store's directory (reflinked where the file system can).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    let st = Command::new("cp").arg("-a").arg("--reflink=auto").arg(from).arg(to).status()?;
    anyhow::ensure!(st.success(), "cp -a {} {}: {st}", from.display(), to.display());
    Ok(())
}

/// nomt's page and leaf caches for a memory limit: an eighth of it each (its default of
/// 256 MiB each at 2 GiB), so that its caches take a quarter and leave room for its hash
/// table's metadata, io buffers and the kernel's page cache.
pub fn nomt_cache_mib(limit: u64) -> usize {
    ((limit >> 20) / 8).max(16) as usize
}

/// The child's store and environment for a store name of this subcommand.
fn child_store(name: &str) -> (&str, &'static [(&'static str, &'static str)]) {
    match name {
        "bavl-purge" => ("bavl", &[("MIMALLOC_PURGE_DELAY", "10")]),
        "bavl-paged-purge" => ("bavl-paged", &[("MIMALLOC_PURGE_DELAY", "10")]),
        // Freed memory kept, as bavl-paged ran before `bavl_alloc::paged_memory`.
        "bavl-paged-keep" => ("bavl-paged", &[("MIMALLOC_PURGE_DELAY", "-1")]),
        // Transparent huge pages off only (`bavl_alloc::no_transparent_huge_pages`).
        "bavl-paged-nothp" => ("bavl-paged", &[("MIMALLOC_ALLOW_THP", "0")]),
        // What `bavl_alloc::bounded_memory` sets, by environment.
        "bavl-paged-bounded" => {
            ("bavl-paged", &[("MIMALLOC_ALLOW_THP", "0"), ("MIMALLOC_PURGE_DELAY", "1000")])
        }
        n => (n, &[]),
    }
}

pub fn run(a: CgroupArgs) -> Result<()> {
    let wall = Instant::now();
    let root = bavl_labkit::repo_root();
    let (keys_list, limits, blocks, warmup) = defaults(&a)?;
    let limit = limits.iter().copied().max().unwrap_or(1 << 31);
    for n in &a.stores {
        let n = child_store(n).0;
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
    let out = a.out.clone().unwrap_or_else(|| root.join("docs/results/paged.json"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let fs = report::fs_type(&dir);
    if matches!(fs.as_str(), "tmpfs" | "ramfs") {
        bail!("{} is on {fs}: pass --dir on a real disk", dir.display());
    }
    let mut machine = report::machine("go");
    let params = serde_json::json!({
        "quick": a.quick, "initial_keys": keys_list, "stores": a.stores,
        "memory_limit_bytes": limits, "preload": a.preload,
        "in_memory_up_to": a.in_memory_up_to, "page_cache_dropped_before_each_run": true,
        "warmup_blocks": warmup, "blocks": blocks,
        "ops_per_block": a.ops, "key_bytes": bavl_workload::KEY_LEN,
        "value_bytes": bavl_workload::VALUE_LEN,
        "mix": "Workload B: 40% inserts, 50% updates, 10% deletes, fsync per block",
        "load_batch": a.load_batch, "seed": a.seed,
        "dir": dir.display().to_string(), "dir_fs": fs,
        "nomt_cache_mib_each": limits.iter().map(|&l| nomt_cache_mib(l)).collect::<Vec<_>>(),
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
            let in_memory = matches!(name.as_str(), "bavl" | "bavl-purge" | "bavl-paged-cached");
            if in_memory && a.in_memory_up_to.is_some_and(|n| keys > n) {
                continue;
            }
            let (store, env) = child_store(name);
            let pre_dir = dir.join(format!("pre-{name}"));
            // The loader, outside any group (--preload).
            let loaded = if a.preload && !in_memory {
                remove_dir(&pre_dir)?;
                eprintln!("\n== {name}, {keys} keys: loading outside the memory group ==");
                let mut c = Command::new(std::env::current_exe()?);
                c.arg("child").args(["--store", store]).arg("--stream").arg(&stream_path);
                c.envs(env.iter().copied()).arg("--dir").arg(&pre_dir).arg("--load-only");
                c.arg("--expected-keys").arg(expected.keys.to_string());
                c.arg("--load-batch").arg(PRELOAD_BATCH.to_string());
                c.arg("--bavl-cache-mib").arg((adapters::CACHED_BUDGET_BYTES >> 20).to_string());
                let timeout = Duration::from_secs(a.child_timeout_s);
                Some(wait_child(c, timeout).and_then(|e| {
                    anyhow::ensure!(e.status.success(), "{}: {}", e.status, e.last_lines(3));
                    e.report()
                }))
            } else {
                None
            };
            for &limit in &limits {
                eprintln!("\n== {name}, {keys} keys, limit {} MiB ==", limit >> 20);
                let store_dir = dir.join(format!("store-{name}"));
                remove_dir(&store_dir)?;
                let mut c = Command::new(std::env::current_exe()?);
                c.arg("child").args(["--store", store]).arg("--stream").arg(&stream_path);
                match &loaded {
                    Some(Ok(_)) => {
                        copy_dir(&pre_dir, &store_dir)?;
                        c.arg("--preloaded");
                    }
                    Some(Err(e)) => {
                        let mut rec = memrecord::failed(name, keys, limit, e);
                        rec.error = Some(format!("loading outside the group: {e:#}"));
                        eprintln!("  {}", one_line(&rec));
                        runs.push(rec);
                        continue;
                    }
                    None => {
                        c.arg("--load-batch").arg(a.load_batch.to_string());
                    }
                }
                // The store's files were written (and copied) outside the group: their
                // pages, in the page cache, are charged to this process, not the child's
                // group, and a store reading through the page cache (bavl) would read them
                // free while one reading with O_DIRECT (nomt) pays. Every measured child
                // starts with nothing of them cached.
                drop_page_cache(&store_dir)?;
                let g = MemCgroup::create(&format!("{name}-{keys}"), limit)?;
                c.envs(env.iter().copied());
                c.arg("--dir").arg(&store_dir);
                c.arg("--expected-keys").arg(expected.keys.to_string());
                c.arg("--cgroup").arg(g.path()).arg("--reopen").arg("--no-read-back");
                c.arg("--nomt-cache-mib").arg(nomt_cache_mib(limit).to_string());
                let t = Instant::now();
                let ended = wait_child(c, Duration::from_secs(a.child_timeout_s));
                let child_wall_s = t.elapsed().as_secs_f64();
                let stats = g.stats()?;
                g.remove()?;
                let disk = report::disk_usage(&store_dir);
                // The read-back (every key ever written, sorted in memory: 200 MB at 10M)
                // is a check, not a measurement: a second child does it outside the group.
                let readback = match &ended {
                    Ok(e) if e.status.success() => {
                        eprintln!("  reading every key back (outside the memory group)");
                        let mut c = Command::new(std::env::current_exe()?);
                        c.arg("child").args(["--store", store]).arg("--stream").arg(&stream_path);
                        c.arg("--dir").arg(&store_dir);
                        c.arg("--expected-keys").arg(expected.keys.to_string());
                        c.arg("--read-back-only");
                        let timeout = Duration::from_secs(a.child_timeout_s);
                        Some(wait_child(c, timeout).and_then(|e| {
                            anyhow::ensure!(
                                e.status.success(),
                                "{}: {}",
                                e.status,
                                e.last_lines(3)
                            );
                            e.report()
                        }))
                    }
                    _ => None,
                };
                let mut rec =
                    record(name, keys, &stats, ended, readback, disk.allocated_bytes, &expected);
                rec.child_wall_s = (child_wall_s * 100.0).round() / 100.0;
                if let Some(Ok(l)) = &loaded {
                    memrecord::loaded_outside(&mut rec, l);
                }
                eprintln!("  {}", one_line(&rec));
                runs.push(rec);
                if !a.keep {
                    remove_dir(&store_dir)?;
                }
                machine.finish();
                write(&out, &machine, &command, &params, &runs, wall.elapsed().as_secs_f64())?;
            }
            if !a.keep {
                remove_dir(&pre_dir)?;
            }
        }
        if !a.keep {
            std::fs::remove_file(&stream_path).ok();
        }
    }
    let png = png_path(&out);
    match memplot::plot(&png, &runs, limit) {
        Ok(()) => eprintln!("plot: {}", png.display()),
        Err(e) => eprintln!("no plot: {e:#}"),
    }
    for r in &runs {
        println!("{}", one_line(r));
    }
    let bad: Vec<String> = runs
        .iter()
        .filter(|r| !(r.status == "ok" || (r.status == "oom-killed" && !a.quick)))
        .map(one_line)
        .collect();
    if !bad.is_empty() {
        // An OOM kill is a measurement in a full run; the smoke's sizes must all fit.
        bail!("{} run(s) did not end in the expected state:\n{}", bad.len(), bad.join("\n"));
    }
    Ok(())
}

/// Draws the PNG of the report `json` again (to `out`, or beside it as `cgroup` does).
pub fn replot(json: &std::path::Path, out: Option<PathBuf>) -> Result<()> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("the report is not JSON")?;
    let runs: Vec<RunRecord> =
        serde_json::from_value(v["runs"].clone()).context("the report's runs")?;
    let limit = runs.iter().map(|r| r.memory_limit_bytes).max().unwrap_or(1 << 31);
    let png = out.unwrap_or_else(|| png_path(json));
    memplot::plot(&png, &runs, limit)?;
    eprintln!("plot: {}", png.display());
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
        benchmark: "paged: Workload B inside a cgroup v1 memory limit (larger than memory)",
        command: command.to_string(),
        date_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        wall_time_s: (wall_s * 10.0).round() / 10.0,
        machine,
        params: params.clone(),
        notes: NOTES.to_vec(),
        targets: crate::memtargets::targets(runs),
        runs,
    };
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(&rep)? + "\n")
        .with_context(|| format!("writing {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_next_to_json() {
        let p = png_path(std::path::Path::new("docs/results/paged-baseline.json"));
        assert_eq!(p, PathBuf::from("docs/results/paged/baseline.png"));
        let q = png_path(std::path::Path::new("/tmp/x.json"));
        assert_eq!(q, PathBuf::from("/tmp/x/x.png"));
    }
}
