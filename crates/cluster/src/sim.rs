//! The deterministic simulation: nodes, clients and faults in one single-threaded tokio
//! runtime with paused (virtual) time, over [`SimNet`].
//!
//! What is reproducible: the workload, the fault schedule and the network's choices are all
//! drawn from generators seeded by [`SimOptions::seed`], and virtual time makes timing
//! independent of the machine. What is not bit-exact: openraft draws its election timeouts
//! from the thread's own generator, so two runs of one seed may elect differently; the
//! checks below hold on every run, and a failing seed fails again with high probability.
//!
//! Checked continuously (every 100 ms of virtual time), on the live nodes:
//! - the newest descriptor of each group (highest epoch among its replicas) tile the key
//!   space: no overlap ever; a gap only while a split's child is starting (a gap seen on
//!   two checks in a row is a violation);
//! - replicas of one group that have applied the same log index have the same root.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::client::{Client, ClientError, ClientOptions, ClientStats};
use crate::history::{HexBytes, Kind, Op};
use crate::log_store::Durability;
use crate::node::{raft_config, NodeOptions};
use crate::simcheck::{chaos, check, check_loop, converge, mover, newest_descs, tiling};
use crate::simcluster::SimCluster;
use crate::simnet::{Faults, SimNet};
use crate::types::{NodeId, RangeDesc};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub seed: u64,
    pub nodes: u64,
    pub clients: u64,
    /// Operations per client.
    pub ops: u64,
    pub keys: u64,
    pub split_keys: u64,
    pub capacity: u32,
    pub faults: Faults,
    /// Crash/restart and partition nodes (one at a time).
    pub crashes: bool,
    /// With `crashes`: a third of the faults cut a node's Raft messages only, so a leader
    /// cut off from its peers still answers clients (`SimNet::cut_from_peers`).
    pub peer_cuts: bool,
    pub dir: PathBuf,
    pub no_cache: bool,
    /// Keep the last node cut off for the whole workload (healed before the final reads),
    /// so it misses splits and must catch up by snapshots.
    pub lagging_node: bool,
    /// openraft builds a snapshot every this many entries (and then purges the log).
    pub snapshot_every: u64,
    /// Inject stale reads (see `NodeOptions::unsafe_local_reads`), to show the checks fail.
    pub inject_stale_reads: bool,
    /// Replicas per range: nodes `1..=replicas` are bootstrapped (the directory and the
    /// first range); the others start empty and are registered in the directory.
    pub replicas: u64,
    /// Run the rebalancer on the directory leader.
    pub rebalance: bool,
    /// Move a random replica of a random range to a random node every 0.5-2 s (virtual).
    pub moves: bool,
    /// Load measurement, load splits and dead-node detection of the nodes.
    pub load: crate::load::LoadOptions,
    /// Stop these nodes for good, one after the other: node `.0` is stopped `.1` ms
    /// (virtual) after the run started (the first) or after no descriptor, of a range or of
    /// the directory, names the one stopped before it; the run waits (up to 120 s each)
    /// until none names any of them, before the final reads.
    pub kills: Vec<(NodeId, u64)>,
}

impl SimOptions {
    /// Three nodes, no clients, no faults, automatic splits above 60 keys, chunk capacity
    /// 8: a base for tests to change what they need.
    pub fn new(seed: u64, dir: &std::path::Path) -> Self {
        SimOptions {
            seed,
            nodes: 3,
            clients: 0,
            ops: 0,
            keys: 0,
            split_keys: 60,
            capacity: 8,
            faults: Faults { loss: 0.0, max_delay_ms: 3 },
            crashes: false,
            peer_cuts: false,
            dir: dir.to_path_buf(),
            no_cache: false,
            lagging_node: false,
            snapshot_every: 500,
            inject_stale_reads: false,
            replicas: 3,
            rebalance: false,
            moves: false,
            load: Default::default(),
            kills: Vec::new(),
        }
    }
}

