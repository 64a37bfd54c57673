//! The experiment runner: real processes in the `scripts/netlab.sh` namespaces. Per
//! configuration it starts one server per peer in `blp<i>` (`bavl serve`, or for a liar
//! `bavl-harness serve-liar --byzantine KIND`, or `bavl-synclab serve-baseline`,
//! optionally `--corrupt`), then runs the syncing node in `blc` under `/usr/bin/time -v`
//! (peak RSS, CPU) and times it from spawn to exit. Peers reach the client through their
//! delay proxy (latency) and tbf (rate).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::state::{self, StateInfo};

/// Which sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Bavl,
    /// Retry policy: one liar exposed per failed attempt (the B+AVL paper's model).
    Baseline,
    /// Retry policy: one random serving peer dropped per failed attempt.
    #[serde(rename = "baseline-blind")]
    BaselineBlind,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Bavl => "bavl",
            Method::Baseline => "baseline",
            Method::BaselineBlind => "baseline-blind",
        }
    }
}

/// One configuration to run.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    pub exp: String,
    pub method: Method,
    pub keys: u64,
    pub capacity: u32,
    pub peers: usize,
    pub byzantine: usize,
    /// Link settings of this setup; `None`: the run's defaults.
    pub rtt_ms: Option<u64>,
    pub rate_mbit: Option<u64>,
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub exp: String,
    pub method: Method,
    pub keys: u64,
    pub capacity: u32,
    /// The baseline's chunk size in bytes (bavl: the mean exported chunk size).
    pub chunk_bytes: u64,
    pub peers: usize,
    pub byzantine: usize,
    pub rtt_ms: u64,
    pub rate_mbit: f64,
    pub rep: u32,
    pub ok: bool,
    /// Spawn to exit of the syncing process (bavl: download, verify, rebuild, seal and
    /// adopt the checkpoint as the store; baseline: every attempt, import, root check and the written file).
    pub seconds: f64,
    pub attempts: u32,
    pub fetched_bytes: u64,
    /// What this method must download at least (bavl: the chunks; baseline: the stream).
    pub state_bytes: u64,
    /// state_bytes / (peers x rate).
    pub floor_s: f64,
    pub peak_rss_mb: f64,
    pub client_cpu_s: f64,
    /// Cores busy machine-wide during the run (2 = both saturated).
    pub machine_busy_cores: f64,
    /// CPU seconds of the serving processes and of the delay proxies during the run.
    pub servers_cpu_s: f64,
    pub proxies_cpu_s: f64,
    /// The client's own timer: bavl: download, verify and rebuild (before the store is
    /// written); baseline: every attempt up to the matching root (before the import).
    pub inner_s: f64,
    pub banned: u64,
    pub note: String,
}

impl Row {
    /// Parses the rows of a CSV written by `bavl-synclab run` (columns found by name).
    pub fn parse_csv(text: &str) -> Result<Vec<Row>> {
        let mut lines = text.lines();
        let head: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
        let col = |name: &str| head.iter().position(|h| *h == name);
        let mut rows = Vec::new();
        for line in lines.filter(|l| !l.trim().is_empty()) {
            // The note is the last column, quoted; nothing before it holds a comma.
            let (fields, note) = match line.split_once(",\"") {
                Some((a, b)) => (a, b.trim_end_matches('"')),
                None => (line, ""),
            };
            let f: Vec<&str> = fields.split(',').collect();
            let get = |name: &str| -> Result<&str> {
                col(name).and_then(|i| f.get(i).copied()).with_context(|| format!("no {name}"))
            };
            let num = |name: &str| -> Result<f64> {
                get(name)?.parse::<f64>().with_context(|| format!("{name} is not a number"))
            };
            let int = |name: &str| -> Result<u64> {
                get(name)?.parse::<u64>().with_context(|| format!("{name} is not an integer"))
            };
            let opt = |name: &str| if col(name).is_some() { num(name) } else { Ok(0.0) };
            rows.push(Row {
                exp: get("exp")?.to_string(),
                method: match get("method")? {
                    "bavl" => Method::Bavl,
                    "baseline" => Method::Baseline,
                    "baseline-blind" => Method::BaselineBlind,
                    m => bail!("unknown method {m}"),
                },
                keys: int("keys")?,
                capacity: int("capacity")? as u32,
                chunk_bytes: int("chunk_bytes")?,
                peers: int("peers")? as usize,
                byzantine: int("byzantine")? as usize,
                rtt_ms: int("rtt_ms")?,
                rate_mbit: num("rate_mbit")?,
                rep: int("rep")? as u32,
                ok: get("ok")? == "true",
                seconds: num("seconds")?,
                attempts: int("attempts")? as u32,
                fetched_bytes: int("fetched_bytes")?,
                state_bytes: int("state_bytes")?,
                floor_s: num("floor_s")?,
                peak_rss_mb: num("peak_rss_mb")?,
                client_cpu_s: num("client_cpu_s")?,
                machine_busy_cores: num("machine_busy_cores")?,
                servers_cpu_s: opt("servers_cpu_s")?,
                proxies_cpu_s: opt("proxies_cpu_s")?,
                inner_s: opt("inner_s")?,
                banned: int("banned")?,
                note: note.to_string(),
            });
        }
        Ok(rows)
    }
}

