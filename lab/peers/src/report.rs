//! The report: figures per store, ratios, machine; JSON, CSV and PNG.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use bavl_labkit::machine::run;
use bavl_labkit::stats::percentile;
pub use bavl_labkit::Machine;
use bavl_peers::adapters::StoreInfo;
use bavl_peers::child::ChildReport;
use bavl_peers::stream::Expected;
use serde::Serialize;

const MB: f64 = 1e6;

/// Busy CPU time of the whole machine so far (all CPUs, every state but idle and
/// iowait), seconds, from `/proc/stat` (USER_HZ = 100).
pub fn machine_busy_s() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = s.lines().find(|l| l.starts_with("cpu ")) else { return f64::NAN };
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy: u64 =
        v.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, x)| x).sum();
    busy as f64 / 100.0
}

/// The file system type of `dir` (`ext4`, `tmpfs`, ...), from `stat -f`.
pub fn fs_type(dir: &Path) -> String {
    run("stat", &["-f", "-c", "%T", &dir.display().to_string()]).unwrap_or_else(|| "unknown".into())
}

/// Bytes of a directory tree: allocated on disk (what `du` reports) and apparent sizes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Disk {
    pub allocated_bytes: u64,
    pub apparent_bytes: u64,
    pub files: u64,
}

pub fn disk_usage(dir: &Path) -> Disk {
    use std::os::unix::fs::MetadataExt;
    let mut d = Disk::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&p) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                d.allocated_bytes += m.blocks() * 512;
                d.apparent_bytes += m.len();
                d.files += 1;
            }
        }
    }
    d
}

/// The machine block of `peers.json` and `memory.json`: the kit's, with the Go toolchain
/// that built IAVL's child (`go`; "not found" without one).
pub fn machine(go: &str) -> Machine {
    let version = run(go, &["version"]).unwrap_or_else(|| "not found".into());
    Machine::probe().with("go", version)
}

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub quick: bool,
    pub keys: u64,
    pub warmup_blocks: u64,
    pub blocks: u64,
    pub ops_per_block: u32,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub mix: &'static str,
    pub load_batch: usize,
    pub seed: u64,
    pub dir: String,
    pub dir_fs: String,
    /// The global allocator of the Rust stores' child processes (IAVL is Go's own).
    pub allocator: &'static str,
}

fn r(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// One store's result.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub name: &'static str,
    pub peer: bool,
    /// "ok", or what went wrong.
    pub status: String,
    pub description: &'static str,
    pub durability: &'static str,
    pub ops_per_s: Option<f64>,
    pub commit_p50_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
    pub commit_mean_ms: Option<f64>,
    pub commit_max_ms: Option<f64>,
    /// Operations per CPU-second of the store's process over the measured blocks (all its
    /// threads): less sensitive than ops_per_s to what else the machine runs.
    pub ops_per_cpu_s: Option<f64>,
    /// CPU cores the store's process kept busy during the measured blocks, on average.
    pub cores_used: Option<f64>,
    /// Cores kept busy by other processes while this store's child ran, on average.
    pub others_busy_cores: Option<f64>,
    /// Peak resident set (VmHWM) of the store's process over load and blocks, MB (10^6 B).
    pub rss_mb: Option<f64>,
    pub rss_after_load_mb: Option<f64>,
    /// Disk allocated by the store's directory after the run, MB (10^6 B).
    pub disk_mb: Option<f64>,
    pub disk_apparent_mb: Option<f64>,
    pub load_s: Option<f64>,
    pub keys_final: Option<u64>,
    /// Same key count and digest as the reference.
    pub state_matches: Option<bool>,
    pub verify_s: Option<f64>,
    pub child_wall_s: f64,
    pub block_ms: Vec<f64>,
    pub block_cpu_ms: Vec<f64>,
    pub warmup_ms: Vec<f64>,
    pub extra: serde_json::Value,
}