/// What a simulation saw.
#[derive(Debug, Default)]
pub struct SimReport {
    pub history: Vec<Op>,
    pub violations: Vec<String>,
    pub faults_injected: u64,
    pub ranges: Vec<RangeDesc>,
    /// The directory's descriptor at the end (the newest among its live replicas).
    pub directory: Option<RangeDesc>,
    /// When each node of `SimOptions::kills` was stopped (nanoseconds of virtual time since
    /// the start, as the history's times).
    pub killed_at: Vec<(NodeId, u64)>,
    pub stats: ClientStats,
    pub messages: u64,
    pub unknown: u64,
    /// Random moves started, and those that completed.
    pub moves_tried: u64,
    pub moves_done: u64,
    /// Of the completed random moves, those of a directory replica.
    pub directory_moves: u64,
    /// Snapshot fetches (see `fetch`) of live nodes: completed, of which from more than one
    /// source, and failed (offers refused, to be offered again).
    pub fetches: u64,
    pub fetches_multi_source: u64,
    pub fetches_failed: u64,
    /// Merges committed and refused, as recorded in the live target ranges' states (a
    /// lower bound: a target merged away itself takes its record with it).
    pub merges: u64,
    pub merges_refused: u64,
}

/// Runs one simulation to completion in its own virtual-time runtime.
pub fn run(opts: SimOptions) -> SimReport {
    runtime().block_on(simulate(opts))
}

/// A single-threaded runtime with paused (virtual) time.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
}

pub(crate) fn node_options(opts: &SimOptions, id: NodeId) -> NodeOptions {
    NodeOptions {
        dir: opts.dir.join(format!("node-{id}")),
        durability: Durability::NoSync,
        raft: raft_config(50, 300, opts.snapshot_every),
        split_keys: opts.split_keys,
        capacity: opts.capacity,
        tick_ms: 200,
        unsafe_local_reads: opts.inject_stale_reads,
        rebalance: opts.rebalance,
        replicas: opts.replicas as usize,
        seeds: (1..=opts.replicas).collect(),
        load: opts.load.clone(),
    }
}

