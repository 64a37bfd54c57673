//! `bavl-clusterlab load`: the client process. It runs phases of a workload with N
//! concurrent clients (`bavl_cluster::client::Client`, each with its own routing cache and
//! connections), one operation at a time per client (a closed loop), and prints one JSON
//! [`LoadResult`] on stdout: per phase the operations, latencies, the clients' retries and
//! directory lookups, this process's CPU time and every node's counters and CPU time
//! (queried at the phase's start and end). With `history`, every operation is also written
//! in the lincheck history format (times: ns on this process's monotonic clock).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bavl_cluster::client::{Client, ClientError, ClientOptions, ClientStats};
use bavl_cluster::history::{HexBytes, Kind, Op};
use bavl_cluster::msg::Transport;
use bavl_cluster::mux::MuxTransport;
use bavl_cluster::tcp::TcpTransport;
use bavl_cluster::types::NodeId;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::wire::{proc_cpu_s, query_stats, NodeStats};

/// What the clients do.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Gets of preloaded keys.
    Search,
    /// Puts to preloaded keys.
    Update,
    /// Puts to keys never written before.
    Insert,
    /// 80% search, 15% update, 5% insert (the paper's mixed workload).
    Mixed,
    /// For histories (empty store): 40% get, 40% put, 5% delete of `keys` hot keys, 15%
    /// puts of fresh keys. Not a `probe` workload (it needs an empty store).
    #[value(skip)]
    History,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseSpec {
    pub name: String,
    pub workload: Workload,
    pub clients: u32,
    pub seconds: f64,
    /// `(i, p)`: only partition `i`'s keys of `p` equal partitions of the preloaded keys
    /// (the ranges the lab's clusters start with, `node::initial_ranges`); `None`: all keys.
    #[serde(default)]
    pub partition: Option<(u64, u64)>,
}

