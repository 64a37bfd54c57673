//! `status`, `add-node`, `drain` and `remove-node`: the operator's view and controls of a
//! cluster.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use bavl_cluster::client::Client;
use bavl_cluster::msg::{ClientOp, ClientReply, ReplicaInfo};
use bavl_cluster::types::{NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

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

/// The directory group's descriptor as its leader holds it, and what its replicas say,
/// asking `Info` of group 0 from each of `nodes` (the directory holds no descriptor of
/// itself: it moves, see docs/cluster.md section 8).
pub async fn directory_row(
    c: &mut Client,
    nodes: &[NodeId],
) -> Option<(RangeDesc, Vec<ReplicaInfo>)> {
    let mut seen = Vec::new();
    for n in nodes {
        if let Some(i) = c.info(*n, DIRECTORY_GROUP).await {
            seen.push(i);
        }
    }
    let newest = seen.iter().map(|i| &i.desc).max_by_key(|d| d.epoch.conf_ver)?.clone();
    let led = seen.iter().find(|i| i.leader == Some(i.node)).map(|i| i.desc.clone());
    let desc = led.unwrap_or(newest);
    seen.retain(|i| desc.replicas.contains(&i.node) || desc.learners.contains(&i.node));
    Some((desc, seen))
}

pub async fn status(peers: &Peers) -> anyhow::Result<()> {
    let mut c = client(peers)?;
    let ranges = c.ranges().await.context("no node answered for the directory")?;
    let nodes = match c.directory(ClientOp::Nodes).await {
        Some(ClientReply::Nodes(nodes)) => nodes,
        _ => Vec::new(),
    };
    let mut ids: Vec<NodeId> = peers.parse()?.keys().copied().collect();
    ids.extend(nodes.iter().map(|n| n.id));
    ids.sort_unstable();
    ids.dedup();
    let mut rows = Vec::new();
    let directory = directory_row(&mut c, &ids).await;
    rows.extend(directory.clone());
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
    if !nodes.is_empty() {
        println!("nodes:");
    }
    for n in nodes {
        let hosted = ranges.iter().filter(|d| d.replicas.contains(&n.id)).count();
        let state = if n.draining { "draining" } else { "active" };
        let addr = if n.addr.is_empty() { "-" } else { n.addr.as_str() };
        let dir = directory.as_ref().is_some_and(|(d, _)| d.replicas.contains(&n.id));
        let dir = if dir { ", a directory replica" } else { "" };
        println!("  {:>4}  {addr:<22} {state:<9} {hosted} range replicas{dir}", n.id);
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

/// One line per group (group 0: the directory itself, spanning no keys of the ranges): the
/// directory's descriptor, with what its replicas say.
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