/// Paths and fixed parameters.
#[derive(Clone, Debug)]
pub struct Env {
    pub bavl: PathBuf,
    /// `bavl-harness`, whose `serve-liar` runs bavl's Byzantine peers.
    pub harness: PathBuf,
    pub synclab: PathBuf,
    pub netlab: PathBuf,
    pub work: PathBuf,
    pub rtt_ms: u64,
    pub rate_mbit: u64,
    /// The `bavl-harness serve-liar --byzantine` kind of bavl's Byzantine peers.
    pub bavl_lie: String,
    /// Concurrent requests per peer in the baseline client.
    pub baseline_workers: usize,
    /// Baseline chunk size; 0 = the same number of pairs per chunk as bavl's capacity.
    pub baseline_chunk_bytes: u64,
    pub timeout: Duration,
    /// Unmeasured syncs before each configuration's repetitions.
    pub warmup: u32,
}

impl Env {
    pub fn state_dir(&self, keys: u64, capacity: u32) -> PathBuf {
        self.work.join("states").join(format!("k{keys}-c{capacity}"))
    }

    pub fn baseline_chunk(&self, info: &StateInfo) -> u64 {
        if self.baseline_chunk_bytes > 0 {
            return self.baseline_chunk_bytes;
        }
        // Same pairs per chunk as a full bavl chunk.
        (info.stream_bytes / info.keys.max(1)).max(1) * u64::from(info.capacity)
    }
}

/// Brings the lab up with `peers` peers.
pub fn lab_up(env: &Env, peers: usize) -> Result<()> {
    let st = Command::new(&env.netlab)
        .env("BAVL_SYNCLAB", &env.synclab)
        .args(["up", &peers.to_string(), "--rtt", &env.rtt_ms.to_string()])
        .args(["--rate", &format!("{}mbit", env.rate_mbit)])
        .status()
        .context("running netlab.sh")?;
    if !st.success() {
        bail!("netlab.sh up failed");
    }
    Ok(())
}

pub fn lab_down(env: &Env) {
    let _ = Command::new(&env.netlab).arg("down").status();
}

fn peer_addr(i: usize) -> String {
    format!("10.77.0.{}:8080", 11 + i)
}

/// Running servers, killed on drop.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// Copies the state's store into each peer's own directory (a store is locked by the
/// process that opens it), unless the copy is already of this state.
fn peer_dbs(env: &Env, info: &StateInfo, peers: usize) -> Result<Vec<PathBuf>> {
    let src = env.state_dir(info.keys, info.capacity).join("store");
    let tag = format!("{}-{}", info.root, info.capacity);
    let mut out = Vec::new();
    for i in 0..peers {
        let dir = env.work.join("peers").join(format!("p{}", i + 1));
        let db = dir.join("store");
        let tag_path = dir.join("tag");
        if std::fs::read_to_string(&tag_path).ok().as_deref() != Some(tag.as_str()) {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            let st = Command::new("cp").arg("-r").arg(&src).arg(&db).status()?;
            if !st.success() {
                bail!("copying {} to {}", src.display(), db.display());
            }
            std::fs::write(&tag_path, &tag)?;
        }
        out.push(db);
    }
    Ok(out)
}

