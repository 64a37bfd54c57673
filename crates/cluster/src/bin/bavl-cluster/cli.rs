//! The command line of `bavl-cluster` (binary only; errors are anyhow's).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::limits::ConnLimits;
use bavl_cluster::load::LoadOptions;
use bavl_cluster::log_store::Durability;
use bavl_cluster::node::{Node, NodeOptions};
use bavl_cluster::tcp::{serve_with, TcpTransport};
use bavl_cluster::types::NodeId;
use clap::{Parser, Subcommand};

use crate::{admin, demo};

/// Key ranges of bavl trees, each replicated by its own Raft group (openraft), with a
/// directory group and a routing client. See docs/cluster.md.
///
/// Try: `bavl-cluster demo --dir /tmp/bc` (a local 3-node cluster loaded with keys,
/// splitting, a node killed and restarted, every read checked).
#[derive(Parser)]
#[command(version)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node (a process hosting replicas of many groups) until killed.
    Node {
        /// This node's id (one of the ids in --peers).
        #[arg(long)]
        id: NodeId,
        /// Directory for this node's Raft logs and snapshots.
        #[arg(long)]
        dir: PathBuf,
        #[command(flatten)]
        peers: Peers,
        /// On an empty directory, create the directory group and the first range on all
        /// the peers (give it to every node of a new cluster; not to a node joining later,
        /// which starts empty and is registered with `add-node`).
        #[arg(long)]
        bootstrap: bool,
        #[command(flatten)]
        tuning: Tuning,
        #[command(flatten)]
        bounds: Bounds,
    },
    /// Start N node processes on loopback ports base+1..=base+N and wait for Ctrl-C.
    Local {
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 7400)]
        base_port: u16,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// One client operation (keys and values as text): `get KEY`, `put KEY VALUE`,
    /// `delete KEY`, `scan START [END]` (across ranges; END empty = to the end),
    /// `prove KEY` (a membership or absence proof, verified against the range's root).
    Client {
        #[command(flatten)]
        peers: Peers,
        /// get | put | delete | scan | prove
        op: String,
        key: String,
        value: Option<String>,
    },
    /// Every range: id, fence keys, epochs (conf_ver/version), leader, voters, learners,
    /// keys and applied index (asked of each replica); then the registered nodes.
    Status {
        #[command(flatten)]
        peers: Peers,
    },
    /// Register a node (already started, without --bootstrap) in the directory; the
    /// rebalancer then moves ranges to it.
    AddNode {
        #[command(flatten)]
        peers: Peers,
        /// The new node's id.
        #[arg(long)]
        id: NodeId,
        /// The new node's host:port.
        #[arg(long)]
        addr: SocketAddr,
    },
    /// Mark a node as draining: the rebalancer moves every range replica away from it.
    Drain {
        #[command(flatten)]
        peers: Peers,
        #[arg(long)]
        id: NodeId,
    },
    /// Forget a drained node: refused until no range names it (its drain finished) and
    /// for a node holding a replica of the directory. Removed, it receives nothing.
    RemoveNode {
        #[command(flatten)]
        peers: Peers,
        #[arg(long)]
        id: NodeId,
    },
    /// A local cluster loaded with keys, splitting, a node killed and restarted, every
    /// key read back and checked; prints what happened.
    Demo {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[arg(long, default_value_t = 7500)]
        base_port: u16,
        /// Keys to write.
        #[arg(long, default_value_t = 3000)]
        keys: u32,
        /// Run the nodes without fsync (to measure what the fsyncs cost).
        #[arg(long)]
        no_fsync: bool,
    },
}

/// The cluster's nodes.
#[derive(clap::Args, Clone)]
pub struct Peers {
    /// Every node as id=host:port, comma-separated (e.g. 1=127.0.0.1:7401,2=127.0.0.1:7402).
    #[arg(long, value_delimiter = ',', required = true)]
    peers: Vec<String>,
}

