//! A local cluster of node processes on loopback, and the one-command demo.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bavl_cluster::client::Client;
use bavl_cluster::msg::{ClientOp, ClientReply};
use bavl_cluster::types::{NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};

/// Node processes `1..=n` listening on `base_port + id`.
pub struct LocalCluster {
    pub peers: String,
    dir: PathBuf,
    args: Vec<String>,
    children: HashMap<NodeId, Child>,
    /// Nodes `1..=first` bootstrap the cluster.
    first: u64,
}

impl LocalCluster {
    pub fn start(dir: &Path, n: u64, base_port: u16, tuning: &[String]) -> anyhow::Result<Self> {
        if n == 0 || u64::from(base_port) + n > 65535 {
            bail!("--nodes must be at least 1 and the ports base+1..=base+nodes must exist");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let peers: Vec<String> =
            (1..=n).map(|i| format!("{i}=127.0.0.1:{}", u64::from(base_port) + i)).collect();
        let mut c = LocalCluster {
            peers: peers.join(","),
            dir: dir.to_path_buf(),
            args: tuning.to_vec(),
            children: HashMap::new(),
            first: n,
        };
        for id in 1..=n {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// Starts one more node (empty, not bootstrapped) on `base_port + id`; it still has to
    /// be registered (`add-node`). Returns its address.
    pub fn join(&mut self, id: NodeId, base_port: u16) -> anyhow::Result<String> {
        let addr = format!("127.0.0.1:{}", u64::from(base_port) + id);
        self.peers = format!("{},{id}={addr}", self.peers);
        self.spawn(id)?;
        Ok(addr)
    }

    fn spawn(&mut self, id: NodeId) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{id}.log")))?;
        let mut cmd = Command::new(exe);
        cmd.args(["node", "--id", &id.to_string(), "--peers", &self.peers]);
        // The first nodes bootstrap (which acts only on an empty directory); a node that
        // joins later starts empty.
        if id <= self.first {
            cmd.arg("--bootstrap");
        }
        let child = cmd
            .arg("--dir")
            .arg(self.dir.join(format!("node-{id}")))
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start a node process")?;
        self.children.insert(id, child);
        Ok(())
    }

    /// Kills node `id` with SIGKILL (no chance to flush anything).
    pub fn kill(&mut self, id: NodeId) {
        if let Some(mut c) = self.children.remove(&id) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self, id: NodeId) -> anyhow::Result<()> {
        self.kill(id);
        self.spawn(id)
    }

    pub fn stop(&mut self) {
        let ids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a key should hold: the value, and whether the write was acknowledged (an
/// unacknowledged one may or may not have happened).
type Model = HashMap<Vec<u8>, (Vec<u8>, bool)>;

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
    let mut cluster = LocalCluster::start(dir, nodes, base_port, &tuning)?;
    println!("started {nodes} node processes: {} (logs in {})", cluster.peers, dir.display());
    let peers = crate::cli::Peers::parse(&crate::cli::Peers::from_list(&cluster.peers))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
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
    let addr = cluster.join(new, base_port)?;
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
    crate::admin::status(&crate::cli::Peers::from_list(&cluster.peers)).await?;
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
