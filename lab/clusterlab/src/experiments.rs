//! The experiments, each on fresh clusters of three node processes:
//!
//! 1. **Partitions sweep** (1, 2, 4, 8): per workload (search, update, insert, mixed) a
//!    single-client phase (latency) and a phase with `throughput_clients` concurrent clients
//!    per partition (throughput, and the per-operation CPU, messages and bytes: every P at
//!    its peak, as the paper's "peak throughput, achieved by increasing the number of
//!    clients to saturate the system"; the `double_clients` setting checks that more
//!    clients do not raise it); before the load, the idle
//!    cluster's background cost (heartbeats, leaders' reports) over `idle_s`.
//! 2. **Client cache off** (the paper's Fig. 3): on the same clusters, search and insert
//!    again with every request asking the directory first.
//! 3. **Chunk capacity** (Table III): 8 partitions, insert workload, one cluster per
//!    capacity.
//! 4. **Splits under load**: one range that splits while keys are inserted; retries and
//!    directory requests per operation before, during and after.
//! 5. **Histories under faults**: an empty store, splits enabled, a node SIGKILLed and
//!    restarted during the load; every history checked by `lincheck` (porcupine).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cluster::{finish_load, Config, LabCluster};
use crate::load::{PhaseResult, PhaseSpec, Spec, Workload};
pub use crate::setup::Setup;
use crate::RunArgs;

/// The idle cluster's background cost.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Background {
    pub seconds: f64,
    pub node_cpu_s: f64,
    pub rpcs: u64,
}

