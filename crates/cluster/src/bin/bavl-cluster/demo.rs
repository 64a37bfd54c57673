//! A local cluster of node processes on loopback, and the one-command demo.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bavl_cluster::types::NodeId;

/// Node processes `1..=n` listening on `base_port + id`.
pub struct LocalCluster {
    pub peers: String,
    dir: PathBuf,
    args: Vec<String>,
    children: HashMap<NodeId, Child>,
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
        };
        for id in 1..=n {
            c.spawn(id)?;
        }
        Ok(c)
    }

    fn spawn(&mut self, id: NodeId) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let log = std::fs::File::create(self.dir.join(format!("node-{id}.log")))?;
        let child = Command::new(exe)
            .args(["node", "--id", &id.to_string(), "--peers", &self.peers, "--bootstrap", "--dir"])
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
    write(&mut client, &mut model, 0..keys / 2).await;
    println!("wrote {} keys in {:.1?}", keys / 2, t0.elapsed());
    let victim = 1;
    cluster.kill(victim);
    println!("killed node {victim} (SIGKILL); writing on");
    write(&mut client, &mut model, keys / 2..keys).await;
    cluster.restart(victim)?;
    println!("restarted node {victim}; reading every key back");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (checked, wrong) = verify(&mut client, &model).await;
    if let Some(ranges) = client.ranges().await {
        crate::cli::print_ranges(&ranges);
    }
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
    Ok(())
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
