//! The driver's view of a local cluster: three `bavl-clusterlab node` processes on loopback
//! (this executable, re-run), killed with SIGKILL and restarted on demand, their counters
//! queried; and the client process (`bavl-clusterlab load`) run against them.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::tcp::TcpTransport;
use bavl_cluster::types::{NodeId, RangeDesc};

use crate::load::{LoadResult, Spec};
use crate::wire::{query_stats, NodeStats};

/// How a cluster is set up.
#[derive(Clone, Debug)]
pub struct Config {
    pub nodes: u64,
    pub partitions: u64,
    /// Keys the ranges are cut over (and preloaded with, unless `preload` is false).
    pub keys: u64,
    pub preload: bool,
    pub capacity: u32,
    pub split_keys: u64,
    pub no_fsync: bool,
    pub snapshot_every: u64,
    /// The directory leader merges neighbouring ranges holding at most this many keys (0:
    /// never), whatever their load.
    pub merge_keys: u64,
}

pub struct LabCluster {
    pub cfg: Config,
    pub peers: String,
    pub addrs: BTreeMap<NodeId, SocketAddr>,
    dir: PathBuf,
    children: HashMap<NodeId, Child>,
}

impl LabCluster {
    /// Starts the node processes on ports `base_port + id` in a fresh `dir`.
    pub fn start(dir: &Path, base_port: u16, cfg: Config) -> Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
        let addrs: BTreeMap<NodeId, SocketAddr> = (1..=cfg.nodes)
            .map(|i| (i, SocketAddr::from(([127, 0, 0, 1], base_port + i as u16))))
            .collect();
        let peers: Vec<String> = addrs.iter().map(|(i, a)| format!("{i}={a}")).collect();
        let mut c = LabCluster {
            cfg,
            peers: peers.join(","),
            addrs,
            dir: dir.to_path_buf(),
            children: HashMap::new(),
        };
        for id in 1..=c.cfg.nodes {
            c.spawn(id)?;
        }
        Ok(c)
    }

    fn spawn(&mut self, id: NodeId) -> Result<()> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{id}.log")))?;
        let c = &self.cfg;
        let mut cmd = Command::new(exe);
        cmd.args(["node", "--id", &id.to_string(), "--peers", &self.peers])
            .arg("--dir")
            .arg(self.dir.join(format!("node-{id}")))
            .args(["--partitions", &c.partitions.to_string()])
            .args(["--keys", &c.keys.to_string()])
            .args(["--capacity", &c.capacity.to_string()])
            .args(["--split-keys", &c.split_keys.to_string()])
            .args(["--snapshot-every", &c.snapshot_every.to_string()])
            .args(["--merge-keys", &c.merge_keys.to_string()]);
        if !c.preload {
            cmd.arg("--no-preload");
        }
        if c.no_fsync {
            cmd.arg("--no-fsync");
        }
        let child =
            cmd.stdout(Stdio::null()).stderr(log).spawn().context("cannot start a node process")?;
        self.children.insert(id, child);
        Ok(())
    }

    /// SIGKILL (no chance to flush anything).
    pub fn kill(&mut self, id: NodeId) {
        if let Some(mut c) = self.children.remove(&id) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self, id: NodeId) -> Result<()> {
        self.kill(id);
        self.spawn(id)
    }

    pub fn stop(&mut self) {
        let ids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }

    pub fn client(&self, no_cache: bool) -> Client {
        let peers: HashMap<NodeId, SocketAddr> = self.addrs.iter().map(|(k, v)| (*k, *v)).collect();
        let transport = TcpTransport::new(peers, Duration::from_secs(2));
        let opts = ClientOptions {
            no_cache,
            max_attempts: 60,
            backoff: Duration::from_millis(20),
            ..ClientOptions::default()
        };
        Client::new(999_999, self.addrs.keys().copied().collect(), transport, opts)
    }

    /// The directory's descriptors (read at its leader).
    pub async fn ranges(&self) -> Option<Vec<RangeDesc>> {
        self.client(false).ranges().await
    }

    /// Waits until the directory answers and every range's leader serves a read.
    pub async fn wait_ready(&self, limit: Duration) -> Result<Vec<RangeDesc>> {
        let t = Instant::now();
        let mut c = self.client(false);
        while t.elapsed() < limit {
            if let Some(ranges) = c.ranges().await {
                let mut all = ranges.len() as u64 >= self.cfg.partitions;
                for d in &ranges {
                    let probe = if d.start.is_empty() { b"k".to_vec() } else { d.start.clone() };
                    all &= c.get(&probe).await.is_ok();
                }
                if all {
                    return Ok(ranges);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("the cluster in {} was not ready within {limit:?}", self.dir.display())
    }

    pub async fn stats(&self) -> BTreeMap<NodeId, NodeStats> {
        let mut out = BTreeMap::new();
        for (&id, &a) in &self.addrs {
            if let Ok(s) = query_stats(a).await {
                out.insert(id, s);
            }
        }
        out
    }

    /// Starts the client process on `spec` (its result comes from [`finish_load`]).
    pub fn spawn_load(&self, spec: &Spec) -> Result<Child> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("load.log"))?;
        Command::new(exe)
            .args(["load", "--spec", &serde_json::to_string(spec)?])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("cannot start the load process")
    }

    /// Runs the client process on `spec` to its end.
    pub async fn load(&self, spec: &Spec) -> Result<LoadResult> {
        let child = self.spawn_load(spec)?;
        finish_load(child).await
    }
}

/// Waits for a client process and decodes its result.
pub async fn finish_load(child: Child) -> Result<LoadResult> {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
    if !out.status.success() {
        bail!("the load process failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).context("decoding the load process's result")
}

impl Drop for LabCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
