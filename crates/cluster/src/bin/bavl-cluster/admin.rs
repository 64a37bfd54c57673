//! `status`, `add-node`, `drain` and `remove-node`: the operator's view and controls of a
//! cluster.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use bavl_cluster::client::Client;
use bavl_cluster::msg::{ClientOp, ClientReply, ReplicaInfo};
use bavl_cluster::types::{NodeId, NodeInfo, RangeDesc};

use crate::cli::{client_for, Peers};

fn client(peers: &Peers) -> anyhow::Result<Client> {
    Ok(client_for(&peers.parse()?, std::process::id() as u64))
}

pub async fn add_node(peers: &Peers, id: NodeId, addr: SocketAddr) -> anyhow::Result<()> {
    let mut c = client(peers)?;
    let info = NodeInfo { id, addr: addr.to_string(), draining: false };
    match c.directory(ClientOp::AddNode(info)).await {
        Some(ClientReply::Done) => {
            println!("node {id} ({addr}) registered; the rebalancer will move ranges to it");
            Ok(())
        }
        other => bail!("the directory did not register node {id}: {other:?}"),
    }
}

pub async fn drain(peers: &Peers, id: NodeId) -> anyhow::Result<()> {
    let mut c = client(peers)?;
    match c.directory(ClientOp::Drain(id)).await {
        Some(ClientReply::Done) => {
            println!("node {id} is draining; `status` shows its replicas leaving");
            Ok(())
        }
        other => bail!("the directory did not drain node {id}: {other:?}"),
    }
}

pub async fn remove_node(peers: &Peers, id: NodeId) -> anyhow::Result<()> {
    let mut c = client(peers)?;
    match c.directory(ClientOp::RemoveNode(id)).await {
        Some(ClientReply::Done) => {
            println!("node {id} removed from the directory; it may be stopped");
            Ok(())
        }
        Some(ClientReply::Refused(why)) => bail!("node {id} not removed: {why}"),
        other => bail!("the directory did not remove node {id}: {other:?}"),
    }
}

pub async fn status(peers: &Peers) -> anyhow::Result<()> {
    let mut c = client(peers)?;
    let ranges = c.ranges().await.context("no node answered for the directory")?;
    let mut rows = Vec::new();
    for d in &ranges {
        let mut infos = Vec::new();
        for n in d.replicas.iter().chain(&d.learners) {
            if let Some(i) = c.info(*n, d.id).await {
                infos.push(i);
            }
        }
        rows.push((d.clone(), infos));
    }
    print_status(&rows);
    if let Some(ClientReply::Nodes(nodes)) = c.directory(ClientOp::Nodes).await {
        println!("nodes:");
        for n in nodes {
            let hosted = ranges.iter().filter(|d| d.replicas.contains(&n.id)).count();
            let state = if n.draining { "draining" } else { "active" };
            let addr = if n.addr.is_empty() { "-" } else { n.addr.as_str() };
            println!("  {:>4}  {addr:<22} {state:<9} {hosted} range replicas", n.id);
        }
    }
    Ok(())
}

fn show(k: &[u8]) -> String {
    if k.is_empty() {
        "-".to_string()
    } else {
        String::from_utf8_lossy(k).into_owned()
    }
}

/// One line per range: the directory's descriptor, with what its replicas say.
pub fn print_status(rows: &[(RangeDesc, Vec<ReplicaInfo>)]) {
    println!(
        "{:>5}  {:>16}  {:>16}  {:>7}  {:>6}  {:<12} {:<8} {:>7}  applied",
        "group", "start", "end", "epoch", "leader", "voters", "learners", "keys"
    );
    for (d, infos) in rows {
        // The freshest replica's view (highest applied index) is shown.
        let best = infos.iter().max_by_key(|i| i.applied);
        let leader = infos.iter().find_map(|i| i.leader);
        let epoch = best.map_or(d.epoch, |b| b.desc.epoch);
        let list = |s: &std::collections::BTreeSet<NodeId>| {
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        };
        println!(
            "{:>5}  {:>16}  {:>16}  {:>7}  {:>6}  {:<12} {:<8} {:>7}  {}",
            d.id,
            show(&d.start),
            show(&d.end),
            format!("{}/{}", epoch.conf_ver, epoch.version),
            leader.map_or("?".to_string(), |l| l.to_string()),
            list(&d.replicas),
            if d.learners.is_empty() { "-".to_string() } else { list(&d.learners) },
            best.map_or("?".to_string(), |b| b.keys.to_string()),
            best.map_or("?".to_string(), |b| b.applied.to_string()),
        );
    }
}