/// Starts the servers of one configuration and waits until each listens.
fn start_servers(env: &Env, s: &Setup, info: &StateInfo) -> Result<Servers> {
    let dbs = peer_dbs(env, info, s.peers)?;
    let mut servers = Servers(Vec::new());
    for (i, db) in dbs.iter().enumerate() {
        let liar = i < s.byzantine;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &format!("blp{}", i + 1)]);
        match s.method {
            Method::Bavl => {
                // A liar is `bavl serve` lying: the harness's `serve-liar` (the shipped
                // `bavl` has no lying server).
                if liar {
                    cmd.arg(&env.harness).args(["serve-liar", "--byzantine", &env.bavl_lie]);
                } else {
                    cmd.arg(&env.bavl).arg("serve");
                }
                cmd.arg("--db").arg(db).args(["--listen", "127.0.0.1:9000"]);
            }
            Method::Baseline | Method::BaselineBlind => {
                cmd.arg(&env.synclab).arg("serve-baseline").arg("--db").arg(db);
                cmd.args(["--listen", "127.0.0.1:9000"]);
                cmd.args(["--chunk-bytes", &env.baseline_chunk(info).to_string()]);
                if liar {
                    cmd.arg("--corrupt");
                }
            }
        }
        let log = std::fs::File::create(env.work.join(format!("server{}.log", i + 1)))?;
        let child = cmd.stdout(Stdio::piped()).stderr(log).spawn().context("starting a server")?;
        servers.0.push(child);
    }
    // Each prints a line starting with "serving" once it listens.
    for (i, c) in servers.0.iter_mut().enumerate() {
        let out = c.stdout.take().context("server stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if !line.starts_with("serving") {
            bail!(
                "peer {} did not start (see {})",
                i + 1,
                env.work.join(format!("server{}.log", i + 1)).display()
            );
        }
    }
    Ok(servers)
}

fn cpu_idle_total() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (idle, f.iter().sum())
}

