//! Memory per key, measured in a fresh child process (`bavl-bench store-ram --dir D`)
//! so that what other phases allocated, freed and left in the allocator does not count.
//! The child reads its resident set size, opens the store (keep_recent 1), reads it
//! again, and prints one JSON line.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bavl_store::{CheckpointPolicy, Options, Store};
use serde::{Deserialize, Serialize};

/// What the child measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RamSample {
    pub keys: u64,
    pub chunks: u64,
    /// VmRSS before opening the store.
    pub rss_before_bytes: u64,
    /// VmRSS with the store open.
    pub rss_open_bytes: u64,
    /// VmHWM (peak RSS) once the store is open: opening verifies and rebuilds from the
    /// checkpoint, which needs buffers on top of the tree.
    pub hwm_bytes: u64,
    /// VmRSS after `malloc_trim(0)` returned the allocator's free memory to the system.
    pub rss_trimmed_bytes: u64,
    pub open_ms: f64,
    /// The store's files on disk.
    pub disk_bytes: u64,
    pub recovered_from_checkpoint: Option<u64>,
    pub replayed: u64,
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

fn trim_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The child's side: opens the store at `dir`, prints a [`RamSample`] as JSON.
pub fn child(dir: &Path) -> Result<()> {
    let (rss_before, _) = rss_hwm();
    let opts =
        Options { keep_recent: 1, checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let t = Instant::now();
    let store = Store::open(dir, opts).with_context(|| format!("opening {}", dir.display()))?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let (rss_open, hwm) = rss_hwm();
    trim_allocator();
    let (rss_trimmed, _) = rss_hwm();
    let stats = store.stats()?;
    let sample = RamSample {
        keys: stats.keys,
        chunks: stats.chunks,
        rss_before_bytes: rss_before,
        rss_open_bytes: rss_open,
        hwm_bytes: hwm,
        rss_trimmed_bytes: rss_trimmed,
        open_ms,
        disk_bytes: stats.disk_bytes,
        recovered_from_checkpoint: store.recovery().checkpoint,
        replayed: store.recovery().replayed,
    };
    println!("{}", serde_json::to_string(&sample)?);
    // Skip tearing the tree down: the process ends here.
    std::process::exit(0);
}

/// The parent's side: runs this binary's `store-ram` on `dir` and reads its answer.
pub fn measure(dir: &Path) -> Result<RamSample> {
    let exe = std::env::current_exe().context("locating the benchmark binary")?;
    let out = Command::new(exe)
        .arg("store-ram")
        .arg("--dir")
        .arg(dir)
        .output()
        .context("running the store-ram child")?;
    if !out.status.success() {
        bail!("store-ram child failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim())
        .with_context(|| format!("reading the child's answer {line:?}"))
}