/// One partition count, one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepRow {
    pub partitions: u64,
    pub workload: Workload,
    pub cache: bool,
    /// `default` (fsynced logs, log-compaction snapshots every `snapshot_every` entries, as
    /// `bavl-cluster node`), `no_snapshots` or `no_fsync`.
    pub setting: String,
    pub latency: PhaseResult,
    pub throughput: PhaseResult,
    pub background: Background,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CapacityRow {
    pub capacity: u32,
    pub partitions: u64,
    pub throughput: PhaseResult,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SplitRun {
    pub ranges_before: usize,
    pub ranges_after: usize,
    pub phases: Vec<PhaseResult>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistoryRun {
    pub file: PathBuf,
    pub operations: u64,
    pub killed_node: u64,
    pub killed_at_s: f64,
    pub restarted_at_s: f64,
    pub ranges_at_end: usize,
    pub phase: PhaseResult,
}

#[derive(Default, Serialize)]
pub struct Results {
    pub sweep: Vec<SweepRow>,
    pub capacity: Vec<CapacityRow>,
    pub splits: Option<SplitRun>,
    pub merges: Option<crate::merges::MergeRun>,
    pub histories: Vec<HistoryRun>,
    pub lincheck: Option<serde_json::Value>,
    pub lincheck_exit: Option<i32>,
    pub errors: Vec<String>,
    /// The `one_partition` setting's slices (its rows are in `sweep` too).
    #[serde(skip)]
    pub one_partition: Option<crate::isolated::Rounds>,
}

const WORKLOADS: [Workload; 4] =
    [Workload::Search, Workload::Update, Workload::Insert, Workload::Mixed];

pub(crate) fn phase(name: String, workload: Workload, clients: u32, seconds: f64) -> PhaseSpec {
    PhaseSpec { name, workload, clients, seconds, partition: None }
}

pub(crate) async fn background(c: &LabCluster, seconds: f64) -> Background {
    let a = c.stats().await;
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let b = c.stats().await;
    let mut bg = Background { seconds: t.elapsed().as_secs_f64(), ..Default::default() };
    for (id, s) in &b {
        if let Some(e) = a.get(id) {
            let d = s.since(e);
            bg.node_cpu_s += d.cpu_s;
            bg.rpcs += d.total().rpcs;
        }
    }
    bg
}

/// The concurrent clients of a throughput phase at `p` partitions: `throughput_clients` per
/// partition, so every group sees the load that saturates the single group of P = 1 (the
/// paper reports peak throughput, "achieved by increasing the number of clients to
/// saturate the system"). With one total for every P, a group of P = 8 would get an eighth
/// of the clients, batch an eighth as many operations per Raft round, and the ratios would
/// measure that, not what partitioning costs (the `fixed_clients` setting keeps that rule).
pub(crate) fn peak_clients(s: &Setup, p: u64) -> u32 {
    s.throughput_clients.saturating_mul(u32::try_from(p).unwrap_or(u32::MAX))
}

/// The latency and throughput phases of every workload, for one load process.
fn sweep_phases(s: &Setup, clients: u32, workloads: &[Workload]) -> Vec<PhaseSpec> {
    let warm = if s.quick { 0.5 } else { 1.0 };
    let mut v = vec![phase("warmup".into(), Workload::Search, clients, warm)];
    for &w in workloads {
        v.push(phase(format!("{w:?}-latency"), w, 1, s.latency_s));
        v.push(phase(format!("{w:?}-throughput"), w, clients, s.throughput_s));
    }
    v
}

pub(crate) fn rows(
    p: u64,
    (cache, setting): (bool, &str),
    workloads: &[Workload],
    phases: &[PhaseResult],
    bg: &Background,
) -> Vec<SweepRow> {
    workloads
        .iter()
        .enumerate()
        .filter_map(|(i, &w)| {
            Some(SweepRow {
                partitions: p,
                workload: w,
                cache,
                setting: setting.to_string(),
                latency: phases.get(1 + 2 * i)?.clone(),
                throughput: phases.get(2 + 2 * i)?.clone(),
                background: bg.clone(),
            })
        })
        .collect()
}

pub(crate) fn config(s: &Setup, partitions: u64, capacity: u32) -> Config {
    Config {
        nodes: 3,
        partitions,
        keys: s.keys,
        preload: true,
        capacity,
        split_keys: 1 << 40,
        no_fsync: s.no_fsync,
        snapshot_every: s.snapshot_every,
        merge_keys: 0,
    }
}

async fn sweep_one(s: &Setup, work: &Path, port: u16, p: u64, r: &mut Results) -> Result<()> {
    let c = LabCluster::start(&work.join(format!("p{p}")), port, config(s, p, s.capacity_default))?;
    c.wait_ready(Duration::from_secs(60)).await?;
    let bg = background(&c, s.idle_s).await;
    eprintln!(
        "clusterlab: {p} partitions: background {:.3} CPU-s in {:.1} s",
        bg.node_cpu_s, bg.seconds
    );
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.keys,
        phases: sweep_phases(s, peak_clients(s, p), &WORKLOADS),
        history: None,
        seed: p,
    };
    let res = c.load(&spec).await?;
    r.sweep.extend(rows(p, (true, "default"), &WORKLOADS, &res.phases, &bg));
    if s.cache_partitions.contains(&p) {
        let off = [Workload::Search, Workload::Insert];
        let spec = Spec {
            no_cache: true,
            phases: sweep_phases(s, peak_clients(s, p), &off),
            seed: 100 + p,
            ..spec
        };
        let res = c.load(&spec).await?;
        r.sweep.extend(rows(p, (false, "default"), &off, &res.phases, &bg));
    }
    Ok(())
}

/// Search and update again in another setting (`Setup::settings`).
async fn setting_one(
    s: &Setup,
    work: &Path,
    port: u16,
    p: u64,
    setting: &str,
    r: &mut Results,
) -> Result<()> {
    let base = config(s, p, s.capacity_default);
    let cfg = match setting {
        "no_snapshots" => Config { snapshot_every: s.no_snapshot_every, ..base },
        "no_fsync" => Config { no_fsync: true, ..base },
        "fixed_clients" | "double_clients" | "own_connections" => base,
        other => bail!("unknown setting {other}"),
    };
    let clients = match setting {
        "fixed_clients" => s.throughput_clients,
        "double_clients" => 2 * peak_clients(s, p),
        _ => peak_clients(s, p),
    };
    let c = LabCluster::start(&work.join(format!("{setting}-p{p}")), port, cfg)?;
    c.wait_ready(Duration::from_secs(60)).await?;
    let bg = background(&c, s.idle_s).await;
    let wl = [Workload::Search, Workload::Update];
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.keys,
        phases: sweep_phases(s, clients, &wl),
        history: None,
        seed: 500 + p,
    };
    let spec = match setting {
        "own_connections" => Spec { clients_per_connection: 0, ..spec },
        _ => spec,
    };
    let res = c.load(&spec).await?;
    r.sweep.extend(rows(p, (true, setting), &wl, &res.phases, &bg));
    Ok(())
}