/// Node settings.
#[derive(clap::Args, Clone)]
pub struct Tuning {
    /// A range splits once it holds more keys than this.
    #[arg(long, default_value_t = NodeOptions::default().split_keys)]
    split_keys: u64,
    /// Chunk capacity of the ranges' trees (4..=bavl's maximum).
    #[arg(long, default_value_t = NodeOptions::default().capacity)]
    capacity: u32,
    /// Do not fsync the Raft logs (measurement only: an acknowledged write can be lost
    /// when the machine, not just the process, goes down).
    #[arg(long)]
    no_fsync: bool,
    /// Replicas per range the rebalancer keeps.
    #[arg(long, default_value_t = NodeOptions::default().replicas)]
    replicas: usize,
    /// Do not run the rebalancer on this node (when it leads the directory).
    #[arg(long)]
    no_rebalance: bool,
    /// A range whose leader serves more client operations per second than this (over a
    /// 10-tick window) splits near the median of its accessed keys (default: never).
    #[arg(long)]
    split_load: Option<u64>,
    /// A load split leaves at least this many chunks on each side: a range that stays hot
    /// stops splitting there instead of going down to one chunk.
    #[arg(long, default_value_t = LoadOptions::default().split_load_floor_chunks)]
    split_load_floor_chunks: u64,
    /// The directory leader counts a node silent for this many ticks (500 ms) as dead and
    /// re-creates its replicas elsewhere.
    #[arg(long, default_value_t = LoadOptions::default().dead_ticks)]
    dead_ticks: u64,
    /// The directory leader merges two neighbouring ranges on the same replicas when both
    /// hold at most this many keys and serve at most `--merge-load` operations per second
    /// over three report rounds in a row (default: never).
    #[arg(long)]
    merge_keys: Option<u64>,
    /// Operations per second under which a range counts as cold for a merge.
    #[arg(long, default_value_t = LoadOptions::default().merge_load)]
    merge_load: u64,
}

/// Bounds on the connections a node serves (docs/cluster.md section 3, "Bounds on a
/// connection"): what a peer that connects and then sends slowly, sends nothing or reads
/// nothing can make the node hold.
#[derive(clap::Args, Clone)]
pub struct Bounds {
    /// A connection with nothing under way and nothing arriving for this many seconds is
    /// closed. More than 15: clients do not reuse a connection idle for 15 s.
    #[arg(long, default_value_t = 60)]
    conn_idle_secs: u64,
    /// A frame (a request, or the replies written at once) may take this many seconds from
    /// its first byte to its last, plus its length at --conn-min-rate-kib.
    #[arg(long, default_value_t = 10)]
    frame_secs: u64,
    /// The slowest rate, in KiB/s, at which a frame may arrive or a reply be taken.
    #[arg(long, default_value_t = 256)]
    conn_min_rate_kib: u64,
    /// Connections served at once; one accepted beyond is closed at once. Each peer node
    /// holds a few, a client machine one (multiplexed) or a few per node.
    #[arg(long, default_value_t = 1024)]
    max_conns: usize,
}

impl Bounds {
    /// The bounds, or why they are unusable.
    pub fn limits(&self) -> anyhow::Result<ConnLimits> {
        let pool = bavl_cluster::limits::POOL_IDLE.as_secs();
        if self.conn_idle_secs <= pool {
            bail!(
                "--conn-idle-secs must be more than {pool} (clients reuse a connection idle \
                 for up to {pool} s; a node closing it sooner fails their calls)"
            );
        }
        if self.frame_secs == 0 || self.conn_min_rate_kib == 0 {
            bail!("--frame-secs and --conn-min-rate-kib must be at least 1");
        }
        if self.max_conns < 8 {
            bail!("--max-conns must be at least 8 (the node's peers hold some each)");
        }
        Ok(ConnLimits {
            idle: Duration::from_secs(self.conn_idle_secs),
            frame_base: Duration::from_secs(self.frame_secs),
            min_rate: self.conn_min_rate_kib.saturating_mul(1024),
            max_conns: self.max_conns,
        })
    }
}

