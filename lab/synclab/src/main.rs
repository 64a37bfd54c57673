//! `bavl-synclab`: state sync over a namespaced network, bavl against the Cosmos/IAVL-style
//! baseline. See `lab/notes/results-history.md` ("State sync over a network").
#![forbid(unsafe_code)]
#![recursion_limit = "256"]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bavl_labkit::machine::{utc_now, Machine};
use bavl_labkit::stats;
use bavl_synclab::baseline::{self, RetryPolicy};
use bavl_synclab::plot;
use bavl_synclab::runner::{self, Env, Method, Row, Setup};
use clap::{Parser, Subcommand};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "bavl-synclab",
    about = "State sync experiments: bavl vs the Cosmos/IAVL-style baseline over network namespaces"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Builds a state (Workload A pairs in a bavl tree of a chunk capacity) as a store.
    MakeState {
        #[arg(long)]
        keys: u64,
        #[arg(long, default_value_t = 64)]
        capacity: u32,
        #[arg(long)]
        out: PathBuf,
    },
    /// Serves a store's newest version as the baseline's opaque fixed-size chunks.
    ServeBaseline {
        #[arg(long)]
        db: PathBuf,
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: String,
        #[arg(long, default_value_t = 1 << 20)]
        chunk_bytes: u64,
        /// Byzantine: flip a byte in every chunk served.
        #[arg(long)]
        corrupt: bool,
    },
    /// The baseline's syncing node: fetch every chunk from every peer, import, check the
    /// root, restart from scratch if it is wrong.
    FetchBaseline {
        /// host:port of a peer; repeat.
        #[arg(long = "peer", required = true)]
        peers: Vec<String>,
        /// The trusted (IAVL-like) root, hex.
        #[arg(long)]
        root: String,
        /// Concurrent requests per peer.
        #[arg(long, default_value_t = 32)]
        workers: usize,
        /// Index (0-based, in --peer order) of a liar the B+AVL paper's model lets a failed
        /// attempt expose, one per failed attempt, in this order. Without any, a failed
        /// attempt is retried with the same peers.
        #[arg(long = "exposed-liar", conflicts_with = "drop_random")]
        liars: Vec<usize>,
        /// No liar is exposed: after a failed attempt drop one random peer (this seed)
        /// among those that served a chunk.
        #[arg(long, value_name = "SEED")]
        drop_random: Option<u64>,
        #[arg(long, default_value_t = 50)]
        max_attempts: u32,
        /// Where the imported state is written (and fsynced).
        #[arg(long)]
        out: PathBuf,
        /// `store`: the pairs inserted into a bavl tree written as a store at version 1
        /// (what `bavl sync` ends with); `flat`: the stream written to one file (a
        /// lower bound on any import).
        #[arg(long, default_value = "store")]
        import: String,
        /// Chunk capacity of the imported store.
        #[arg(long, default_value_t = 64)]
        capacity: u32,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// A TCP proxy adding a fixed delay to the bytes of each direction: the lab's WAN
    /// latency (`scripts/netlab.sh` runs one in front of each peer; the kernel has no netem).
    Delay {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Where each connection is forwarded.
        #[arg(long)]
        upstream: std::net::SocketAddr,
        /// Delay of the bytes from the client to the upstream (requests), milliseconds.
        #[arg(long, default_value_t = 25)]
        up_ms: u64,
        /// Delay of the bytes from the upstream to the client (responses), milliseconds.
        #[arg(long, default_value_t = 25)]
        down_ms: u64,
    },
    /// Runs the experiments in the netlab namespaces (root; builds the lab itself).
    Run(RunArgs),
    /// Sync against adversarial crowds, on loopback: one honest `bavl serve` beside 0, 12 or
    /// 48 liars of each adversarial kind, the real `bavl sync` measured (time, peak RSS, each
    /// source's health) -> docs/results/sync-adversarial.json, docs/results/sync-adversarial/.
    Adversarial(bavl_synclab::adversarial::cli::Args),
    /// COUNT lying sources of one KIND (as `bavl-harness serve-liar --byzantine` lies) over
    /// a `bavl export` directory in this one process, on loopback ports: prints each URL,
    /// then `ready`; serves until stdin ends.
    Crowd {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        count: usize,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
    },
    /// Redraws the plots and rewrites the §7 summary from the CSVs in a results directory.
    Report {
        #[arg(long, default_value_os_t = bavl_labkit::results_path("sync"))]
        dir: PathBuf,
        #[arg(long, default_value_os_t = bavl_labkit::results_path("sync.json"))]
        json: PathBuf,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Smoke run: 20k keys, 3 peers, 0 and 1 Byzantine, one repetition (~1-2 minutes).
    #[arg(long)]
    quick: bool,
    /// Experiments, comma-separated: s7 (the headline figures: 1M keys, 10 peers, 50 ms RTT,
    /// 100 Mbit/s), size, chunk, peers, byz, cpu (s7's honest runs with no link limits: what
    /// the CPUs allow), honest (s7's honest bavl run alone, for quick iterations), bavl7
    /// (s7's bavl runs, 0, 1, 3 and 4 liars, without the baseline), blind (s7's baseline
    /// with 1 and 4 liars when nobody is exposed and a random peer is dropped instead).
    #[arg(long, default_value = "s7,size,chunk,peers,byz", value_delimiter = ',')]
    exp: Vec<String>,
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Unmeasured syncs before each configuration's repetitions. Peers in a real network
    /// have served before; the first sync after the servers (and the lab's delay proxies)
    /// start pays their cold start, which on this VM is mostly first-touching memory
    /// (measured: servers 1.36 CPU-s in the first repetition, 0.80 in the third).
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// bavl chunk capacity (pairs per chunk) outside the chunk sweep.
    #[arg(long, default_value_t = 256)]
    capacity: u32,
    #[arg(long, default_value_t = 50)]
    rtt_ms: u64,
    #[arg(long, default_value_t = 100)]
    rate_mbit: u64,
    /// Baseline chunk size in bytes (0: as many pairs per chunk as bavl's capacity).
    #[arg(long, default_value_t = 0)]
    baseline_chunk_bytes: u64,
    #[arg(long, default_value_t = 32)]
    baseline_workers: usize,
    /// `bavl-harness serve-liar --byzantine` kind of bavl's Byzantine peers.
    #[arg(long, default_value = "wrong-bytes")]
    bavl_lie: String,
    /// Output directory for CSV and PNG (default docs/results/sync, quick: target/synclab/quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The §7 summary (default docs/results/sync.json; quick: OUT/sync.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// The `bavl` binary (default: beside this one).
    #[arg(long)]
    bavl: Option<PathBuf>,
    /// The `bavl-harness` binary, whose `serve-liar` runs bavl's Byzantine peers (default:
    /// beside this one; without it bavl's Byzantine runs are skipped).
    #[arg(long)]
    harness: Option<PathBuf>,
    /// The lab's network script.
    #[arg(long, default_value_os_t = bavl_labkit::repo_path("scripts/netlab.sh"))]
    netlab: PathBuf,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep_lab: bool,
    /// Seconds before a sync is killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

fn main() -> ExitCode {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::MakeState { keys, capacity, out } => bavl_synclab::state::ensure(&out, keys, capacity)
            .map(|i| {
                println!("{}", serde_json::to_string_pretty(&i).unwrap_or_default());
                ExitCode::SUCCESS
            }),
        Cmd::ServeBaseline { db, listen, chunk_bytes, corrupt } => {
            serve_baseline(&db, &listen, chunk_bytes, corrupt)
        }
        Cmd::FetchBaseline {
            peers,
            root,
            workers,
            liars,
            drop_random,
            max_attempts,
            out,
            import,
            capacity,
            json,
        } => {
            let import = match import.as_str() {
                "store" => Some(capacity),
                "flat" => None,
                _ => {
                    eprintln!("error: --import is store or flat");
                    return ExitCode::from(2);
                }
            };
            let policy = match (drop_random, liars.is_empty()) {
                (Some(seed), _) => RetryPolicy::DropRandom { seed },
                (None, true) => RetryPolicy::Same,
                (None, false) => RetryPolicy::ExposeOneLiar { liars },
            };
            let Some(trusted) = hex::decode(&root).ok().and_then(|v| v.try_into().ok()) else {
                eprintln!("error: --root must be 64 hex digits");
                return ExitCode::from(2);
            };
            let cfg = baseline::Config {
                peers: peers.len(),
                trusted_root: trusted,
                workers,
                policy,
                max_attempts,
            };
            fetch_baseline(peers, &cfg, &out, import, json.as_deref())
        }
        Cmd::Delay { listen, upstream, up_ms, down_ms } => {
            // Each connection's two threads get fresh memory for the bytes they hold; with
            // huge pages the kernel zeroes 2 MiB at each first touch (this VM: ~2.3 ms),
            // and a proxy's first two syncs cost 1.0 CPU-s instead of 0.35.
            #[cfg(feature = "mimalloc")]
            bavl_alloc::no_transparent_huge_pages();
            delay(listen, upstream, up_ms, down_ms)
        }
        Cmd::Run(args) => run(&args),
        Cmd::Report { dir, json } => report(&dir, &json, false),
        Cmd::Adversarial(args) => bavl_synclab::adversarial::cli::main(&args),
        Cmd::Crowd { kind, count, dir, host } => {
            bavl_synclab::crowd::run(&kind, count, &dir, &host).map(|()| ExitCode::SUCCESS)
        }
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn delay(
    listen: std::net::SocketAddr,
    upstream: std::net::SocketAddr,
    up_ms: u64,
    down_ms: u64,
) -> Result<ExitCode> {
    use bavl_synclab::delay::{serve, Delays, Stats};
    let listener = TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    let delays = Delays { up: Duration::from_millis(up_ms), down: Duration::from_millis(down_ms) };
    let mut out = std::io::stdout();
    writeln!(out, "delay: {listen} -> {upstream}, +{up_ms} ms up, +{down_ms} ms down")
        .and_then(|()| out.flush())?;
    serve(listener, upstream, delays, Arc::new(Stats::default()))?;
    Ok(ExitCode::SUCCESS)
}

fn serve_baseline(db: &Path, listen: &str, chunk_bytes: u64, corrupt: bool) -> Result<ExitCode> {
    let snap = bavl_synclab::state::baseline_snapshot(db, chunk_bytes)?;
    let listener = TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    eprintln!(
        "serve-baseline: {} pairs, {} bytes in {} chunks of {chunk_bytes}{}",
        snap.meta.entries,
        snap.meta.total_bytes,
        snap.meta.chunks,
        if corrupt { " (corrupting every chunk)" } else { "" }
    );
    let mut out = std::io::stdout();
    writeln!(out, "serving http://{}", listener.local_addr()?).and_then(|()| out.flush())?;
    bavl_synclab::http::serve(listener, Arc::new(snap), corrupt);
    Ok(ExitCode::SUCCESS)
}

fn fetch_baseline(
    peers: Vec<String>,
    cfg: &baseline::Config,
    out: &Path,
    import: Option<u32>,
    json: Option<&Path>,
) -> Result<ExitCode> {
    let t = bavl_synclab::http::Http { peers, timeout: Duration::from_secs(30) };
    let result = baseline::sync(&t, cfg);
    let (code, summary) = match result {
        Ok(o) => {
            // The durable import.
            match import {
                Some(capacity) => import_store(&o.stream, capacity, out)?,
                None => {
                    let mut f = std::fs::File::create(out)?;
                    f.write_all(&o.stream)?;
                    f.sync_all()?;
                }
            }
            eprintln!(
                "baseline: {} pairs in {:.2} s, {} attempt(s), {} bytes fetched",
                o.entries,
                o.elapsed.as_secs_f64(),
                o.attempts.len(),
                o.fetched_bytes()
            );
            let s = json!({"ok": true, "entries": o.entries, "seconds": o.elapsed.as_secs_f64(),
                "attempts": o.attempts.len(), "fetched_bytes": o.fetched_bytes(),
                "root": hex::encode(o.root), "attempt_log": o.attempts});
            (ExitCode::SUCCESS, s)
        }
        Err(e) => {
            eprintln!("error: the baseline sync failed: {e}");
            (ExitCode::from(1), json!({"ok": false, "error": e.to_string()}))
        }
    };
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(&summary)?)?;
    }
    Ok(code)
}

/// The pairs of a verified stream as a bavl store at version 1, written and synced (as
/// `bavl sync` ends; neither reopens the store to check it).
fn import_store(stream: &[u8], capacity: u32, out: &Path) -> Result<()> {
    let mut tree = bavl_core::Tree::with_capacity(capacity).context("capacity")?;
    for (k, v) in baseline::decode(stream)? {
        tree.insert(k, v).context("insert")?;
    }
    bavl_store::Store::create_from_tree(out, &mut tree, 1)
        .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    Ok(())
}

fn setups(args: &RunArgs, exp: &str, bavl_byz: bool) -> Vec<Setup> {
    let mut v = Vec::new();
    let mut add = |method: Method, keys: u64, capacity: u32, peers: usize, byzantine: usize| {
        if method == Method::Bavl && byzantine > 0 && !bavl_byz {
            return;
        }
        v.push(Setup {
            exp: exp.to_string(),
            method,
            keys,
            capacity,
            peers,
            byzantine,
            rtt_ms: None,
            rate_mbit: None,
        });
    };
    let both = [Method::Bavl, Method::Baseline];
    let cap = args.capacity;
    if args.quick {
        for m in both {
            for b in [0, 1] {
                add(m, 20_000, cap, 3, b);
            }
        }
        return v;
    }
    match exp {
        "s7" => {
            for b in [0, 1, 3, 4] {
                add(Method::Bavl, 1_000_000, cap, 10, b);
            }
            for b in [0, 1, 4] {
                add(Method::Baseline, 1_000_000, cap, 10, b);
            }
            for b in [1, 4] {
                add(Method::BaselineBlind, 1_000_000, cap, 10, b);
            }
        }
        "size" => {
            for keys in [100_000, 1_000_000] {
                for m in both {
                    for b in [0, 1] {
                        add(m, keys, cap, 10, b);
                    }
                }
            }
        }
        "chunk" => {
            for c in [64, 256, 1024, 4096] {
                for m in both {
                    for b in [0, 1] {
                        add(m, 1_000_000, c, 10, b);
                    }
                }
            }
        }
        "peers" => {
            for p in [3, 6, 9, 12] {
                for m in both {
                    for b in [0, 1] {
                        add(m, 1_000_000, cap, p, b);
                    }
                }
            }
        }
        "byz" => {
            for b in 0..=4 {
                for m in both {
                    add(m, 1_000_000, cap, 12, b);
                }
            }
        }
        "honest" => add(Method::Bavl, 1_000_000, cap, 10, 0),
        // The §7 configurations of bavl alone (no baseline): a quick check of its figures.
        "bavl7" => {
            for b in [0, 1, 3, 4] {
                add(Method::Bavl, 1_000_000, cap, 10, b);
            }
        }
        "blind" => {
            for b in [1, 4] {
                add(Method::BaselineBlind, 1_000_000, cap, 10, b);
            }
        }
        "cpu" => {
            // No link limits (no added latency, 10 Gbit/s tbf): what the 2 cores allow.
            for m in both {
                add(m, 1_000_000, cap, 10, 0);
            }
            for s in &mut v {
                s.rtt_ms = Some(0);
                s.rate_mbit = Some(10_000);
            }
        }
        _ => {}
    }
    v
}

fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "exp,method,keys,capacity,chunk_bytes,peers,byzantine,rtt_ms,rate_mbit,rep,ok,seconds,attempts,fetched_bytes,state_bytes,floor_s,peak_rss_mb,client_cpu_s,machine_busy_cores,servers_cpu_s,proxies_cpu_s,inner_s,banned,note\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{:.3},{:.1},{:.2},{:.2},{:.2},{:.2},{:.3},{},\"{}\"\n",
            r.exp,
            r.method.name(),
            r.keys,
            r.capacity,
            r.chunk_bytes,
            r.peers,
            r.byzantine,
            r.rtt_ms,
            r.rate_mbit,
            r.rep,
            r.ok,
            r.seconds,
            r.attempts,
            r.fetched_bytes,
            r.state_bytes,
            r.floor_s,
            r.peak_rss_mb,
            r.client_cpu_s,
            r.machine_busy_cores,
            r.servers_cpu_s,
            r.proxies_cpu_s,
            r.inner_s,
            r.banned,
            r.note.replace('"', "'")
        ));
    }
    s
}