/// The preloaded keys' indices a phase draws from.
pub fn key_window(keys: u64, partition: Option<(u64, u64)>) -> std::ops::Range<u64> {
    let keys = keys.max(1);
    match partition {
        Some((i, p)) if p > 0 && i < p && keys >= p => i * keys / p..(i + 1) * keys / p,
        _ => 0..keys,
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub peers: String,
    pub no_cache: bool,
    /// Clients sharing one [`MuxTransport`] (one multiplexed connection per node), as the
    /// application threads of one client machine share its client library; 0: every
    /// client has its own plain connections (one request at a time on each).
    pub clients_per_connection: u32,
    /// Preloaded keys (search and update pick among them; fresh keys fall between them).
    pub keys: u64,
    pub phases: Vec<PhaseSpec>,
    pub history: Option<PathBuf>,
    pub seed: u64,
}

/// Latency summary of one kind of operation, milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClientSums {
    pub retries: u64,
    pub stale: u64,
    pub not_leader: u64,
    pub directory_lookups: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseResult {
    pub name: String,
    pub workload: Option<Workload>,
    pub clients: u32,
    pub wall_s: f64,
    /// Operations that completed successfully.
    pub ok: u64,
    /// Writes whose outcome is unknown (time-outs, unknown answers).
    pub unknown: u64,
    /// Operations that failed for certain (gave up, refused).
    pub failed: u64,
    pub latency: BTreeMap<String, Latency>,
    pub client: ClientSums,
    pub client_cpu_s: f64,
    /// Per node (by id): counters and CPU time over the phase; absent if a node did not
    /// answer at the start or the end (killed).
    pub nodes: BTreeMap<NodeId, NodeStats>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadResult {
    pub phases: Vec<PhaseResult>,
    pub history_ops: u64,
}

struct Done {
    kind: &'static str,
    micros: u64,
    outcome: Outcome,
}

#[derive(PartialEq)]
enum Outcome {
    Ok,
    Unknown,
    Failed,
}

struct Worker {
    client: Client,
    rng: SmallRng,
    seq: u64,
    done: Vec<Done>,
    history: Vec<Op>,
}

fn sums(workers: &[Worker]) -> ClientStats {
    let mut s = ClientStats::default();
    for w in workers {
        s.retries += w.client.stats.retries;
        s.stale += w.client.stats.stale;
        s.not_leader += w.client.stats.not_leader;
        s.directory_lookups += w.client.stats.directory_lookups;
    }
    s
}

fn outcome_of(e: &ClientError) -> Outcome {
    match e {
        ClientError::Unknown(_) => Outcome::Unknown,
        _ => Outcome::Failed,
    }
}

impl Worker {
    /// One operation of `w`, recorded.
    async fn step(&mut self, w: Workload, keys: Range<u64>, t0: Instant, record: bool) {
        let r: f64 = self.rng.gen();
        let id = self.client.id;
        let hot = |rng: &mut SmallRng| keys::key(keys::preloaded(rng.gen_range(keys.clone())));
        let (kind, key, write) = match w {
            Workload::Search => ("search", hot(&mut self.rng), None),
            Workload::Update => ("update", hot(&mut self.rng), Some(Kind::Put)),
            Workload::Insert => {
                ("insert", keys::key(keys::fresh(&mut self.rng, keys.clone())), Some(Kind::Put))
            }
            Workload::Mixed if r < 0.80 => ("search", hot(&mut self.rng), None),
            Workload::Mixed if r < 0.95 => ("update", hot(&mut self.rng), Some(Kind::Put)),
            Workload::Mixed => {
                ("insert", keys::key(keys::fresh(&mut self.rng, keys.clone())), Some(Kind::Put))
            }
            Workload::History if r < 0.40 => ("search", hot(&mut self.rng), None),
            Workload::History if r < 0.80 => ("update", hot(&mut self.rng), Some(Kind::Put)),
            Workload::History if r < 0.85 => ("delete", hot(&mut self.rng), Some(Kind::Delete)),
            Workload::History => {
                ("insert", keys::key(keys::fresh(&mut self.rng, keys.clone())), Some(Kind::Put))
            }
        };
        self.seq += 1;
        let value = keys::written_value(id, self.seq);
        let call = Instant::now();
        let (outcome, read) = match write {
            None => match self.client.get(&key).await {
                Ok(v) => (Outcome::Ok, v),
                Err(e) => (outcome_of(&e), None),
            },
            Some(Kind::Put) => match self.client.put(&key, &value).await {
                Ok(()) => (Outcome::Ok, None),
                Err(e) => (outcome_of(&e), None),
            },
            Some(_) => match self.client.delete(&key).await {
                Ok(()) => (Outcome::Ok, None),
                Err(e) => (outcome_of(&e), None),
            },
        };
        let ret = Instant::now();
        let micros = (ret - call).as_micros() as u64;
        let ok = outcome == Outcome::Ok;
        self.done.push(Done { kind, micros, outcome });
        if !record {
            return;
        }
        let ns = |t: Instant| (t - t0).as_nanos() as u64;
        let (op, value) = match write {
            None => (Kind::Get, if ok { read.map(HexBytes) } else { None }),
            Some(Kind::Put) => (Kind::Put, Some(HexBytes(value))),
            Some(k) => (k, None),
        };
        // A failed or unknown write may have taken effect (conservatively: a "gave up"
        // write is recorded as unknown too); a failed get constrains nothing.
        let ret = ok.then(|| ns(ret));
        self.history.push(Op { client: id, op, key, value, call: ns(call), ret });
    }
}

fn latency(mut v: Vec<u64>) -> Latency {
    if v.is_empty() {
        return Latency::default();
    }
    v.sort_unstable();
    let q = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0;
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64 / 1000.0;
    Latency { count: v.len() as u64, p50_ms: q(0.50), p99_ms: q(0.99), mean_ms: mean }
}

async fn node_stats(addrs: &BTreeMap<NodeId, SocketAddr>) -> BTreeMap<NodeId, NodeStats> {
    let mut out = BTreeMap::new();
    for (&id, &a) in addrs {
        if let Ok(s) = query_stats(a).await {
            out.insert(id, s);
        }
    }
    out
}

pub async fn run(spec: Spec) -> Result<LoadResult> {
    let peers = crate::node::parse_peers(&spec.peers)?;
    let addrs: BTreeMap<NodeId, SocketAddr> = peers.iter().map(|(k, v)| (*k, *v)).collect();
    let nodes: Vec<NodeId> = addrs.keys().copied().collect();
    let most = spec.phases.iter().map(|p| p.clients).max().unwrap_or(1).max(1);
    let opts = ClientOptions {
        no_cache: spec.no_cache,
        timeout: Duration::from_secs(2),
        max_attempts: 60,
        backoff: Duration::from_millis(20),
        spread_reads: false,
    };
    let per = u64::from(spec.clients_per_connection);
    let mut shared: Option<Arc<dyn Transport>> = None;
    let mut workers: Vec<Worker> = (0..most as u64)
        .map(|i| {
            let transport: Arc<dyn Transport> = if per == 0 {
                TcpTransport::new(peers.clone(), Duration::from_secs(2))
            } else {
                if i % per == 0 {
                    shared = Some(MuxTransport::new(peers.clone(), Duration::from_secs(2)));
                }
                shared.clone().expect("set at i = 0")
            };
            let id = spec.seed * 1000 + i + 1;
            Worker {
                client: Client::new(id, nodes.clone(), transport, opts.clone()),
                rng: SmallRng::seed_from_u64(spec.seed.wrapping_mul(7919).wrapping_add(i)),
                seq: 0,
                done: vec![],
                history: vec![],
            }
        })
        .collect();
    let t0 = Instant::now();
    let record = spec.history.is_some();
    let mut out = LoadResult::default();
    for ph in &spec.phases {
        let before_nodes = node_stats(&addrs).await;
        let before_clients = sums(&workers);
        let cpu0 = proc_cpu_s("self").unwrap_or(0.0);
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(ph.seconds);
        let active: Vec<Worker> = workers.drain(..ph.clients as usize).collect();
        let mut tasks = Vec::new();
        for mut w in active {
            let (wl, keys) = (ph.workload, key_window(spec.keys, ph.partition));
            tasks.push(tokio::spawn(async move {
                w.done.clear();
                while Instant::now() < deadline {
                    w.step(wl, keys.clone(), t0, record).await;
                }
                w
            }));
        }
        let mut back = Vec::new();
        for t in tasks {
            back.push(t.await.context("a client task panicked")?);
        }
        let wall_s = start.elapsed().as_secs_f64();
        let cpu1 = proc_cpu_s("self").unwrap_or(0.0);
        let after_nodes = node_stats(&addrs).await;
        let mut r = PhaseResult {
            name: ph.name.clone(),
            workload: Some(ph.workload),
            clients: ph.clients,
            wall_s,
            client_cpu_s: cpu1 - cpu0,
            ..Default::default()
        };
        let mut lat: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for w in &back {
            for d in &w.done {
                match d.outcome {
                    Outcome::Ok => {
                        r.ok += 1;
                        lat.entry(d.kind.to_string()).or_default().push(d.micros);
                        lat.entry("all".to_string()).or_default().push(d.micros);
                    }
                    Outcome::Unknown => r.unknown += 1,
                    Outcome::Failed => r.failed += 1,
                }
            }
        }
        r.latency = lat.into_iter().map(|(k, v)| (k, latency(v))).collect();
        back.append(&mut workers);
        workers = back;
        let after_clients = sums(&workers);
        r.client = ClientSums {
            retries: after_clients.retries - before_clients.retries,
            stale: after_clients.stale - before_clients.stale,
            not_leader: after_clients.not_leader - before_clients.not_leader,
            directory_lookups: after_clients.directory_lookups - before_clients.directory_lookups,
        };
        for (id, a) in &after_nodes {
            if let Some(b) = before_nodes.get(id) {
                if a.pid == b.pid {
                    r.nodes.insert(*id, a.since(b));
                }
            }
        }
        eprintln!(
            "load: {} ({:?}, {} clients): {} ok, {} unknown, {} failed in {:.1} s",
            r.name, ph.workload, ph.clients, r.ok, r.unknown, r.failed, wall_s
        );
        out.phases.push(r);
    }
    if let Some(path) = &spec.history {
        let mut ops: Vec<Op> = workers.iter_mut().flat_map(|w| w.history.drain(..)).collect();
        ops.sort_by_key(|o| o.call);
        out.history_ops = ops.len() as u64;
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        bavl_cluster::history::write_jsonl(&ops, &mut f)?;
        std::io::Write::flush(&mut f)?;
    }
    Ok(out)
}
