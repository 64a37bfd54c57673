//! The driver's view of a local cluster: three `bavl-clusterlab node` processes on loopback
//! (this executable, re-run, managed by `bavl_cluster::local`), killed with SIGKILL and
//! restarted on demand, their counters queried; and the client process (`bavl-clusterlab
//! load`) run against them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bavl_cluster::client::{Client, ClientOptions};
use bavl_cluster::local::{LocalCluster, LocalOptions};
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

/// A lab cluster: its setup and its node processes (`bavl_cluster::local`, which kills
/// them when this is dropped).
pub struct LabCluster {
    pub cfg: Config,
    pub peers: String,
    pub addrs: BTreeMap<NodeId, SocketAddr>,
    nodes: LocalCluster,
}

impl LabCluster {
    /// Starts the node processes on ports `base_port + id` in a fresh `dir`.
    pub fn start(dir: &Path, base_port: u16, cfg: Config) -> Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        let mut args: Vec<String> = [
            ("--partitions", cfg.partitions),
            ("--keys", cfg.keys),
            ("--capacity", u64::from(cfg.capacity)),
            ("--split-keys", cfg.split_keys),
            ("--snapshot-every", cfg.snapshot_every),
            ("--merge-keys", cfg.merge_keys),
        ]
        .into_iter()
        .flat_map(|(flag, v)| [flag.to_string(), v.to_string()])
        .collect();
        if !cfg.preload {
            args.push("--no-preload".into());
        }
        if cfg.no_fsync {
            args.push("--no-fsync".into());
        }
        let opts = LocalOptions {
            exe: std::env::current_exe().context("cannot find this executable")?,
            dir: dir.to_path_buf(),
            nodes: cfg.nodes,
            base_port,
            // A lab node seeds its groups itself on an empty directory (`node::seed`).
            bootstrap: false,
            args,
        };
        let nodes = LocalCluster::start(opts).context("starting the node processes")?;
        Ok(LabCluster { cfg, peers: nodes.peers(), addrs: nodes.addrs().clone(), nodes })
    }

    /// SIGKILL (no chance to flush anything).
    pub fn kill(&mut self, id: NodeId) {
        self.nodes.kill(id);
    }

    pub fn restart(&mut self, id: NodeId) -> Result<()> {
        Ok(self.nodes.restart(id)?)
    }

    pub fn client(&self, no_cache: bool) -> Client {
        let transport = TcpTransport::new(self.nodes.peer_map(), Duration::from_secs(2));
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
        let mut c = self.client(false);
        let ready = self.nodes.wait_ready(&mut c, self.cfg.partitions, limit).await;
        ready.with_context(|| {
            format!("the cluster in {} was not ready within {limit:?}", self.nodes.dir().display())
        })
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
            .open(self.nodes.dir().join("load.log"))?;
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
