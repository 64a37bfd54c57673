//! `bavl-clusterlab node`: one cluster node process (a `bavl_cluster::node::Node` over TCP,
//! fsynced Raft logs unless `--no-fsync`), set up the way `bavl-cluster node --bootstrap`
//! does, except that a fresh cluster starts with `--partitions` ranges instead of one,
//! preloaded with `--keys` keys. The bootstrap is the same mechanism as the crate's: every
//! node writes the same initial groups (`seed_group`: a snapshot at log id (0, 0) naming
//! all peers as members) before opening, so every replica of a group starts identical.
//!
//! Placement: every range group and the directory have one replica on every node (three
//! nodes: three replicas per group); leaders go wherever the elections put them.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bavl_cluster::load::LoadOptions;
use bavl_cluster::log_store::Durability;
use bavl_cluster::node::{
    raft_config, Node, NodeOptions, ELECTION_MIN_MS, HEARTBEAT_MS, SNAPSHOT_EVERY,
};
use bavl_cluster::range::RangeState;
use bavl_cluster::sm::seed_group;
use bavl_cluster::tcp::TcpTransport;
use bavl_cluster::types::{Epoch, NodeId, RangeDesc, DIRECTORY_GROUP};

use crate::keys;

/// How a lab node runs (the command line of `bavl-clusterlab node`).
#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    #[arg(long)]
    pub id: NodeId,
    #[arg(long)]
    pub dir: PathBuf,
    /// Every node as id=host:port, comma-separated.
    #[arg(long)]
    pub peers: String,
    /// Ranges a fresh cluster starts with (cut evenly over the preloaded keys).
    #[arg(long, default_value_t = 1)]
    pub partitions: u64,
    /// Keys a fresh cluster starts with (see `keys::preloaded`).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    /// Chunk capacity of the ranges' trees.
    #[arg(long, default_value_t = NodeOptions::default().capacity)]
    pub capacity: u32,
    /// A range splits once it holds more keys than this.
    #[arg(long, default_value_t = 1 << 40)]
    pub split_keys: u64,
    #[arg(long)]
    pub no_fsync: bool,
    /// Raft log entries between two log-compaction snapshots of a group (the whole range
    /// exported, serialised and fsynced); `bavl-cluster node` uses the same default.
    #[arg(long, default_value_t = SNAPSHOT_EVERY)]
    pub snapshot_every: u64,
    /// The directory leader merges two neighbouring ranges once both hold at most this
    /// many keys, however busy they are (0: never; `bavl-cluster node --merge-keys`).
    #[arg(long, default_value_t = 0)]
    pub merge_keys: u64,
    /// Cut the ranges over `--keys` but write none of them (histories need an empty store).
    #[arg(long)]
    pub no_preload: bool,
}

pub fn parse_peers(list: &str) -> Result<HashMap<NodeId, SocketAddr>> {
    let mut out = HashMap::new();
    for p in list.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = p.split_once('=').with_context(|| format!("peer {p:?}"))?;
        out.insert(id.parse()?, addr.parse()?);
    }
    Ok(out)
}

/// The initial descriptors: `partitions` ranges cut at evenly spaced preloaded keys.
pub fn initial_ranges(partitions: u64, keys: u64, members: &BTreeSet<NodeId>) -> Vec<RangeDesc> {
    let cuts: Vec<Vec<u8>> =
        (1..partitions).map(|p| keys::key(keys::preloaded(p * keys.max(1) / partitions))).collect();
    (0..partitions as usize)
        .map(|i| RangeDesc {
            id: i as u64 + 1,
            start: if i == 0 { Vec::new() } else { cuts[i - 1].clone() },
            end: cuts.get(i).cloned().unwrap_or_default(),
            epoch: Epoch::default(),
            replicas: members.clone(),
            learners: BTreeSet::new(),
        })
        .collect()
}

