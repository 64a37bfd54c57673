//! The child process's side: one store, one directory, the whole stream; prints a
//! [`ChildReport`] as one JSON line on stdout (progress goes to stderr). The Go (IAVL)
//! program prints the same fields.

use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};

use crate::adapters::Adapter;
use crate::stream::{universe, Reader, StateDigest};

/// Initial entries per commit while loading.
pub const LOAD_BATCH: usize = 100_000;

/// What a child measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChildReport {
    pub store: String,
    /// Seconds to load the initial state (in commits of [`LOAD_BATCH`] keys).
    pub load_s: f64,
    pub load_keys: u64,
    /// Per warm-up block: apply + durable commit, milliseconds (not in the figures).
    pub warmup_ms: Vec<f64>,
    /// Per measured block: apply + durable commit, milliseconds.
    pub block_ms: Vec<f64>,
    /// Per measured block: CPU time of the whole process (all threads: background
    /// writers, I/O workers, garbage collector) over the block, milliseconds, from
    /// `/proc/self/stat` (10 ms ticks: exact in sum, coarse per block).
    #[serde(default)]
    pub block_cpu_ms: Vec<f64>,
    /// Operations in the measured blocks.
    pub ops_measured: u64,
    /// VmHWM (peak resident set) after loading, and after the last block; VmRSS then.
    pub hwm_after_load_bytes: u64,
    pub hwm_bytes: u64,
    pub rss_bytes: u64,
    /// The final state read back key by key: count and digest (`stream::StateDigest`).
    pub keys: u64,
    pub digest: String,
    pub verify_s: f64,
    /// CPU seconds of the whole child process, start to report.
    #[serde(default)]
    pub cpu_s_total: f64,
    /// `/proc/self/io` at the start, after loading and after the last block (before the
    /// read-back): bytes the process made the block layer read and write.
    #[serde(default)]
    pub io_start: Io,
    #[serde(default)]
    pub io_after_load: Io,
    #[serde(default)]
    pub io_after_blocks: Io,
    /// `memory.max_usage_in_bytes` of the child's memory cgroup after the last block,
    /// before the read-back (absent outside a cgroup).
    #[serde(default)]
    pub cgroup_max_usage_after_blocks: Option<u64>,
    /// Seconds to open the closed store again (the `--reopen` flag of the child).
    #[serde(default)]
    pub reopen_s: Option<f64>,
    /// Seconds to open the store a loader child left (`--preloaded`), before the blocks.
    #[serde(default)]
    pub open_s: Option<f64>,
    /// Whatever the store reports about itself.
    #[serde(default)]
    pub extra: serde_json::Value,
}

/// Counters of `/proc/self/io` (all threads of the process, io_uring workers included).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Io {
    /// Bytes fetched from the storage layer (not served by the page cache).
    pub read_bytes: u64,
    /// Bytes sent (or, buffered, dirtied for sending) to the storage layer.
    pub write_bytes: u64,
}

impl Io {
    pub fn now() -> Io {
        let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let f = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Io { read_bytes: f("read_bytes:"), write_bytes: f("write_bytes:") }
    }
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
pub fn rss_hwm() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time of this process so far (user + system, all threads), milliseconds, from
/// `/proc/self/stat` (clock ticks of 10 ms: Linux's USER_HZ is 100).
pub fn cpu_ms() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15 of the line, 12th and 13th after the name.
    match (f.get(11), f.get(12)) {
        (Some(u), Some(st)) => (u + st) as f64 * 10.0,
        _ => f64::NAN,
    }
}

/// Replays the stream at `stream` on `store` and reads the final state back.
pub fn run(name: &str, store: Box<dyn Adapter>, stream: &Path) -> Result<ChildReport> {
    run_with_batch(name, store, stream, Load::Batches(LOAD_BATCH), true)
}

/// How a child gets the initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Commits it itself, `n` keys per commit.
    Batches(usize),
    /// Finds it in the store already (a loader child committed it: [`load_only`]); the
    /// stream's initial entries are skipped.
    Preloaded,
}

/// Commits the stream's initial state in commits of `batch` keys; returns the keys
/// loaded.
fn load(name: &str, store: &mut dyn Adapter, r: &mut Reader, batch: usize) -> Result<u64> {
    let t = Instant::now();
    let total = r.header.initial_keys;
    let mut loaded = 0u64;
    loop {
        let ops = r.initial_batch(batch.max(1))?;
        if ops.is_empty() {
            return Ok(loaded);
        }
        store.commit_block(&ops)?;
        loaded += ops.len() as u64;
        if !loaded.is_multiple_of(LOAD_BATCH as u64) && loaded != total {
            continue;
        }
        eprintln!("[{name}] loaded {loaded}/{total} keys ({:.1} s)", t.elapsed().as_secs_f64());
    }
}

