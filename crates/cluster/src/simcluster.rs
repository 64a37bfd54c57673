//! A simulated cluster to script against (tests of crash points), over [`SimNet`]; meant to
//! run inside a virtual-time runtime ([`crate::sim::runtime`]).

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, ClientOptions};
use crate::consensus::{Consensus, OpenraftGroup};
use crate::node::Node;
use crate::sim::{node_options, SimOptions};
use crate::simcheck::{converge, newest_descs, tiling};
use crate::simnet::SimNet;
use crate::types::{GroupId, NodeId, RangeDesc};

/// Nodes `1..=opts.nodes` on one simulated network.
pub struct SimCluster {
    pub net: Arc<SimNet>,
    pub opts: SimOptions,
}

impl SimCluster {
    /// Opens and bootstraps every node.
    pub async fn start(opts: SimOptions) -> std::io::Result<Self> {
        let net = SimNet::new(opts.seed, opts.faults.clone());
        let members = (1..=opts.nodes).collect();
        for id in 1..=opts.nodes {
            let node = Node::open(id, node_options(&opts, id), net.clone()).await?;
            node.bootstrap(&members).await?;
            net.attach(node);
        }
        Ok(SimCluster { net, opts })
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

    /// A client of the cluster.
    pub fn client(&self, id: u64, opts: ClientOptions) -> Client {
        Client::new(id, (1..=self.opts.nodes).collect(), self.net.clone(), opts)
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
