//! The one-command demo on a local cluster of node processes (`bavl_cluster::local`).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bavl_cluster::client::Client;
use bavl_cluster::local::{LocalCluster, LocalOptions};
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::types::{NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

/// Node processes `1..=nodes` of this executable on ports `base_port + id` under `dir`,
/// bootstrapped together, each given `args` (`bavl-cluster local` and the demo).
pub fn start_local(
    dir: &Path,
    nodes: u64,
    base_port: u16,
    args: Vec<String>,
) -> anyhow::Result<LocalCluster> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let opts =
        LocalOptions { exe, dir: dir.to_path_buf(), nodes, base_port, bootstrap: true, args };
    LocalCluster::start(opts).context("cannot start the local cluster")
}

/// What a key should hold: the value, and whether the write was acknowledged (an
/// unacknowledged one may or may not have happened).
type Model = HashMap<Vec<u8>, (Vec<u8>, bool)>;

/// How long the demo waits for a fresh cluster to serve.
const READY: Duration = Duration::from_secs(60);

pub async fn run(
    dir: &Path,
    nodes: u64,
    base_port: u16,
    keys: u32,
    no_fsync: bool,
) -> anyhow::Result<()> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!("{} is not empty: give the demo a fresh directory", dir.display());
    }
    let split_keys = u64::from(keys / 6).max(50);
    let tuning =
        vec!["--split-keys".into(), split_keys.to_string(), "--capacity".into(), "16".into()];
    let mut tuning = tuning;
    if no_fsync {
        tuning.push("--no-fsync".into());
    }
    let mut cluster = start_local(dir, nodes, base_port, tuning)?;
    println!("started {nodes} node processes: {} (logs in {})", cluster.peers(), dir.display());
    let peers = cluster.peer_map();
    // A client of its own waits for the cluster, so the demo's client counts only the demo.
    let ready = cluster.wait_ready(&mut crate::cli::client_for(&peers, 2), 1, READY).await;
    ready.with_context(|| format!("the cluster did not serve within {READY:?}"))?;
    let mut client = crate::cli::client_for(&peers, 1);
    let mut model = Model::new();
    let t0 = Instant::now();
    let (half, three_quarters) = (keys / 2, keys / 4 * 3);
    write(&mut client, &mut model, 0..half).await;
    println!("wrote {half} keys in {:.1?}", t0.elapsed());
    let victim = 1;
    cluster.kill(victim);
    println!("killed node {victim} (SIGKILL); writing on");
    write(&mut client, &mut model, half..three_quarters).await;
    cluster.restart(victim)?;
    println!("restarted node {victim}");
    let new = nodes + 1;
    let addr = cluster.join(new).context("cannot start the new node")?.to_string();
    client.learn(new, &addr);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let info = NodeInfo { id: new, addr: addr.clone(), draining: false };
    match client.directory(ClientOp::AddNode(info)).await {
        Some(ClientReply::Done) => {
            println!("started node {new} ({addr}) and registered it; writing on while ranges move")
        }
        other => bail!("node {new} was not registered: {other:?}"),
    }
    write(&mut client, &mut model, three_quarters..keys).await;
    let moved = wait_balanced(&mut client, new).await;
    println!("node {new} holds {moved} range replicas; reading every key back");
    let (mut checked, mut wrong) = verify(&mut client, &model).await;
    if nodes >= 3 {
        // A bootstrap node leaves for good: drained (its directory replica moves with its
        // range replicas), removed from the directory's list, stopped; every key read again.
        let gone = 2;
        let ids: Vec<NodeId> = (1..=new).collect();
        match client.directory(ClientOp::Drain(gone)).await {
            Some(ClientReply::Done) => println!("draining node {gone} (a directory replica)"),
            other => bail!("node {gone} was not drained: {other:?}"),
        }
        if !wait_drained(&mut client, &ids, gone).await {
            bail!("node {gone} still holds replicas after 2 minutes");
        }
        match client.directory(ClientOp::RemoveNode(gone)).await {
            Some(ClientReply::Done) => println!("removed node {gone}"),
            other => bail!("node {gone} was not removed: {other:?}"),
        }
        forwarding(&mut client, gone, &ids).await?;
        cluster.kill(gone);
        println!("stopped node {gone}");
        let (c, w) = verify(&mut client, &model).await;
        println!("read every key back without node {gone}: {c} checked, {w} wrong");
        (checked, wrong) = (checked + c, wrong + w);
    }
    crate::admin::status(&crate::cli::Peers::from_list(&cluster.peers())).await?;
    let s = &client.stats;
    let unknown = model.values().filter(|(_, sure)| !sure).count();
    println!(
        "ops {} in {:.1?}; retries {} (stale {}, not-leader {}), directory lookups {}; writes of unknown outcome {unknown}",
        s.ops,
        t0.elapsed(),
        s.retries,
        s.stale,
        s.not_leader,
        s.directory_lookups
    );
    println!("reads checked {checked}, wrong {wrong}");
    cluster.stop();
    if wrong > 0 {
        bail!("{wrong} reads did not match what was written");
    }
    if moved == 0 {
        bail!("no range moved to node {new}");
    }
    Ok(())
}

