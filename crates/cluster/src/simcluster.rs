//! A simulated cluster to script against (tests of crash points), over [`SimNet`]; meant to
//! run inside a virtual-time runtime ([`crate::sim::runtime`]).

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, ClientOptions};
use crate::consensus::{Consensus, OpenraftGroup};
use crate::msg::{ClientOp, ClientReply};
use crate::node::Node;
use crate::sim::{node_options, SimOptions};
use crate::simcheck::{converge, newest_descs, tiling};
use crate::simnet::SimNet;
use crate::types::{GroupId, NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

/// Nodes `1..=opts.nodes` on one simulated network.
pub struct SimCluster {
    pub net: Arc<SimNet>,
    pub opts: SimOptions,
}

impl SimCluster {
    /// Opens every node and bootstraps nodes `1..=opts.replicas`; the others start empty
    /// and are registered in the directory.
    pub async fn start(opts: SimOptions) -> std::io::Result<Self> {
        let net = SimNet::new(opts.seed, opts.faults.clone());
        let members = (1..=opts.replicas.min(opts.nodes)).collect();
        for id in 1..=opts.nodes {
            let node = Node::open(id, node_options(&opts, id), net.clone()).await?;
            if id <= opts.replicas {
                node.bootstrap(&members).await?;
            }
            net.attach(node);
        }
        let cluster = SimCluster { net, opts };
        for id in cluster.opts.replicas + 1..=cluster.opts.nodes {
            cluster.add_node(id).await?;
        }
        Ok(cluster)
    }

    /// Registers node `id` in the directory (through node 1).
    pub async fn add_node(&self, id: NodeId) -> std::io::Result<()> {
        let info = NodeInfo { id, addr: String::new(), draining: false };
        self.directory_op(ClientOp::AddNode(info), "register", id).await
    }

    /// Marks node `id` as draining (through node 1).
    pub async fn drain(&self, id: NodeId) -> std::io::Result<()> {
        self.directory_op(ClientOp::Drain(id), "drain", id).await
    }

    /// Removes node `id` from the directory's list (through node 1).
    pub async fn remove_node(&self, id: NodeId) -> std::io::Result<()> {
        self.directory_op(ClientOp::RemoveNode(id), "remove", id).await
    }

    async fn directory_op(&self, op: ClientOp, what: &str, id: NodeId) -> std::io::Result<()> {
        let node = self.net.node(1).ok_or_else(|| std::io::Error::other("node 1 is down"))?;
        match node.directory_call(op).await {
            Some(ClientReply::Done) => Ok(()),
            other => Err(std::io::Error::other(format!("cannot {what} node {id}: {other:?}"))),
        }
    }

    /// The directory's descriptor as its leader holds it (waiting up to 10 s for one).
    pub async fn directory(&self) -> Option<RangeDesc> {
        let (_, group) = self.leader(DIRECTORY_GROUP, Duration::from_secs(10)).await?;
        Some(group.sm.desc())
    }

    /// The number of range replicas (not the directory's) each live node hosts.
    pub fn replica_counts(&self) -> Vec<(NodeId, usize)> {
        let ranges = |n: &Node| n.groups().iter().filter(|g| g.sm.desc().id != 0).count();
        self.net.live().iter().map(|n| (n.id, ranges(n))).collect()
    }

    /// Takes node `id` off the network and stops it.
    pub async fn crash(&self, id: NodeId) {
        if let Some(node) = self.net.detach(id) {
            node.shutdown().await;
        }
    }

    /// Reopens node `id` from its files.
    pub async fn restart(&self, id: NodeId) -> std::io::Result<()> {
        let node = Node::open(id, node_options(&self.opts, id), self.net.clone()).await?;
        self.net.attach(node);
        Ok(())
    }

    /// A client of the cluster (asking the bootstrapped nodes for the directory).
    pub fn client(&self, id: u64, opts: ClientOptions) -> Client {
        Client::new(id, (1..=self.opts.replicas).collect(), self.net.clone(), opts)
    }

    /// The live leader of group `g` and its replica, waiting up to `limit` for one.
    pub async fn leader(&self, g: GroupId, limit: Duration) -> Option<(Arc<Node>, OpenraftGroup)> {
        let start = tokio::time::Instant::now();
        while start.elapsed() < limit {
            for node in self.net.live() {
                if let Some(group) = node.group(g).filter(|gr| gr.leader() == Some(node.id)) {
                    return Some((node, group));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Waits until every replica of every range agrees (see `simcheck`).
    pub async fn converge(&self, limit: Duration) -> Result<(), String> {
        converge(&self.net, limit).await
    }

    /// The newest descriptors, ordered by start key, and where they fail to tile.
    pub fn ranges(&self) -> (Vec<RangeDesc>, Vec<String>) {
        let mut descs: Vec<RangeDesc> = newest_descs(&self.net).into_values().collect();
        descs.sort_by(|a, b| a.start.cmp(&b.start));
        let (overlaps, gaps) = tiling(&descs);
        (descs, overlaps.into_iter().chain(gaps).collect())
    }

    /// Stops every live node.
    pub async fn shutdown(&self) {
        for n in self.net.live() {
            n.shutdown().await;
        }
    }
}