fn med(rows: &[Row], keep: impl Fn(&Row) -> bool) -> Option<f64> {
    median(rows.iter().filter(|r| r.ok && keep(r)).map(|r| r.seconds).collect())
}

/// The median (nearest rank, `bavl_labkit::stats`); `None` when nothing was measured.
fn median(v: Vec<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| stats::median(&v))
}

fn s7_summary(quick: bool, rows: &[Row], made: &str) -> serde_json::Value {
    let peers = if quick { 3 } else { 10 };
    let third = peers / 3;
    let s7: Vec<Row> =
        rows.iter().filter(|r| r.exp == if quick { "quick" } else { "s7" }).cloned().collect();
    let blind: Vec<Row> = rows
        .iter()
        .filter(|r| r.exp == "blind" || (r.exp == "s7" && r.method == Method::BaselineBlind))
        .cloned()
        .collect();
    let mb = |b: usize| med(&blind, |r| r.byzantine == b);
    let bavl_byz = s7.iter().any(|r| r.method == Method::Bavl && r.byzantine > 0);
    let m = |method: Method, b: usize| med(&s7, |r| r.method == method && r.byzantine == b);
    let honest = m(Method::Bavl, 0);
    let floor = s7.iter().find(|r| r.method == Method::Bavl).map(|r| r.floor_s);
    let third_s = m(Method::Bavl, third);
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let one = ratio(m(Method::Baseline, 1), m(Method::Bavl, 1));
    let four_b = if quick { 1 } else { 4 };
    let four = ratio(m(Method::Baseline, four_b), m(Method::Bavl, four_b));
    let rss = s7
        .iter()
        .filter(|r| r.method == Method::Bavl && r.byzantine == 0 && r.ok)
        .map(|r| r.peak_rss_mb)
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
    let busy = s7
        .iter()
        .filter(|r| r.method == Method::Bavl && r.byzantine == 0 && r.ok)
        .map(|r| r.machine_busy_cores)
        .sum::<f64>()
        / s7.iter().filter(|r| r.method == Method::Bavl && r.byzantine == 0 && r.ok).count().max(1)
            as f64;
    let info = s7.iter().find(|r| r.method == Method::Bavl);
    let hf = ratio(honest, floor);
    // Every process of the experiment shares this machine's cores: the CPU-seconds the
    // client, the servers and the proxies (the simulated network) used, over the cores,
    // is a second floor beside the bandwidth's.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_floor = median(
        s7.iter()
            .filter(|r| r.method == Method::Bavl && r.byzantine == 0 && r.ok)
            .map(|r| (r.client_cpu_s + r.servers_cpu_s + r.proxies_cpu_s) / cores)
            .collect(),
    );
    let th = ratio(third_s, honest);
    json!({
        "what": "state sync of 1M Workload A pairs (20-byte keys, 100-byte values) from 10 peers, each behind a delay proxy (50 ms RTT) and tbf (100 Mbit/s egress), real processes in network namespaces: bavl serve / bavl sync against the Cosmos/IAVL-style baseline (opaque fixed-size chunks, root checked after import, restart from scratch, one liar exposed per failed attempt); medians of the repetitions",
        "quick": quick,
        "keys": info.map(|r| r.keys),
        "capacity": info.map(|r| r.capacity),
        "peers": peers,
        "rtt_ms": info.map(|r| r.rtt_ms),
        "rate_mbit_per_peer": info.map(|r| r.rate_mbit),
        "repetitions": s7.iter().map(|r| r.rep + 1).max(),
        "bavl_state_bytes": info.map(|r| r.state_bytes),
        "honest_sync_s": honest,
        "bandwidth_floor_s": floor,
        "honest_over_floor": hf,
        "cpu_floor_s": cpu_floor,
        "cpu_floor_what": "median over the honest runs of (client + servers + proxies CPU seconds) / cores: the machine cannot finish the experiment sooner, whatever the links",
        "honest_over_cpu_floor": ratio(honest, cpu_floor),
        "honest_target": 1.25,
        "honest_target_met": hf.map(|x| x <= 1.25),
        "third_byzantine_peers": third,
        "third_byzantine_sync_s": third_s,
        "third_byzantine_over_honest": th,
        "third_byzantine_target": 1.3,
        "third_byzantine_target_met": th.map(|x| x <= 1.3),
        "baseline_honest_sync_s": m(Method::Baseline, 0),
        "baseline_one_byzantine_sync_s": m(Method::Baseline, 1),
        "bavl_one_byzantine_sync_s": m(Method::Bavl, 1),
        "baseline_one_byzantine_ratio": one,
        "baseline_one_byzantine_target": 5.0,
        "baseline_one_byzantine_target_met": one.map(|x| x >= 5.0),
        "baseline_four_byzantine_sync_s": m(Method::Baseline, four_b),
        "blind_baseline": {
            "what": "the baseline when a failed attempt exposes nobody and the node drops one random peer that served a chunk (seed = repetition): what a node without the paper's hint gets",
            "one_byzantine_sync_s": mb(1),
            "one_byzantine_ratio": ratio(mb(1), m(Method::Bavl, 1)),
            "four_byzantine_sync_s": mb(four_b),
            "four_byzantine_ratio": ratio(mb(four_b), m(Method::Bavl, four_b)),
            "attempts": blind.iter().map(|r| (r.byzantine, r.attempts)).collect::<Vec<_>>(),
        },
        "bavl_four_byzantine_sync_s": m(Method::Bavl, four_b),
        "baseline_four_byzantine_ratio": four,
        "baseline_four_byzantine_target": 20.0,
        "baseline_four_byzantine_target_met": four.map(|x| x >= 20.0),
        "peak_rss_mb": rss,
        "machine_busy_cores_during_honest_sync": busy,
        "bavl_byzantine_available": bavl_byz,
        "bavl_honest_breakdown": breakdown(&s7, Method::Bavl),
        "baseline_honest_breakdown": breakdown(&s7, Method::Baseline),
        "no_link_limits": {
            "what": "the same honest syncs with no added latency and 10 Gbit/s tbf (cpu.csv): what the 2 shared cores allow",
            "bavl_sync_s": med(rows, |r| r.exp == "cpu" && r.method == Method::Bavl),
            "baseline_sync_s": med(rows, |r| r.exp == "cpu" && r.method == Method::Baseline),
        },
        "machine": Machine::at_end(),
        "made_by": made,
        "summary_date": utc_now(),
        "csv": "docs/results/sync/s7.csv",
    })
}