/// Writes the directory and the ranges (with their keys) as new groups under `a.dir`.
fn seed(a: &NodeArgs, members: &BTreeSet<NodeId>) -> Result<()> {
    let ranges = initial_ranges(a.partitions, a.keys, members);
    let whole = RangeDesc::whole(DIRECTORY_GROUP, members.clone());
    let mut dir = RangeState::new(whole, a.capacity).map_err(anyhow::Error::msg)?;
    for d in &ranges {
        dir.put_descriptor(d);
    }
    dir.next_group_id = a.partitions + 1;
    seed_group(&a.dir, &dir.export())?;
    for d in ranges {
        let mut r = RangeState::new(d.clone(), a.capacity).map_err(anyhow::Error::msg)?;
        let preload = if a.no_preload { 0 } else { a.keys };
        for i in 0..preload {
            let k = keys::key(keys::preloaded(i));
            if d.contains(&k) {
                r.tree.insert(&k, &keys::initial_value(i)).map_err(anyhow::Error::msg)?;
            }
        }
        seed_group(&a.dir, &r.export())?;
    }
    Ok(())
}

pub async fn run(a: NodeArgs) -> Result<()> {
    let peers = parse_peers(&a.peers)?;
    let listen = *peers.get(&a.id).context("--id is not among --peers")?;
    if !(bavl_core::MIN_CAPACITY..=bavl_core::MAX_CAPACITY).contains(&a.capacity) {
        bail!("--capacity out of bounds");
    }
    if a.partitions == 0 {
        bail!("--partitions must be at least 1");
    }
    let fresh = !a.dir.exists() || std::fs::read_dir(&a.dir)?.next().is_none();
    if fresh {
        std::fs::create_dir_all(&a.dir)?;
        let members: BTreeSet<NodeId> = peers.keys().copied().collect();
        seed(&a, &members).context("seeding the initial groups")?;
    }
    let transport = TcpTransport::new(peers.clone(), Duration::from_secs(3));
    let opts = NodeOptions {
        dir: a.dir.clone(),
        durability: if a.no_fsync { Durability::NoSync } else { Durability::Fsync },
        // The timing of `bavl-cluster node` (unless --snapshot-every says otherwise).
        raft: raft_config(HEARTBEAT_MS, ELECTION_MIN_MS, a.snapshot_every),
        split_keys: a.split_keys,
        capacity: a.capacity,
        // Every group has a replica on every node: nothing for a rebalancer to move, and
        // the placement stays what the experiment set.
        rebalance: false,
        replicas: peers.len(),
        seeds: peers.keys().copied().filter(|p| *p != a.id).collect(),
        // Merges under load, for the merges experiment: any load counts as cold.
        load: LoadOptions { merge_keys: a.merge_keys, merge_load: u64::MAX, ..Default::default() },
        // The rest (the 500 ms tick) as `bavl-cluster node`.
        ..NodeOptions::default()
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let node = Node::open(a.id, opts, transport).await.context("cannot open the node")?;
    eprintln!("lab node {} serving on {listen} (fresh: {fresh})", a.id);
    crate::wire::serve_counted(node, listener).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_ranges_tile_the_key_space_and_split_the_keys_evenly() {
        let members: BTreeSet<NodeId> = [1, 2, 3].into();
        for p in [1u64, 2, 4, 8] {
            let r = initial_ranges(p, 1000, &members);
            assert_eq!(r.len() as u64, p);
            assert!(r[0].start.is_empty() && r[p as usize - 1].end.is_empty());
            for w in r.windows(2) {
                assert_eq!(w[0].end, w[1].start, "adjacent ranges meet");
            }
            for d in &r {
                let n = (0..1000).filter(|&i| d.contains(&keys::key(keys::preloaded(i)))).count();
                assert_eq!(n as u64, 1000 / p, "range {} holds its share", d.id);
                assert_eq!(d.replicas, members);
            }
        }
    }
}