async fn capacity_one(s: &Setup, work: &Path, port: u16, cap: u32) -> Result<CapacityRow> {
    let p = s.capacity_partitions;
    let c = LabCluster::start(&work.join(format!("cap{cap}")), port, config(s, p, cap))?;
    c.wait_ready(Duration::from_secs(60)).await?;
    let clients = peak_clients(s, p);
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.keys,
        phases: vec![
            phase("warmup".into(), Workload::Search, clients, 0.5),
            phase("insert-throughput".into(), Workload::Insert, clients, s.throughput_s),
        ],
        history: None,
        seed: 200 + u64::from(cap),
    };
    let res = c.load(&spec).await?;
    let throughput = res.phases.get(1).cloned().context("no insert phase")?;
    Ok(CapacityRow { capacity: cap, partitions: p, throughput })
}

async fn splits(s: &Setup, work: &Path, port: u16) -> Result<SplitRun> {
    let cfg = Config {
        keys: s.split_preload,
        split_keys: s.split_keys,
        ..config(s, 1, s.capacity_default)
    };
    let c = LabCluster::start(&work.join("splits"), port, cfg)?;
    let before = c.wait_ready(Duration::from_secs(60)).await?;
    let n = s.split_clients;
    let [b, d, a] = s.split_phase_s;
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.split_preload,
        phases: vec![
            phase("warmup".into(), Workload::Update, n, 0.5),
            phase("before".into(), Workload::Update, n, b),
            phase("during".into(), Workload::Insert, n, d),
            phase("after".into(), Workload::Update, n, a),
        ],
        history: None,
        seed: 300,
    };
    let res = c.load(&spec).await?;
    let after = c.ranges().await.map_or(0, |r| r.len());
    Ok(SplitRun { ranges_before: before.len(), ranges_after: after, phases: res.phases })
}

async fn history_one(s: &Setup, work: &Path, port: u16, h: usize) -> Result<HistoryRun> {
    let cfg = Config {
        keys: s.history_hot_keys,
        preload: false,
        split_keys: s.history_split_keys,
        ..config(s, 2, s.capacity_default)
    };
    let dir = work.join(format!("history{h}"));
    let mut c = LabCluster::start(&dir, port, cfg)?;
    c.wait_ready(Duration::from_secs(60)).await?;
    let file = dir.join("history.jsonl");
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.history_hot_keys,
        phases: vec![phase("history".into(), Workload::History, s.history_clients, s.history_s)],
        history: Some(file.clone()),
        seed: 400 + h as u64,
    };
    let child = c.spawn_load(&spec)?;
    let t = Instant::now();
    let victim = (h as u64 % 3) + 1;
    tokio::time::sleep(Duration::from_secs_f64(s.history_s * 0.3)).await;
    let killed_at_s = t.elapsed().as_secs_f64();
    c.kill(victim);
    tokio::time::sleep(Duration::from_secs_f64(s.history_s * 0.25)).await;
    let restarted_at_s = t.elapsed().as_secs_f64();
    c.restart(victim)?;
    let res = finish_load(child).await?;
    let ranges_at_end = c.ranges().await.map_or(0, |r| r.len());
    Ok(HistoryRun {
        file,
        operations: res.history_ops,
        killed_node: victim,
        killed_at_s,
        restarted_at_s,
        ranges_at_end,
        phase: res.phases.into_iter().next().context("no history phase")?,
    })
}