impl Peers {
    pub fn from_list(list: &str) -> Self {
        Peers { peers: list.split(',').map(str::to_string).collect() }
    }

    pub fn parse(&self) -> anyhow::Result<HashMap<NodeId, SocketAddr>> {
        let mut out = HashMap::new();
        for p in &self.peers {
            let (id, addr) =
                p.split_once('=').with_context(|| format!("peer {p:?} is not id=host:port"))?;
            let id: NodeId =
                id.parse().with_context(|| format!("peer id {id:?} is not a number"))?;
            let addr: SocketAddr =
                addr.parse().with_context(|| format!("peer address {addr:?} is not host:port"))?;
            if out.insert(id, addr).is_some() {
                bail!("peer {id} given twice");
            }
        }
        Ok(out)
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Node { id, dir, peers, bootstrap, tuning, bounds } => {
            run_node(id, dir, &peers, bootstrap, &tuning, bounds.limits()?).await
        }
        Cmd::Local { nodes, dir, base_port, tuning } => {
            let mut cluster = demo::start_local(&dir, nodes, base_port, tuning_args(&tuning))?;
            println!("peers: {}", cluster.peers());
            tokio::signal::ctrl_c().await?;
            cluster.stop();
            Ok(())
        }
        Cmd::Client { peers, op, key, value } => {
            client_op(&peers, &op, &key, value.as_deref()).await
        }
        Cmd::Status { peers } => admin::status(&peers).await,
        Cmd::AddNode { peers, id, addr } => admin::add_node(&peers, id, addr).await,
        Cmd::Drain { peers, id } => admin::drain(&peers, id).await,
        Cmd::RemoveNode { peers, id } => admin::remove_node(&peers, id).await,
        Cmd::Demo { dir, nodes, base_port, keys, no_fsync } => {
            demo::run(&dir, nodes, base_port, keys, no_fsync).await
        }
    }
}

pub fn tuning_args(t: &Tuning) -> Vec<String> {
    vec![
        "--split-keys".into(),
        t.split_keys.to_string(),
        "--capacity".into(),
        t.capacity.to_string(),
        "--dead-ticks".into(),
        t.dead_ticks.to_string(),
    ]
    .into_iter()
    .chain(t.split_load.iter().flat_map(|l| ["--split-load".into(), l.to_string()]))
    .chain(["--split-load-floor-chunks".into(), t.split_load_floor_chunks.to_string()])
    .chain(t.merge_keys.iter().flat_map(|k| ["--merge-keys".into(), k.to_string()]))
    .chain(["--merge-load".into(), t.merge_load.to_string()])
    .collect()
}