/// Waits (up to 2 minutes) until the directory shows the range replicas spread evenly with
/// node `new` among the holders; returns how many node `new` holds.
async fn wait_balanced(client: &mut Client, new: NodeId) -> usize {
    let start = Instant::now();
    let mut last = usize::MAX;
    loop {
        let ranges = client.ranges().await.unwrap_or_default();
        let mut load: HashMap<NodeId, usize> = (1..=new).map(|n| (n, 0)).collect();
        for d in &ranges {
            for n in &d.replicas {
                *load.entry(*n).or_default() += 1;
            }
        }
        let here = load[&new];
        if here != last {
            println!("  {:>5.1?}: replicas per node {:?}", start.elapsed(), sorted(&load));
            last = here;
        }
        let (max, min) = (load.values().max(), load.values().min());
        if max.zip(min).is_some_and(|(a, b)| *a <= *b + 1)
            || start.elapsed() > Duration::from_secs(120)
        {
            return here;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Directory lookups sent to node `gone` (removed, still running: it holds no directory
/// replica and passes each on) and to the directory's leader, alternated; prints the
/// median and 90th percentile of each and fails if a forwarded one is not answered.
async fn forwarding(client: &mut Client, gone: NodeId, ids: &[NodeId]) -> anyhow::Result<()> {
    let leader = crate::admin::directory_row(client, ids)
        .await
        .and_then(|(_, infos)| infos.iter().find_map(|i| i.leader))
        .context("no directory leader")?;
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    for i in 0..200u32 {
        let key = format!("key{:07}", i * 7).into_bytes();
        for (node, times) in [(gone, &mut via), (leader, &mut direct)] {
            let t = Instant::now();
            let reply = client.ask(node, DIRECTORY_GROUP, ClientOp::Lookup(key.clone())).await;
            if !matches!(reply, Some(ClientReply::Desc(Some(_)))) {
                bail!("a lookup sent to node {node} was answered {reply:?}");
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p) as usize]
    };
    println!(
        "  200 directory lookups through node {gone} (passed on): p50 {:.3} ms, p90 {:.3} ms; \
         at the directory leader (node {leader}): p50 {:.3} ms, p90 {:.3} ms",
        pct(&mut via, 0.5),
        pct(&mut via, 0.9),
        pct(&mut direct, 0.5),
        pct(&mut direct, 0.9)
    );
    Ok(())
}

/// Waits (up to 2 minutes) until neither a range nor the directory names node `id`.
async fn wait_drained(client: &mut Client, ids: &[NodeId], id: NodeId) -> bool {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(120) {
        let named = |d: &RangeDesc| d.replicas.contains(&id) || d.learners.contains(&id);
        let ranges = client.ranges().await.unwrap_or_default();
        let on = ranges.iter().filter(|d| named(d)).count();
        let dir = crate::admin::directory_row(client, ids).await.map(|(d, _)| d);
        let dir_on = dir.as_ref().is_none_or(named);
        if last != Some((on, dir_on)) {
            let voters = dir.map(|d| d.replicas);
            println!(
                "  {:>5.1?}: node {id} holds {on} range replicas; directory voters {voters:?}",
                start.elapsed()
            );
            last = Some((on, dir_on));
        }
        if on == 0 && !dir_on {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

fn sorted(load: &HashMap<NodeId, usize>) -> Vec<(NodeId, usize)> {
    let mut v: Vec<_> = load.iter().map(|(a, b)| (*a, *b)).collect();
    v.sort_unstable();
    v
}

async fn write(
    client: &mut bavl_cluster::client::Client,
    model: &mut Model,
    keys: std::ops::Range<u32>,
) {
    for i in keys {
        let key = format!("key{i:07}").into_bytes();
        let value = format!("value-{i}").into_bytes();
        match client.put(&key, &value).await {
            Ok(()) => {
                model.insert(key, (value, true));
            }
            Err(bavl_cluster::client::ClientError::Unknown(_)) => {
                model.insert(key, (value, false));
            }
            Err(e) => eprintln!("put {i} failed: {e}"),
        }
    }
}

async fn verify(client: &mut bavl_cluster::client::Client, model: &Model) -> (u64, u64) {
    let (mut checked, mut wrong) = (0, 0);
    for (key, (value, sure)) in model {
        checked += 1;
        let ok = match client.get(key).await {
            Ok(Some(v)) => &v == value,
            Ok(None) => !sure,
            Err(e) => {
                eprintln!("get {} failed: {e}", String::from_utf8_lossy(key));
                false
            }
        };
        wrong += u64::from(!ok);
    }
    (checked, wrong)
}