async fn simulate(opts: SimOptions) -> SimReport {
    let mut opts = opts;
    opts.replicas = opts.replicas.min(opts.nodes);
    let cluster = SimCluster::start(opts.clone()).await.expect("the cluster starts");
    let net = cluster.net.clone();
    let start = Instant::now();
    let history = Arc::new(Mutex::new(Vec::new()));
    let report = Arc::new(Mutex::new(SimReport::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = tokio::spawn(check_loop(net.clone(), report.clone()));
    let chaos = opts
        .crashes
        .then(|| tokio::spawn(chaos(net.clone(), opts.clone(), report.clone(), done.clone())));
    let mover = opts
        .moves
        .then(|| tokio::spawn(mover(net.clone(), opts.clone(), report.clone(), done.clone())));
    let killer = (!opts.kills.is_empty()).then(|| {
        let (net, kills) = (net.clone(), opts.kills.clone());
        tokio::spawn(async move {
            let (mut late, mut at_ns) = (Vec::new(), Vec::new());
            for (victim, at) in kills {
                tokio::time::sleep(Duration::from_millis(at)).await;
                if let Some(node) = net.detach(victim) {
                    node.shutdown().await;
                }
                at_ns.push((victim, start.elapsed().as_nanos() as u64));
                late.extend(forget(&net, victim, Duration::from_secs(120)).await.err());
            }
            (late, at_ns)
        })
    });
    if opts.lagging_node {
        net.isolate(opts.nodes, true);
    }
    let mut clients = Vec::new();
    for c in 0..opts.clients {
        let client = make_client(&opts, &net, c);
        clients.push(tokio::spawn(workload(client, opts.clone(), history.clone(), start)));
    }
    let mut stats = ClientStats::default();
    for c in clients {
        let s = c.await.expect("client task");
        stats.ops += s.ops;
        stats.retries += s.retries;
        stats.stale += s.stale;
        stats.not_leader += s.not_leader;
        stats.directory_lookups += s.directory_lookups;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for task in [chaos, mover].into_iter().flatten() {
        task.await.expect("chaos or mover task");
    }
    net.set_faults(Faults { loss: 0.0, max_delay_ms: 1 });
    net.isolate(opts.nodes, false);
    for n in 1..=opts.nodes {
        net.cut_from_peers(n, false);
    }
    let mut late = Vec::new();
    let mut killed_at = Vec::new();
    if let Some(task) = killer {
        let (missed, at) = task.await.expect("killer task");
        late.extend(missed);
        killed_at = at;
        for &(victim, _) in &opts.kills {
            late.extend(forget(&net, victim, Duration::from_secs(120)).await.err());
        }
    }
    let converged = converge(&net, Duration::from_secs(20)).await;
    let mut reader = make_client(&opts, &net, opts.clients);
    final_reads(&mut reader, &opts, &history, start).await;
    checker.abort();
    let mut r = std::mem::take(&mut *report.lock().expect("not poisoned"));
    r.violations.extend(check(&net, &mut HashMap::new()).await);
    r.violations.extend(converged.err());
    r.violations.extend(late);
    let (overlaps, gaps) = tiling(&newest_descs(&net).into_values().collect::<Vec<_>>());
    r.violations.extend(overlaps.into_iter().chain(gaps).map(|v| format!("after healing: {v}")));
    r.ranges = newest_descs(&net).into_values().collect();
    r.ranges.sort_by(|a, b| a.start.cmp(&b.start));
    r.directory = crate::simcheck::newest_directory(&net);
    r.killed_at = killed_at;
    r.history = std::mem::take(&mut *history.lock().expect("not poisoned"));
    r.unknown = r.history.iter().filter(|o| o.ret.is_none()).count() as u64;
    r.stats = stats;
    r.messages = net.messages.load(std::sync::atomic::Ordering::Relaxed);
    let mut decided = std::collections::BTreeMap::new();
    for node in net.live() {
        for g in node.groups() {
            let d = g.sm.shared.lock().expect("not poisoned").state.merge.decided.clone();
            let e = decided.entry(g.sm.desc().id).or_insert_with(Vec::new);
            if d.len() > e.len() {
                *e = d;
            }
        }
    }
    for d in decided.values().flatten() {
        r.merges += u64::from(d.committed);
        r.merges_refused += u64::from(!d.committed);
    }
    for node in net.live() {
        for f in node.fetch_log() {
            r.fetches += u64::from(f.ok);
            r.fetches_multi_source += u64::from(f.ok && f.served.len() > 1);
            r.fetches_failed += u64::from(!f.ok);
        }
        for g in node.groups() {
            let diverged = g.sm.shared.lock().expect("not poisoned").versions.diverged;
            if diverged > 0 {
                let id = g.sm.desc().id;
                r.violations
                    .push(format!("node {}: group {id}: {diverged} roots diverged", node.id));
            }
        }
    }
    cluster.shutdown().await;
    r
}

/// Waits (virtual time) until no range and not the directory names `victim` (a node stopped
/// for good), or says which groups still do after `limit`.
async fn forget(net: &SimNet, victim: NodeId, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let named = crate::simcheck::named(net, victim);
        if named.is_empty() {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("groups still on dead node {victim} after {limit:?}: {named:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn make_client(opts: &SimOptions, net: &Arc<SimNet>, c: u64) -> Client {
    let copts = ClientOptions {
        no_cache: opts.no_cache,
        spread_reads: opts.inject_stale_reads,
        ..ClientOptions::default()
    };
    Client::new(1000 + c, (1..=opts.replicas).collect(), net.clone(), copts)
}

fn key_of(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

async fn workload(
    mut client: Client,
    opts: SimOptions,
    history: Arc<Mutex<Vec<Op>>>,
    start: Instant,
) -> ClientStats {
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ (client.id << 32));
    for i in 0..opts.ops {
        let key = key_of(rng.gen_range(0..opts.keys));
        let choice = rng.gen_range(0..100);
        let call = start.elapsed().as_nanos() as u64;
        let (kind, value, result) = if choice < 45 {
            let r = client.get(&key).await;
            let v = r.as_ref().ok().cloned().flatten();
            (Kind::Get, v, r.map(drop))
        } else if choice < 92 {
            let v = format!("c{}-{i}", client.id).into_bytes();
            (Kind::Put, Some(v.clone()), client.put(&key, &v).await)
        } else {
            (Kind::Delete, None, client.delete(&key).await)
        };
        let ret = start.elapsed().as_nanos() as u64;
        let ret = match result {
            Ok(()) => Some(ret),
            Err(ClientError::Unknown(_)) => None,
            // Definitely not done: a get is recorded nowhere, a write likewise.
            Err(_) => continue,
        };
        let value = value.map(HexBytes);
        history.lock().expect("not poisoned").push(Op {
            client: client.id,
            op: kind,
            key,
            value,
            call,
            ret,
        });
    }
    client.stats.clone()
}

async fn final_reads(
    client: &mut Client,
    opts: &SimOptions,
    history: &Arc<Mutex<Vec<Op>>>,
    start: Instant,
) {
    for k in 0..opts.keys {
        let key = key_of(k);
        let call = start.elapsed().as_nanos() as u64;
        if let Ok(v) = client.get(&key).await {
            let ret = Some(start.elapsed().as_nanos() as u64);
            let op =
                Op { client: client.id, op: Kind::Get, key, value: v.map(HexBytes), call, ret };
            history.lock().expect("not poisoned").push(op);
        }
    }
}