/// utime + stime of a process, in seconds (0 if it is gone).
fn proc_cpu(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line: 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn proxy_pids(env: &Env, peers: usize) -> Vec<u32> {
    let state = env.work.parent().map(|t| t.join("netlab"));
    let Some(state) = state else { return Vec::new() };
    (1..=peers)
        .filter_map(|i| std::fs::read_to_string(state.join(format!("delay{i}.pid"))).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn time_field(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim_start_matches(':').trim()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Runs the client of one configuration once.
fn run_client(
    env: &Env,
    s: &Setup,
    info: &StateInfo,
    rep: u32,
    server_pids: &[u32],
) -> Result<Row> {
    let cdir = env.work.join("client");
    if cdir.exists() {
        std::fs::remove_dir_all(&cdir)?;
    }
    std::fs::create_dir_all(&cdir)?;
    let json = cdir.join("summary.json");
    let tfile = cdir.join("time.txt");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", "blc", "/usr/bin/time", "-v", "-o"]).arg(&tfile);
    match s.method {
        Method::Bavl => {
            cmd.arg(&env.bavl).arg("sync").arg("--db").arg(cdir.join("db"));
            cmd.args(["--root", &info.root, "--version", &info.version.to_string(), "--quiet"]);
            for i in 0..s.peers {
                cmd.arg("--peer").arg(format!("http://{}", peer_addr(i)));
            }
            cmd.arg("--json").arg(&json).arg("--trace").arg(cdir.join("trace.csv"));
        }
        Method::Baseline | Method::BaselineBlind => {
            cmd.arg(&env.synclab).arg("fetch-baseline");
            cmd.args(["--root", &info.baseline_root]);
            cmd.args(["--workers", &env.baseline_workers.to_string()]);
            for i in 0..s.peers {
                cmd.arg("--peer").arg(peer_addr(i));
            }
            if s.method == Method::Baseline {
                for i in 0..s.byzantine {
                    cmd.arg("--exposed-liar").arg(i.to_string());
                }
            } else {
                cmd.args(["--drop-random", &rep.to_string()]);
            }
            cmd.arg("--out").arg(cdir.join("db")).arg("--json").arg(&json);
            cmd.args(["--capacity", &info.capacity.to_string()]);
        }
    }
    let log = std::fs::File::create(cdir.join("client.log"))?;
    let proxies = proxy_pids(env, s.peers);
    let cpu_of = |pids: &[u32]| pids.iter().map(|&p| proc_cpu(p)).sum::<f64>();
    let (srv0, prx0) = (cpu_of(server_pids), cpu_of(&proxies));
    let (idle0, total0) = cpu_idle_total();
    let t0 = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(log).spawn().context("starting the client")?;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if t0.elapsed() > env.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seconds = t0.elapsed().as_secs_f64();
    let (idle1, total1) = cpu_idle_total();
    let (srv1, prx1) = (cpu_of(server_pids), cpu_of(&proxies));
    let busy = 1.0 - (idle1 - idle0) as f64 / (total1 - total0).max(1) as f64;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let timing = std::fs::read_to_string(&tfile).unwrap_or_default();
    let summary: serde_json::Value = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let ok = status.is_some_and(|s| s.success());
    let u = |k: &str| summary.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let (fetched, attempts, banned) = match s.method {
        Method::Bavl => (u("fetched_bytes"), u32::from(ok), u("banned")),
        Method::Baseline | Method::BaselineBlind => (u("fetched_bytes"), u("attempts") as u32, 0),
    };
    let state_bytes = match s.method {
        Method::Bavl => info.bavl_bytes,
        Method::Baseline | Method::BaselineBlind => info.stream_bytes,
    };
    let chunk_bytes = match s.method {
        Method::Bavl => info.bavl_bytes / info.chunk_count.max(1),
        Method::Baseline | Method::BaselineBlind => env.baseline_chunk(info),
    };
    let rate_bits = env.rate_mbit as f64 * 1e6;
    let mut note = String::new();
    if status.is_none() {
        note = format!("killed after {} s", env.timeout.as_secs());
    } else if !ok {
        let log = std::fs::read_to_string(cdir.join("client.log")).unwrap_or_default();
        note = log.lines().rev().take(2).collect::<Vec<_>>().join(" | ");
    }
    Ok(Row {
        exp: s.exp.clone(),
        method: s.method,
        keys: info.keys,
        capacity: info.capacity,
        chunk_bytes,
        peers: s.peers,
        byzantine: s.byzantine,
        rtt_ms: env.rtt_ms,
        rate_mbit: env.rate_mbit as f64,
        rep,
        ok,
        seconds,
        attempts,
        fetched_bytes: fetched,
        state_bytes,
        floor_s: state_bytes as f64 * 8.0 / (s.peers as f64 * rate_bits),
        peak_rss_mb: time_field(&timing, "Maximum resident set size (kbytes)") / 1024.0,
        client_cpu_s: time_field(&timing, "User time (seconds)")
            + time_field(&timing, "System time (seconds)"),
        machine_busy_cores: busy * ncpu,
        servers_cpu_s: srv1 - srv0,
        proxies_cpu_s: prx1 - prx0,
        inner_s: summary.get("seconds").and_then(|v| v.as_f64()).unwrap_or(0.0),
        banned,
        note,
    })
}

/// Runs `reps` repetitions of one configuration (servers started once).
pub fn run_setup(env: &Env, s: &Setup, reps: u32) -> Result<Vec<Row>> {
    let info = state::ensure(&env.state_dir(s.keys, s.capacity), s.keys, s.capacity)?;
    let servers = start_servers(env, s, &info)?;
    let pids: Vec<u32> = servers.0.iter().map(Child::id).collect();
    let mut rows = Vec::new();
    // Numbered after the measured ones: the blind baseline seeds its choices with them.
    for w in 0..env.warmup {
        let row = run_client(env, s, &info, reps + w, &pids)?;
        eprintln!(
            "synclab: {} {} warm-up: {} {:.2} s, cpu client {:.1} s servers {:.1} s proxies {:.1} s",
            row.exp,
            row.method.name(),
            if row.ok { "ok" } else { "FAILED" },
            row.seconds,
            row.client_cpu_s,
            row.servers_cpu_s,
            row.proxies_cpu_s
        );
    }
    for rep in 0..reps {
        let row = run_client(env, s, &info, rep, &pids)?;
        eprintln!(
            "synclab: {} {} keys={} cap={} peers={} byz={} rep={}: {} {:.2} s (floor {:.2} s), {} attempt(s), {:.0} MB, rss {:.0} MB, cpu client {:.1} s servers {:.1} s proxies {:.1} s, busy {:.2} cores {}",
            row.exp, row.method.name(), row.keys, row.capacity, row.peers, row.byzantine, rep,
            if row.ok { "ok" } else { "FAILED" }, row.seconds, row.floor_s, row.attempts,
            row.fetched_bytes as f64 / 1e6, row.peak_rss_mb, row.client_cpu_s, row.servers_cpu_s, row.proxies_cpu_s,
            row.machine_busy_cores, row.note
        );
        rows.push(row);
    }
    drop(servers);
    Ok(rows)
}

/// Whether `harness` is a `bavl-harness` with `serve-liar`, which runs bavl's Byzantine
/// peers.
pub fn harness_serves_liars(harness: &Path) -> bool {
    Command::new(harness).args(["serve-liar", "--help"]).output().is_ok_and(|o| o.status.success())
}
