//! One state size, end to end, every step a real process of the product:
//!
//! 1. the input: Workload A's first N pairs in key order, `bin` records ([`crate::pairs`]);
//! 2. `bavl import --sorted` of it into a store, timed (the input deleted after);
//! 3. `peers` servers over that one store, read-only and paged (`--cache-mib`): `bavl
//!    serve` for the honest ones, `bavl-harness serve-liar --byzantine KIND` for the liars,
//!    all started at once and timed until each serves;
//! 4. the floor: every chunk fetched from the honest servers by a plain client
//!    ([`crate::fetch`]), before the sync and again after it (the faster counts);
//! 5. `bavl sync` of a fresh node from all the servers, liars among them, inside a memory
//!    cgroup (when one is asked for), timed, its peak RSS and the cgroup's peak read;
//! 6. `bavl stats` and `bavl check` of the synced store, each in a cgroup of that limit;
//! 7. for sizes up to `in_memory_up_to`, the same sync by the `bavl` of before, which
//!    holds the state in memory (outside the cgroup: it needs more than the limit).
//!
//! The store and the synced store are deleted after the size (unless `keep`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::fetch;
use crate::pairs;
use crate::proc::{self, Measured, Proc};
use crate::report::{InMemory, Row, Step};

/// `bavl sync`'s configured memory: `--budget-mib` (128) of unverified data and 16 MiB of
/// verified chunks on their way to the disk (`bavl sync --help`).
pub const BUDGET_BYTES: u64 = (128 + 16) << 20;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub bavl: PathBuf,
    pub harness: PathBuf,
    /// The `bavl` of before (in-memory sync), if there is one.
    pub baseline: Option<PathBuf>,
    pub work: PathBuf,
    /// Where each size's sync trace goes (`sync-trace-<keys>.csv`, `bavl sync --trace`).
    pub out: PathBuf,
    pub sizes: Vec<u64>,
    pub capacity: u32,
    pub peers: usize,
    /// One liar per kind (`bavl-harness serve-liar --byzantine KIND`).
    pub lies: Vec<String>,
    /// The memory cgroup's limit for the sync, stats and check (none: no cgroup).
    pub limit: Option<u64>,
    /// `bavl serve --cache-mib` of every server.
    pub serve_cache_mib: u64,
    pub in_memory_up_to: u64,
    /// The floor's connections: `bavl sync`'s requests in flight at most.
    pub connections: usize,
    pub floor_reps: u32,
    pub seed: u64,
    pub timeout_s: u64,
    pub keep: bool,
}

/// A step's outcome as a report [`Step`].
fn step(m: &Measured, ok: bool, error: Option<String>) -> Step {
    Step {
        ok,
        seconds: m.seconds,
        peak_rss_bytes: m.peak_rss_bytes,
        cpu_s: m.cpu_s,
        cgroup: m.cgroup.clone(),
        error,
    }
}

/// Why a measured child is not ok, from its end and its stderr's last lines.
fn failure(m: &Measured) -> String {
    let tail: Vec<&str> = m.stderr.lines().rev().take(3).collect();
    let end = match (m.timed_out, m.code) {
        (true, _) => "killed at the timeout".to_string(),
        (false, Some(c)) => format!("exit {c}"),
        (false, None) => {
            let oom = m.cgroup.as_ref().is_some_and(|c| c.oom_kills > 0);
            if oom { "killed by the OOM killer" } else { "killed by a signal" }.to_string()
        }
    };
    format!("{end}: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
}

fn s<P: AsRef<Path>>(p: P) -> String {
    p.as_ref().display().to_string()
}

/// Bytes of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Free bytes of the file system holding `dir` (`df`).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let out =
        std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(dir).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().nth(1)?.trim().parse().ok()
}

/// The imported store's version and root from `bavl import`'s output.
fn parse_import(stdout: &str) -> Option<(u64, String)> {
    let line = stdout.lines().find(|l| l.starts_with("version "))?;
    let mut w = line.split_whitespace();
    let version = w.nth(1)?.parse().ok()?;
    let root = w.nth(1)?.to_string();
    Some((version, root))
}