fn lincheck(root: &Path, files: &[PathBuf]) -> Result<(serde_json::Value, i32)> {
    let out = std::process::Command::new("bash")
        .arg(root.join("scripts/install-lincheck.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running scripts/install-lincheck.sh")?;
    if !out.status.success() {
        bail!("scripts/install-lincheck.sh failed");
    }
    let bin = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_string();
    let out = std::process::Command::new(&bin).args(files).output().context("running lincheck")?;
    let code = out.status.code().unwrap_or(-1);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("lincheck exited {code} without a summary"))?;
    Ok((summary, code))
}

fn note<T>(r: &mut Results, what: &str, x: Result<T>) -> Option<T> {
    match x {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("clusterlab: {what} failed: {e:#}");
            r.errors.push(format!("{what}: {e:#}"));
            None
        }
    }
}

pub async fn run_all(a: &RunArgs, root: &Path, out: &Path, work: &Path) -> Result<()> {
    let s = Setup::new(a);
    let started = Instant::now();
    let mut r = Results::default();
    let mut port = a.port;
    for &p in &s.partitions.clone() {
        eprintln!("clusterlab: sweep, {p} partition(s)");
        let x = sweep_one(&s, work, port, p, &mut r).await;
        note(&mut r, &format!("sweep at {p} partitions"), x);
        port += 10;
    }
    for setting in &s.settings.clone() {
        if setting == "one_partition" {
            eprintln!(
                "clusterlab: partitions {:?} side by side, setting one_partition",
                s.setting_partitions
            );
            let ps = s.setting_partitions.clone();
            let x = crate::isolated::side_by_side(&s, work, port, &ps, &mut r).await;
            note(&mut r, "one_partition", x);
            port += 10 * ps.len() as u16;
            continue;
        }
        for &p in &s.setting_partitions.clone() {
            eprintln!("clusterlab: {p} partition(s), setting {setting}");
            let x = setting_one(&s, work, port, p, setting, &mut r).await;
            note(&mut r, &format!("{setting} at {p} partitions"), x);
            port += 10;
        }
    }
    for &cap in &s.capacities.clone() {
        eprintln!("clusterlab: chunk capacity {cap}");
        let x = capacity_one(&s, work, port, cap).await;
        if let Some(row) = note(&mut r, &format!("capacity {cap}"), x) {
            r.capacity.push(row);
        }
        port += 10;
    }
    eprintln!("clusterlab: splits under load");
    let x = splits(&s, work, port).await;
    r.splits = note(&mut r, "splits", x);
    port += 10;
    eprintln!("clusterlab: merges under load");
    let x = crate::merges::merges(&s, work, port).await;
    r.merges = note(&mut r, "merges", x);
    port += 10;
    for h in 0..s.histories {
        eprintln!("clusterlab: history {h} (kill -9 and restart during the load)");
        let x = history_one(&s, work, port, h).await;
        if let Some(run) = note(&mut r, &format!("history {h}"), x) {
            r.histories.push(run);
        }
        port += 10;
    }
    let files: Vec<PathBuf> = r.histories.iter().map(|h| h.file.clone()).collect();
    if !files.is_empty() {
        let x = lincheck(root, &files);
        if let Some((summary, code)) = note(&mut r, "lincheck", x) {
            r.lincheck = Some(summary);
            r.lincheck_exit = Some(code);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    crate::report::write(&s, &r, out, elapsed)?;
    if !r.errors.is_empty() {
        bail!("{} experiment(s) failed (recorded in cluster.json)", r.errors.len());
    }
    Ok(())
}