impl Outcome {
    pub fn new(
        info: &'static StoreInfo,
        result: Result<ChildReport>,
        disk: Disk,
        wall_s: f64,
        machine_busy_s: f64,
        expected: &Expected,
    ) -> Outcome {
        let mut o = Outcome {
            name: info.name,
            peer: info.peer,
            status: String::new(),
            description: info.description,
            durability: info.durability,
            ops_per_s: None,
            commit_p50_ms: None,
            commit_p99_ms: None,
            commit_mean_ms: None,
            commit_max_ms: None,
            ops_per_cpu_s: None,
            cores_used: None,
            others_busy_cores: None,
            rss_mb: None,
            rss_after_load_mb: None,
            disk_mb: None,
            disk_apparent_mb: None,
            load_s: None,
            keys_final: None,
            state_matches: None,
            verify_s: None,
            child_wall_s: r(wall_s, 1),
            block_ms: Vec::new(),
            block_cpu_ms: Vec::new(),
            warmup_ms: Vec::new(),
            extra: serde_json::Value::Null,
        };
        match result {
            Err(e) => o.status = format!("{e:#}"),
            Ok(c) => {
                let total_ms: f64 = c.block_ms.iter().sum();
                let matches = c.keys == expected.keys && c.digest == expected.digest;
                o.status = if matches {
                    "ok".into()
                } else {
                    format!(
                        "state differs: {} keys, digest {} (expected {} keys, {})",
                        c.keys, c.digest, expected.keys, expected.digest
                    )
                };
                o.ops_per_s = Some(r(c.ops_measured as f64 / (total_ms / 1e3), 0));
                o.commit_p50_ms = Some(r(percentile(&c.block_ms, 50.0), 2));
                o.commit_p99_ms = Some(r(percentile(&c.block_ms, 99.0), 2));
                o.commit_mean_ms = Some(r(total_ms / c.block_ms.len().max(1) as f64, 2));
                o.commit_max_ms = Some(r(c.block_ms.iter().copied().fold(0.0, f64::max), 2));
                let cpu_ms: f64 = c.block_cpu_ms.iter().sum();
                if cpu_ms > 0.0 {
                    o.ops_per_cpu_s = Some(r(c.ops_measured as f64 / (cpu_ms / 1e3), 0));
                    o.cores_used = Some(r(cpu_ms / total_ms, 2));
                }
                if c.cpu_s_total > 0.0 && machine_busy_s.is_finite() && wall_s > 0.0 {
                    o.others_busy_cores =
                        Some(r(((machine_busy_s - c.cpu_s_total) / wall_s).max(0.0), 2));
                }
                o.rss_mb = Some(r(c.hwm_bytes as f64 / MB, 1));
                o.rss_after_load_mb = Some(r(c.hwm_after_load_bytes as f64 / MB, 1));
                o.disk_mb = Some(r(disk.allocated_bytes as f64 / MB, 1));
                o.disk_apparent_mb = Some(r(disk.apparent_bytes as f64 / MB, 1));
                o.load_s = Some(r(c.load_s, 2));
                o.keys_final = Some(c.keys);
                o.state_matches = Some(matches);
                o.verify_s = Some(r(c.verify_s, 2));
                o.block_ms = c.block_ms.iter().map(|x| r(*x, 2)).collect();
                o.block_cpu_ms = c.block_cpu_ms.clone();
                o.warmup_ms = c.warmup_ms.iter().map(|x| r(*x, 2)).collect();
                o.extra = c.extra;
            }
        }
        o
    }

    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    pub fn one_line(&self) -> String {
        match (self.ok(), self.ops_per_s) {
            (true, Some(ops)) => format!(
                "{:.0} ops/s ({:.0} per CPU-second), commit p50 {:.1} ms p99 {:.1} ms, peak RSS {:.0} MB, disk {:.0} MB, others kept {:.2} cores busy, state matches",
                ops,
                self.ops_per_cpu_s.unwrap_or(0.0),
                self.commit_p50_ms.unwrap_or(0.0),
                self.commit_p99_ms.unwrap_or(0.0),
                self.rss_mb.unwrap_or(0.0),
                self.disk_mb.unwrap_or(0.0),
                self.others_busy_cores.unwrap_or(0.0)
            ),
            _ => format!("FAILED: {}", self.status),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub command: String,
    pub date_unix_s: u64,
    pub wall_time_s: f64,
    pub machine: Machine,
    pub params: Params,
    pub expected: Expected,
    /// bavl's ops/s over the best durable peer's (jmt-redb, nomt, iavl) that ran and ended
    /// in the expected state.
    pub bavl_vs_best_peer: Option<f64>,
    pub best_peer: Option<String>,
    /// The same ratio on operations per CPU-second (see ops_per_cpu_s), and that peer.
    pub bavl_vs_best_peer_cpu: Option<f64>,
    pub best_peer_cpu: Option<String>,
    /// bavl's ops/s over each other store's.
    pub bavl_vs: BTreeMap<String, f64>,
    pub target: &'static str,
    pub target_met: Option<bool>,
    pub notes: Vec<&'static str>,
    pub stores: BTreeMap<String, Outcome>,
    /// Store names in the order they ran.
    pub order: Vec<String>,
}

const NOTES: &[&str] = &[
    "ops_per_s = operations in the measured blocks / sum of their apply + durable-commit times (block generation and reading the stream file are outside the timing).",
    "ops_per_cpu_s = the same operations / CPU time of the store's whole process (all threads, /proc/self/stat) over the measured blocks; cores_used = that CPU time / wall time; others_busy_cores = the machine's busy CPU time (/proc/stat) minus the child's own, over the child's run: how much other work shared the 2 cores while that store ran, plus kernel work done for the store but not charged to its process (page writeback, the ext4 journal, block I/O completion): nomt, with O_DIRECT and io_uring, shows about 1 core there even on an idle machine, so its ops_per_cpu_s flatters it. Compare ops_per_s across stores only when others_busy_cores are alike.",
    "commit_p99_ms is nearest-rank over the measured blocks: with 30 blocks it is the slowest one.",
    "rss_mb is the child process's VmHWM after the last block: the peak over the initial load (commits of 100,000 keys) and the blocks.",
    "disk_mb is the space allocated to the store's directory after the run (du); disk_apparent_mb the files' lengths. nomt preallocates its hash table.",
    "jmt-mock keeps everything in memory and is not durable: it is listed to show jmt's own cost, and is not a peer in bavl_vs_best_peer. btreemap-floor is not authenticated: a floor, not a peer.",
    "Stores taking a batch (jmt, nomt) get each block reduced to its final effect per key (as a chain's overlay would); bavl, IAVL and the floor apply the operations in order. Every store is checked to end with the same key count and digest.",
];

impl Report {
    pub fn new(
        machine: Machine,
        command: String,
        params: Params,
        expected: Expected,
        outcomes: Vec<Outcome>,
        wall: Duration,
    ) -> Report {
        let order: Vec<String> = outcomes.iter().map(|o| o.name.to_string()).collect();
        let stores: BTreeMap<String, Outcome> =
            outcomes.into_iter().map(|o| (o.name.to_string(), o)).collect();
        let bavl = stores.get("bavl").filter(|o| o.ok()).and_then(|o| o.ops_per_s);
        let best = stores
            .values()
            .filter(|o| o.peer && o.ok())
            .filter_map(|o| Some((o.name, o.ops_per_s?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let bavl_vs_best_peer = match (bavl, best) {
            (Some(b), Some((_, p))) => Some(r(b / p, 3)),
            _ => None,
        };
        let bavl_cpu = stores.get("bavl").filter(|o| o.ok()).and_then(|o| o.ops_per_cpu_s);
        let best_cpu = stores
            .values()
            .filter(|o| o.peer && o.ok())
            .filter_map(|o| Some((o.name, o.ops_per_cpu_s?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let bavl_vs_best_peer_cpu = match (bavl_cpu, best_cpu) {
            (Some(b), Some((_, p))) => Some(r(b / p, 3)),
            _ => None,
        };
        let bavl_vs = match bavl {
            Some(b) => stores
                .values()
                .filter(|o| o.name != "bavl" && o.ok())
                .filter_map(|o| Some((o.name.to_string(), r(b / o.ops_per_s?, 3))))
                .collect(),
            None => BTreeMap::new(),
        };
        Report {
            benchmark: "peers",
            command,
            date_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            wall_time_s: r(wall.as_secs_f64(), 1),
            machine,
            params,
            expected,
            bavl_vs_best_peer,
            best_peer: best.map(|(n, _)| n.to_string()),
            bavl_vs_best_peer_cpu,
            best_peer_cpu: best_cpu.map(|(n, _)| n.to_string()),
            bavl_vs,
            target: "bavl ahead of every peer, >= 2x the best of them (ops/s)",
            target_met: bavl_vs_best_peer.map(|x| x >= 2.0),
            notes: NOTES.to_vec(),
            stores,
            order,
        }
    }

    fn ordered(&self) -> impl Iterator<Item = &Outcome> {
        self.order.iter().filter_map(|n| self.stores.get(n))
    }

    /// Writes the JSON to `out`, and `peers.csv`, `latency.csv`, `peers.png` into the
    /// directory `out` without its extension.
    pub fn write(&self, out: &Path) -> Result<()> {
        if let Some(p) = out.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::write(out, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
        let dir = out.with_extension("");
        std::fs::create_dir_all(&dir)?;
        let f = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        let mut csv = String::from(
            "store,peer,status,ops_per_s,ops_per_cpu_s,cores_used,others_busy_cores,commit_p50_ms,commit_p99_ms,commit_mean_ms,rss_mb,disk_mb,disk_apparent_mb,load_s,keys_final,state_matches,bavl_vs_store\n",
        );
        for o in self.ordered() {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                o.name,
                o.peer,
                if o.ok() { "ok" } else { "failed" },
                f(o.ops_per_s),
                f(o.ops_per_cpu_s),
                f(o.cores_used),
                f(o.others_busy_cores),
                f(o.commit_p50_ms),
                f(o.commit_p99_ms),
                f(o.commit_mean_ms),
                f(o.rss_mb),
                f(o.disk_mb),
                f(o.disk_apparent_mb),
                f(o.load_s),
                o.keys_final.map_or(String::new(), |k| k.to_string()),
                o.state_matches.map_or(String::new(), |k| k.to_string()),
                f(self.bavl_vs.get(o.name).copied()),
            );
        }
        std::fs::write(dir.join("peers.csv"), csv)?;
        let ran: Vec<&Outcome> = self.ordered().filter(|o| !o.block_ms.is_empty()).collect();
        let mut lat = String::from("block");
        for o in &ran {
            let _ = write!(lat, ",{}_ms", o.name);
        }
        lat.push('\n');
        for i in 0..ran.iter().map(|o| o.block_ms.len()).max().unwrap_or(0) {
            let _ = write!(lat, "{}", i + 1);
            for o in &ran {
                let _ =
                    write!(lat, ",{}", o.block_ms.get(i).map_or(String::new(), |v| v.to_string()));
            }
            lat.push('\n');
        }
        std::fs::write(dir.join("latency.csv"), lat)?;
        let png = dir.join("peers.png");
        let title = format!(
            "Workload B on {} keys, {} blocks of {} ops, durable commit per block ({} cores, {})",
            self.params.keys,
            self.params.blocks,
            self.params.ops_per_block,
            self.machine.nproc,
            self.machine.cpu
        );
        if let Err(e) = crate::plot::plot(&png, &ran, &title) {
            eprintln!("warning: no plot ({e:#}); the JSON and CSVs are written");
        }
        eprintln!("wrote {}, {}/peers.csv, latency.csv, peers.png", out.display(), dir.display());
        Ok(())
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{:<15} {:>10} {:>10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6}\n",
            "store",
            "ops/s",
            "ops/cpu-s",
            "cores",
            "p50 ms",
            "p99 ms",
            "RSS MB",
            "disk MB",
            "load s",
            "others",
            "state"
        );
        for o in self.ordered() {
            if o.ops_per_s.is_some() {
                let _ = writeln!(
                    s,
                    "{:<15} {:>10.0} {:>10.0} {:>6.2} {:>9.1} {:>9.1} {:>9.0} {:>9.0} {:>8.1} {:>6.2} {:>6}",
                    o.name,
                    o.ops_per_s.unwrap_or(0.0),
                    o.ops_per_cpu_s.unwrap_or(0.0),
                    o.cores_used.unwrap_or(0.0),
                    o.commit_p50_ms.unwrap_or(0.0),
                    o.commit_p99_ms.unwrap_or(0.0),
                    o.rss_mb.unwrap_or(0.0),
                    o.disk_mb.unwrap_or(0.0),
                    o.load_s.unwrap_or(0.0),
                    o.others_busy_cores.unwrap_or(0.0),
                    if o.ok() { "ok" } else { "WRONG" }
                );
            } else {
                let _ = writeln!(s, "{:<15} FAILED: {}", o.name, o.status);
            }
        }
        match (&self.best_peer, self.bavl_vs_best_peer) {
            (Some(p), Some(x)) => {
                let _ = writeln!(
                    s,
                    "bavl vs best peer ({p}): {x:.2}x  (target >= 2x: {})",
                    if x >= 2.0 { "met" } else { "missed" }
                );
            }
            _ => s.push_str("bavl vs best peer: not available (bavl or every peer failed)\n"),
        }
        if let (Some(p), Some(x)) = (&self.best_peer_cpu, self.bavl_vs_best_peer_cpu) {
            let _ = writeln!(s, "per CPU-second, bavl vs best peer ({p}): {x:.2}x");
        }
        s
    }
}