/// Starts every server at once; they and their URLs in `--peer` order, and whether each lies.
fn start_servers(cfg: &Config, store: &Path, dir: &Path) -> Result<Vec<(Proc, String, bool)>> {
    let liars = liar_positions(cfg.peers, cfg.lies.len());
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..cfg.peers)
            .map(|i| {
                let lie = liars.iter().position(|&p| p == i).map(|j| cfg.lies[j].clone());
                sc.spawn(move || -> Result<(Proc, String, bool)> {
                    let mut cmd = match &lie {
                        Some(kind) => {
                            let mut c = std::process::Command::new(&cfg.harness);
                            c.args(["serve-liar", "--byzantine", kind]);
                            c
                        }
                        None => {
                            let mut c = std::process::Command::new(&cfg.bavl);
                            c.arg("serve");
                            c
                        }
                    };
                    cmd.args(["--listen", "127.0.0.1:0", "--exit-on-eof", "--cache-mib"])
                        .arg(cfg.serve_cache_mib.to_string())
                        .arg("--db")
                        .arg(store);
                    let (p, url) = proc::serve(cmd, &dir.join(format!("serve-{i}.log")))?;
                    Ok((p, url, lie.is_some()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("a server thread panicked")))
            .collect()
    })
}

/// Where the liars stand among `peers` sources: spread out, never first.
pub fn liar_positions(peers: usize, liars: usize) -> Vec<usize> {
    (0..liars).map(|j| j * peers / liars.max(1) + 1).filter(|&p| p < peers).collect()
}

/// The version's chunk count and total chunk bytes, from an honest server's manifest.
fn manifest(url: &str, root: &str) -> Result<(u64, u64)> {
    let body = fetch::get(url, "/v1/snapshots/1/manifest.json")?;
    let m: Value = serde_json::from_slice(&body).context("the manifest")?;
    ensure!(m["root"].as_str() == Some(root), "the honest server serves another root");
    let count = m["chunk_count"].as_u64().context("chunk_count")?;
    let bytes =
        m["chunk_sizes"].as_array().context("chunk_sizes")?.iter().filter_map(Value::as_u64).sum();
    Ok((count, bytes))
}

/// Runs one size; the row, or an error if a step the others need failed.
pub fn run_size(cfg: &Config, keys: u64, floor_rates: &crate::floors::Floors) -> Result<Row> {
    let dir = cfg.work.join(format!("k{keys}-c{}", cfg.capacity));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let timeout = Duration::from_secs(cfg.timeout_s);
    let mut row =
        Row { keys, capacity: cfg.capacity, budget_bytes: BUDGET_BYTES, ..Row::default() };

    // 1-2. The input, then the import.
    let input = dir.join("pairs.bin");
    let n = u32::try_from(keys).context("at most 2^32 - 1 keys")?;
    let w = pairs::write_sorted(&input, cfg.seed, n)?;
    (row.input_bytes, row.input_write_s) = (w.bytes, w.seconds);
    eprintln!(
        "joinlab: {keys} keys: input {:.1} GB written in {:.1} s",
        w.bytes as f64 / 1e9,
        w.seconds
    );
    let store = dir.join("store");
    let args: Vec<String> = ["import", "--quiet", "--sorted", "--format", "bin", "--capacity"]
        .into_iter()
        .map(String::from)
        .chain([cfg.capacity.to_string(), "--db".into(), s(&store), s(&input)])
        .collect();
    let m = proc::run_measured(&cfg.bavl, &args, None, timeout, &dir.join("import"))?;
    std::fs::remove_file(&input)?;
    let imported = parse_import(&m.stdout);
    row.import = step(&m, m.success() && imported.is_some(), (!m.success()).then(|| failure(&m)));
    let Some((version, root)) = imported.filter(|_| m.success()) else {
        bail!("bavl import of {keys} keys failed: {}", failure(&m));
    };
    ensure!(version == 1, "bavl import made version {version}, not 1");
    row.store_bytes = dir_bytes(&store);
    row.derive_import(floor_rates);
    eprintln!(
        "joinlab: {keys} keys: imported in {:.1} s ({:.0} keys/s, floor {:.0}), store {:.2} GB, root {root}",
        m.seconds,
        row.import_keys_per_s,
        row.import_floor_keys_per_s,
        row.store_bytes as f64 / 1e9
    );

    // 3. The servers.
    let t = Instant::now();
    let servers = start_servers(cfg, &store, &dir)?;
    row.serve_start_s = t.elapsed().as_secs_f64();
    let urls: Vec<String> = servers.iter().map(|(_, u, _)| u.clone()).collect();
    let honest: Vec<String> =
        servers.iter().filter(|(_, _, lie)| !lie).map(|(_, u, _)| u.clone()).collect();
    let (chunks, chunk_bytes) = manifest(&honest[0], &root)?;
    row.chunks = chunks;
    eprintln!(
        "joinlab: {keys} keys: {} servers ({} lie) serving after {:.1} s; {chunks} chunks, {:.2} GB",
        urls.len(),
        urls.len() - honest.len(),
        row.serve_start_s,
        chunk_bytes as f64 / 1e9
    );

    // 4-6. Floor, sync, stats and check, floor again.
    let floor = |row: &mut Row| -> Result<()> {
        let f = fetch::fetch_all(&honest, &root, chunks, cfg.connections)?;
        ensure!(
            f.bytes == chunk_bytes,
            "the floor fetched {} bytes, the manifest says {chunk_bytes}",
            f.bytes
        );
        eprintln!(
            "joinlab: {keys} keys: floor {:.2} s ({:.0} MB/s)",
            f.seconds,
            f.bytes as f64 / 1e6 / f.seconds
        );
        row.floor_runs_s.push(f.seconds);
        (row.floor_bytes, row.floor_connections) = (f.bytes, f.connections);
        Ok(())
    };
    floor(&mut row)?;
    let joiner = dir.join("joiner");
    sync_to_disk(cfg, &mut row, &joiner, &root, &urls, &dir)?;
    for _ in 1..cfg.floor_reps {
        floor(&mut row)?;
    }
    row.synced_store_bytes = dir_bytes(&joiner);
    if !cfg.keep {
        let _ = std::fs::remove_dir_all(&joiner);
    }

    // 7. The in-memory sync of before.
    if let Some(b) = cfg.baseline.as_ref().filter(|_| keys <= cfg.in_memory_up_to) {
        row.in_memory = Some(in_memory(cfg, b, &root, &urls, &dir, keys)?);
    }
    row.server_peak_rss_bytes =
        servers.iter().map(|(p, _, _)| p.peak_rss_bytes().unwrap_or(0)).collect();
    drop(servers);
    row.derive();
    if !cfg.keep {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(row)
}

/// Steps 5 and 6: the sync in the cgroup, then stats and check of what it wrote.
fn sync_to_disk(
    cfg: &Config,
    row: &mut Row,
    joiner: &Path,
    root: &str,
    urls: &[String],
    dir: &Path,
) -> Result<()> {
    let timeout = Duration::from_secs(cfg.timeout_s);
    let keys = row.keys;
    let summary_path = dir.join("sync-summary.json");
    let mut args: Vec<String> = vec!["sync".into(), "--quiet".into(), "--db".into(), s(joiner)];
    args.extend(["--root".into(), root.to_string(), "--version".into(), "1".into()]);
    args.extend(["--json".into(), s(&summary_path)]);
    args.extend(["--trace".into(), s(cfg.out.join(format!("sync-trace-{keys}.csv")))]);
    for u in urls {
        args.extend(["--peer".into(), u.clone()]);
    }
    let limit = |tag: &str| cfg.limit.map(|l| (l, tag.to_string()));
    let sync_limit = limit(&format!("sync-{keys}"));
    let m = proc::run_measured(
        &cfg.bavl,
        &args,
        sync_limit.as_ref().map(|(l, t)| (*l, t.as_str())),
        timeout,
        &dir.join("sync"),
    )?;
    let summary: Value = std::fs::read_to_string(&summary_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let ok = m.success()
        && summary["ok"] == true
        && summary["root"].as_str() == Some(root)
        && summary["keys"].as_u64() == Some(keys);
    let error = (!ok)
        .then(|| format!("{}; summary: {} {}", failure(&m), summary["reason"], summary["error"]));
    row.sync = step(&m, ok, error);
    // The sync's own high-water mark, read as it ends: exact where the poll may miss.
    let own = summary["peak_rss_bytes"].as_u64().unwrap_or(0);
    row.sync.peak_rss_bytes = row.sync.peak_rss_bytes.max(own);
    row.fetched_bytes = summary["fetched_bytes"].as_u64().unwrap_or(0);
    row.banned = summary["banned"].as_u64().unwrap_or(0);
    row.install_s = summary["install_s"].as_f64().unwrap_or(0.0);
    eprintln!(
        "joinlab: {keys} keys: sync {:.2} s, peak RSS {:.0} MB, cgroup peak {}, {} banned{}",
        m.seconds,
        m.peak_rss_bytes as f64 / 1e6,
        m.cgroup
            .as_ref()
            .map_or("-".into(), |c| format!("{:.0} MB", c.max_usage_bytes as f64 / 1e6)),
        row.banned,
        row.sync.error.as_deref().map_or(String::new(), |e| format!(" NOT OK: {e}"))
    );
    if !ok {
        return Ok(());
    }
    let st_limit = limit(&format!("stats-{keys}"));
    let args: Vec<String> = vec!["stats".into(), "--json".into(), "--db".into(), s(joiner)];
    let m = proc::run_measured(
        &cfg.bavl,
        &args,
        st_limit.as_ref().map(|(l, t)| (*l, t.as_str())),
        timeout,
        &dir.join("stats"),
    )?;
    let st: Value = serde_json::from_str(&m.stdout).unwrap_or(Value::Null);
    let st_ok =
        m.success() && st["root"].as_str() == Some(root) && st["keys"].as_u64() == Some(keys);
    row.stats = step(&m, st_ok, (!st_ok).then(|| failure(&m)));
    let ck_limit = limit(&format!("check-{keys}"));
    let args: Vec<String> = vec!["check".into(), "--db".into(), s(joiner)];
    let m = proc::run_measured(
        &cfg.bavl,
        &args,
        ck_limit.as_ref().map(|(l, t)| (*l, t.as_str())),
        timeout,
        &dir.join("check"),
    )?;
    row.check = step(&m, m.success(), (!m.success()).then(|| failure(&m)));
    eprintln!(
        "joinlab: {keys} keys: stats {} ({:.1} s), check {} ({:.1} s, peak RSS {:.0} MB)",
        if row.stats.ok { "ok" } else { "NOT OK" },
        row.stats.seconds,
        if row.check.ok { "ok" } else { "NOT OK" },
        row.check.seconds,
        row.check.peak_rss_bytes as f64 / 1e6
    );
    Ok(())
}

/// Step 7: the `bavl` of before syncs the same version into memory (then writes it).
fn in_memory(
    cfg: &Config,
    bavl: &Path,
    root: &str,
    urls: &[String],
    dir: &Path,
    keys: u64,
) -> Result<InMemory> {
    let db = dir.join("joiner-mem");
    let summary_path = dir.join("sync-mem-summary.json");
    let mut args: Vec<String> = vec!["sync".into(), "--quiet".into(), "--db".into(), s(&db)];
    args.extend(["--resume".into(), s(dir.join("joiner-mem.resume"))]);
    args.extend(["--root".into(), root.to_string(), "--version".into(), "1".into()]);
    args.extend(["--json".into(), s(&summary_path)]);
    for u in urls {
        args.extend(["--peer".into(), u.clone()]);
    }
    let m = proc::run_measured(
        bavl,
        &args,
        None,
        Duration::from_secs(cfg.timeout_s),
        &dir.join("sync-mem"),
    )?;
    let summary: Value = std::fs::read_to_string(&summary_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let ok = m.success()
        && summary["root"].as_str() == Some(root)
        && summary["keys"].as_u64() == Some(keys);
    eprintln!(
        "joinlab: {keys} keys: in-memory sync of before {:.2} s, peak RSS {:.0} MB{}",
        m.seconds,
        m.peak_rss_bytes as f64 / 1e6,
        if ok { "" } else { " NOT OK" }
    );
    let _ = std::fs::remove_dir_all(&db);
    let _ = std::fs::remove_file(dir.join("joiner-mem.resume"));
    Ok(InMemory {
        binary: s(bavl),
        step: step(&m, ok, (!ok).then(|| failure(&m))),
        over_floor: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liars_are_spread_and_never_first() {
        assert_eq!(liar_positions(10, 3), vec![1, 4, 7]);
        assert_eq!(liar_positions(4, 1), vec![1]);
        assert_eq!(liar_positions(3, 0), Vec::<usize>::new());
    }

    #[test]
    fn the_import_summary_is_read() {
        let out = "imported 200,000 keys in 1,700 chunks into x\nversion 1 root ab12\ntook 1.2 s (166,000 keys/s)\n";
        assert_eq!(parse_import(out), Some((1, "ab12".to_string())));
        assert_eq!(parse_import("nothing"), None);
    }
}