/// The loader child: commits the stream's initial state in commits of `batch` keys,
/// settles the store (`Adapter::settle`: bavl checkpoints) and closes it, for a
/// [`Load::Preloaded`] child to open. Reports the load's time and bytes written.
pub fn load_only(
    name: &str,
    mut store: Box<dyn Adapter>,
    stream: &Path,
    batch: usize,
) -> Result<ChildReport> {
    let mut r = Reader::open(stream)?;
    let mut rep = ChildReport { store: name.to_string(), ..Default::default() };
    rep.io_start = Io::now();
    let t = Instant::now();
    rep.load_keys = load(name, store.as_mut(), &mut r, batch)?;
    store.settle()?;
    store.close()?;
    rep.load_s = t.elapsed().as_secs_f64();
    rep.io_after_load = Io::now();
    rep.hwm_after_load_bytes = rss_hwm().1;
    rep.cpu_s_total = cpu_ms() / 1e3;
    eprintln!("[{name}] loaded and closed in {:.1} s", rep.load_s);
    Ok(rep)
}

/// [`run`], getting the initial state as `how` says, and reading the final state back
/// only if `readback` (else `keys` and `digest` stay empty: a later process checks them
/// with [`read_back`]).
pub fn run_with_batch(
    name: &str,
    mut store: Box<dyn Adapter>,
    stream: &Path,
    how: Load,
    readback: bool,
) -> Result<ChildReport> {
    let mut r = Reader::open(stream)?;
    let h = r.header;
    let mut rep = ChildReport { store: name.to_string(), ..Default::default() };
    rep.io_start = Io::now();
    let t = Instant::now();
    let loaded = match how {
        Load::Batches(n) => load(name, store.as_mut(), &mut r, n)?,
        Load::Preloaded => {
            r.skip_initial()?;
            0
        }
    };
    rep.load_s = t.elapsed().as_secs_f64();
    rep.load_keys = loaded;
    rep.hwm_after_load_bytes = rss_hwm().1;
    rep.io_after_load = Io::now();
    let total = h.warmup_blocks + h.blocks;
    let mut i = 0u64;
    while let Some(ops) = r.next_block()? {
        let c = cpu_ms();
        let t = Instant::now();
        store.commit_block(&ops)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let cpu = cpu_ms() - c;
        i += 1;
        let warm = i <= h.warmup_blocks;
        if warm {
            rep.warmup_ms.push(ms);
        } else {
            rep.block_ms.push(ms);
            rep.block_cpu_ms.push(cpu);
            rep.ops_measured += ops.len() as u64;
        }
        eprintln!(
            "[{name}] block {i}/{total}{}: {} ops in {ms:.1} ms",
            if warm { " (warm-up)" } else { "" },
            ops.len()
        );
    }
    ensure!(i == total, "stream ended after {i} of {total} blocks");
    let (rss, hwm) = rss_hwm();
    rep.rss_bytes = rss;
    rep.hwm_bytes = hwm;
    rep.io_after_blocks = Io::now();
    rep.cgroup_max_usage_after_blocks = crate::cgroup::own_max_usage();
    if readback {
        read_back(name, store.as_mut(), stream, &mut rep)?;
    }
    rep.extra = store.extra();
    store.close()?;
    rep.cpu_s_total = cpu_ms() / 1e3;
    Ok(rep)
}

/// Reads back every key the stream at `stream` ever wrote from `store` into `rep`: the
/// count and digest of the state it holds, and the time taken. Holds the sorted list of
/// those keys (20 bytes each) in memory.
pub fn read_back(
    name: &str,
    store: &mut dyn Adapter,
    stream: &Path,
    rep: &mut ChildReport,
) -> Result<()> {
    let t = Instant::now();
    let keys = universe(stream)?;
    let mut d = StateDigest::default();
    for k in &keys {
        if let Some(v) = store.get(k)? {
            d.add(k, &v);
        }
    }
    rep.keys = d.keys;
    rep.digest = d.finish();
    rep.verify_s = t.elapsed().as_secs_f64();
    eprintln!(
        "[{name}] read back {} of {} keys ever written ({:.1} s)",
        rep.keys,
        keys.len(),
        rep.verify_s
    );
    Ok(())
}