async fn run_node(
    id: NodeId,
    dir: PathBuf,
    peers: &Peers,
    bootstrap: bool,
    t: &Tuning,
    limits: ConnLimits,
) -> anyhow::Result<()> {
    let peers = peers.parse()?;
    let listen = *peers.get(&id).with_context(|| format!("--id {id} is not among --peers"))?;
    if !(bavl_core::MIN_CAPACITY..=bavl_core::MAX_CAPACITY).contains(&t.capacity) {
        bail!("--capacity must lie in {}..={}", bavl_core::MIN_CAPACITY, bavl_core::MAX_CAPACITY);
    }
    let fresh = !dir.exists() || std::fs::read_dir(&dir)?.next().is_none();
    let transport = TcpTransport::new(peers.clone(), Duration::from_secs(3));
    let load = LoadOptions::default();
    let opts = NodeOptions {
        dir,
        durability: if t.no_fsync { Durability::NoSync } else { Durability::Fsync },
        split_keys: t.split_keys,
        capacity: t.capacity,
        rebalance: !t.no_rebalance,
        replicas: t.replicas,
        seeds: peers.keys().copied().filter(|p| *p != id).collect(),
        load: LoadOptions {
            split_load: t.split_load.unwrap_or(load.split_load),
            split_load_floor_chunks: t.split_load_floor_chunks,
            dead_ticks: t.dead_ticks,
            merge_keys: t.merge_keys.unwrap_or(load.merge_keys),
            merge_load: t.merge_load,
            ..load
        },
        ..NodeOptions::default()
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let node = Node::open(id, opts, transport).await.context("cannot open the node's directory")?;
    if bootstrap && fresh {
        let members: BTreeSet<NodeId> = peers.keys().copied().collect();
        node.bootstrap(&members).await.context("bootstrap failed")?;
    }
    eprintln!("node {id} serving on {listen}");
    serve_with(node, listener, Arc::new(()), limits).await;
    Ok(())
}

pub fn client_for(peers: &HashMap<NodeId, SocketAddr>, id: u64) -> Client {
    let transport = TcpTransport::new(peers.clone(), Duration::from_secs(3));
    let mut nodes: Vec<NodeId> = peers.keys().copied().collect();
    nodes.sort_unstable();
    let opts = ClientOptions {
        max_attempts: 60,
        backoff: Duration::from_millis(50),
        ..ClientOptions::default()
    };
    Client::new(id, nodes, transport, opts)
}

async fn client_op(peers: &Peers, op: &str, key: &str, value: Option<&str>) -> anyhow::Result<()> {
    let mut c = client_for(&peers.parse()?, std::process::id() as u64);
    match (op, value) {
        ("get", None) => match c.get(key.as_bytes()).await? {
            Some(v) => println!("{}", String::from_utf8_lossy(&v)),
            None => println!("(absent)"),
        },
        ("put", Some(v)) => c.put(key.as_bytes(), v.as_bytes()).await?,
        ("delete", None) => c.delete(key.as_bytes()).await?,
        ("scan", end) => {
            for (k, v) in c.scan(key.as_bytes(), end.unwrap_or("").as_bytes(), 10_000).await? {
                println!("{}\t{}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
            }
        }
        ("prove", None) => {
            let p = c.prove(key.as_bytes()).await?;
            let what = match &p.value {
                Some(v) => format!("present, value {}", String::from_utf8_lossy(v)),
                None => "absent".to_string(),
            };
            println!(
                "{what}; proof verified against root {} at index {}",
                hex::encode(p.root),
                p.index
            );
        }
        _ => bail!(
            "expected `get KEY`, `put KEY VALUE`, `delete KEY`, `scan START [END]` or `prove KEY`"
        ),
    }
    eprintln!(
        "retries {} stale {} not-leader {}",
        c.stats.retries, c.stats.stale, c.stats.not_leader
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_bounds(extra: &[&str]) -> anyhow::Result<ConnLimits> {
        let base =
            ["bavl-cluster", "node", "--id", "1", "--dir", "/tmp/x", "--peers", "1=127.0.0.1:1"];
        let cli = Cli::try_parse_from(base.iter().chain(extra))?;
        match cli.cmd {
            Cmd::Node { bounds, .. } => bounds.limits(),
            _ => unreachable!("a node command was parsed"),
        }
    }

    #[test]
    fn a_node_serves_under_the_default_bounds_or_the_ones_given() {
        assert_eq!(node_bounds(&[]).unwrap(), ConnLimits::default());
        let l = node_bounds(&["--conn-idle-secs", "30", "--frame-secs", "2"]).unwrap();
        let l2 = node_bounds(&["--conn-min-rate-kib", "64", "--max-conns", "100"]).unwrap();
        assert_eq!((l.idle, l.frame_base), (Duration::from_secs(30), Duration::from_secs(2)));
        assert_eq!((l2.min_rate, l2.max_conns), (64 << 10, 100));
    }

    #[test]
    fn bounds_that_would_cut_off_honest_peers_are_refused() {
        for bad in [
            &["--conn-idle-secs", "15"][..],
            &["--frame-secs", "0"],
            &["--conn-min-rate-kib", "0"],
            &["--max-conns", "7"],
        ] {
            let e = node_bounds(bad).expect_err(&format!("{bad:?} accepted"));
            assert!(e.to_string().contains(bad[0]), "{bad:?}: {e}");
        }
    }
}