/// Medians of the honest runs' time and CPU split.
fn breakdown(rows: &[Row], m: Method) -> serde_json::Value {
    let h: Vec<&Row> = rows.iter().filter(|r| r.ok && r.method == m && r.byzantine == 0).collect();
    let md = |f: &dyn Fn(&Row) -> f64| median(h.iter().map(|r| f(r)).collect());
    json!({
        "total_s": md(&|r| r.seconds),
        "client_timer_s": md(&|r| r.inner_s),
        "client_cpu_s": md(&|r| r.client_cpu_s),
        "servers_cpu_s": md(&|r| r.servers_cpu_s),
        "proxies_cpu_s": md(&|r| r.proxies_cpu_s),
        "machine_busy_cores": md(&|r| r.machine_busy_cores),
        "peak_rss_mb": md(&|r| r.peak_rss_mb),
    })
}

/// Reads every run CSV of `dir`, redraws the plots, and writes the §7 summary if the
/// directory has s7 (or quick) runs.
fn report(dir: &Path, json_path: &Path, quick: bool) -> Result<ExitCode> {
    let mut rows = Vec::new();
    let mut made = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "csv") {
            let text = std::fs::read_to_string(&p)?;
            rows.extend(Row::parse_csv(&text).with_context(|| format!("{}", p.display()))?);
        }
        if p.extension().is_some_and(|x| x == "cmd") {
            made.push(std::fs::read_to_string(&p)?.trim().to_string());
        }
    }
    made.sort();
    plots(dir, &rows)?;
    if rows.iter().any(|r| r.exp == if quick { "quick" } else { "s7" }) {
        let summary = s7_summary(quick, &rows, &made.join("; "));
        std::fs::write(json_path, serde_json::to_string_pretty(&summary)? + "\n")?;
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn plots(out: &Path, rows: &[Row]) -> Result<()> {
    let by = |exp: &str| -> Vec<Row> { rows.iter().filter(|r| r.exp == exp).cloned().collect() };
    let specs: [(&str, &str, &str, bool); 4] = [
        ("size", "Sync time vs state size (10 peers, 50 ms, 100 Mbit/s each)", "keys", true),
        ("chunk", "Sync time vs chunk size (1M keys, 10 peers)", "pairs per chunk", true),
        ("peers", "Sync time vs peers (1M keys)", "peers", false),
        ("byz", "Sync time vs Byzantine peers (1M keys, 12 peers)", "Byzantine peers", false),
    ];
    for (exp, title, xl, log_x) in specs {
        let r = by(exp);
        if r.is_empty() {
            continue;
        }
        let series = match exp {
            "size" => plot::standard(&r, |r| r.keys as f64, &[0, 1]),
            "chunk" => plot::standard(&r, |r| f64::from(r.capacity), &[0, 1]),
            "peers" => plot::standard(&r, |r| r.peers as f64, &[0, 1]),
            _ => {
                let mut s = Vec::new();
                for (m, c) in [
                    (Method::Bavl, bavl_labkit::plot::BLUE),
                    (Method::Baseline, bavl_labkit::plot::ORANGE),
                    (Method::BaselineBlind, plotters::style::RGBColor(160, 40, 40)),
                ] {
                    let line = |label: String, dashed: bool, y: fn(&Row) -> f64| plot::Series {
                        label,
                        color: c,
                        dashed,
                        points: plot::points(&r, |x| x.method == m, |x| x.byzantine as f64, y),
                    };
                    s.push(line(m.name().to_string(), false, |x| x.seconds));
                    if m != Method::BaselineBlind {
                        s.push(line(format!("{} bandwidth floor", m.name()), true, |x| x.floor_s));
                    }
                }
                s
            }
        };
        let path = out.join(format!("{exp}.png"));
        if let Err(e) = plot::draw(&path, title, xl, &series, log_x) {
            eprintln!("synclab: {}: {e:#}", path.display());
        }
    }
    Ok(())
}

fn run(args: &RunArgs) -> Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let bavl = args.bavl.clone().unwrap_or_else(|| exe.with_file_name("bavl"));
    if !bavl.is_file() {
        bail!("{} not found (cargo build --release -p bavl-cli, or --bavl PATH)", bavl.display());
    }
    let work = bavl_labkit::repo_path("target/synclab");
    let out = args.out.clone().unwrap_or_else(|| {
        if args.quick {
            work.join("quick")
        } else {
            bavl_labkit::results_path("sync")
        }
    });
    let json_path = args.json.clone().unwrap_or_else(|| {
        if args.quick {
            out.join("sync.json")
        } else {
            bavl_labkit::results_path("sync.json")
        }
    });
    std::fs::create_dir_all(&out)?;
    let harness = args.harness.clone().unwrap_or_else(|| exe.with_file_name("bavl-harness"));
    let env = Env {
        bavl: std::fs::canonicalize(&bavl)?,
        harness: std::fs::canonicalize(&harness).unwrap_or(harness),
        synclab: std::fs::canonicalize(&exe)?,
        netlab: args.netlab.clone(),
        work,
        rtt_ms: args.rtt_ms,
        rate_mbit: args.rate_mbit,
        bavl_lie: args.bavl_lie.clone(),
        baseline_workers: args.baseline_workers,
        baseline_chunk_bytes: args.baseline_chunk_bytes,
        timeout: Duration::from_secs(args.timeout),
        warmup: args.warmup,
    };
    let bavl_byz = runner::harness_serves_liars(&env.harness);
    if !bavl_byz {
        eprintln!(
            "synclab: no `bavl-harness serve-liar` at {} (cargo build --release -p \
             bavl-harness, or --harness PATH): bavl's Byzantine runs are skipped",
            env.harness.display()
        );
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let exps: Vec<String> = if args.quick { vec!["quick".into()] } else { args.exp.clone() };
    let all: Vec<Setup> = exps.iter().flat_map(|e| setups(args, e, bavl_byz)).collect();
    let max_peers = all.iter().map(|s| s.peers).max().unwrap_or(0);
    if max_peers == 0 {
        bail!("nothing to run (experiments: s7, size, chunk, peers, byz)");
    }
    let reps = if args.quick { 1 } else { args.reps };
    let mut rows: Vec<Row> = Vec::new();
    let mut failed = 0;
    let mut lab: Option<(u64, u64)> = None;
    for s in &all {
        let mut env = env.clone();
        env.rtt_ms = s.rtt_ms.unwrap_or(args.rtt_ms);
        env.rate_mbit = s.rate_mbit.unwrap_or(args.rate_mbit);
        if lab != Some((env.rtt_ms, env.rate_mbit)) {
            runner::lab_up(&env, max_peers)?;
            lab = Some((env.rtt_ms, env.rate_mbit));
        }
        match runner::run_setup(&env, s, reps) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                failed += 1;
                eprintln!(
                    "synclab: {} {} peers={} byz={}: {e:#}",
                    s.exp,
                    s.method.name(),
                    s.peers,
                    s.byzantine
                );
            }
        }
        // One CSV per experiment (runs of other experiments in OUT stay as they are).
        let mine: Vec<Row> = rows.iter().filter(|r| r.exp == s.exp).cloned().collect();
        std::fs::write(out.join(format!("{}.csv", s.exp)), csv(&mine))?;
    }
    if !args.keep_lab {
        runner::lab_down(&env);
    }
    let when = utc_now();
    for e in &exps {
        if rows.iter().any(|r| &r.exp == e) {
            std::fs::write(out.join(format!("{e}.cmd")), format!("{e}: {command} ({when})\n"))?;
        }
    }
    report(&out, &json_path, args.quick)?;
    let bad = rows.iter().filter(|r| !r.ok).count();
    eprintln!(
        "synclab: {} runs, {bad} failed, {failed} configurations not run; {}",
        rows.len(),
        out.display()
    );
    Ok(if bad == 0 && failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
