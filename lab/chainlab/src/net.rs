//! A CometBFT network on loopback for the experiments: `cometbft testnet` generates 4
//! validators and some joiner nodes; each node and its `bavl-abci` application run as
//! separate processes on their own ports. Every process is killed when the [`Net`] is
//! dropped (on every way out of an experiment, a panic included); an interrupt from the
//! terminal reaches them directly, as they share the lab's process group.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The validators of every network.
pub const VALIDATORS: usize = 4;

/// The binaries a network runs.
#[derive(Debug, Clone)]
pub struct Bins {
    pub cometbft: PathBuf,
    pub app: PathBuf,
}

/// A generated network and its running processes.
pub struct Net {
    pub dir: PathBuf,
    bins: Bins,
    base: u16,
    ids: Vec<String>,
    procs: BTreeMap<String, Child>,
}

/// Sets `key` in `[section]` of a CometBFT TOML file ("" = the top table).
pub fn set_toml(path: &Path, section: &str, key: &str, value: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (mut cur, mut found, mut out) = (String::new(), false, String::new());
    for line in text.lines() {
        if line.starts_with('[') {
            cur = line.trim_matches(|c| c == '[' || c == ']').to_string();
        }
        let is_key = line.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('='));
        if cur == section && is_key {
            out.push_str(&format!("{key} = {value}\n"));
            found = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !found {
        bail!("no {key} in [{section}] of {}", path.display());
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

impl Net {
    /// Generates a network of [`VALIDATORS`] validators and `joiners` more nodes in
    /// `dir` (emptied first), ports from `base`; every node's genesis gets `app_state`.
    pub fn generate(
        dir: &Path,
        bins: &Bins,
        base: u16,
        joiners: usize,
        app_state: &serde_json::Value,
    ) -> Result<Net> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("logs"))?;
        let out = Command::new(&bins.cometbft)
            .args(["testnet", "--v", &VALIDATORS.to_string(), "--n", &joiners.to_string()])
            .arg("--o")
            .arg(dir)
            .args(["--starting-ip-address", "127.0.0.1"])
            .output()
            .context("running cometbft testnet")?;
        if !out.status.success() {
            bail!("cometbft testnet: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut net = Net {
            dir: dir.to_path_buf(),
            bins: bins.clone(),
            base,
            ids: vec![],
            procs: BTreeMap::new(),
        };
        for i in 0..VALIDATORS + joiners {
            let out = Command::new(&bins.cometbft)
                .args(["show-node-id", "--home"])
                .arg(net.node_home(i))
                .output()?;
            net.ids.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        let peers: Vec<String> = (0..VALIDATORS)
            .map(|i| format!("{}@127.0.0.1:{}", net.ids[i], net.port(i, 6)))
            .collect();
        let genesis = net.genesis_with(app_state)?;
        for i in 0..VALIDATORS + joiners {
            std::fs::write(net.node_home(i).join("config/genesis.json"), &genesis)?;
            net.configure(i, &peers.join(","))?;
        }
        Ok(net)
    }

    fn genesis_with(&self, app_state: &serde_json::Value) -> Result<String> {
        let path = self.node_home(0).join("config/genesis.json");
        let mut g: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        g["app_state"] = app_state.clone();
        Ok(serde_json::to_string_pretty(&g)?)
    }

    fn configure(&self, i: usize, peers: &str) -> Result<()> {
        let cfg = self.node_home(i).join("config/config.toml");
        let q = |s: String| format!("\"{s}\"");
        set_toml(&cfg, "", "proxy_app", &q(format!("tcp://127.0.0.1:{}", self.port(i, 8))))?;
        set_toml(&cfg, "rpc", "laddr", &q(format!("tcp://127.0.0.1:{}", self.port(i, 7))))?;
        set_toml(&cfg, "p2p", "laddr", &q(format!("tcp://127.0.0.1:{}", self.port(i, 6))))?;
        set_toml(&cfg, "p2p", "persistent_peers", &q(peers.to_string()))?;
        set_toml(&cfg, "p2p", "addr_book_strict", "false")?;
        set_toml(&cfg, "p2p", "allow_duplicate_ip", "true")?;
        set_toml(&cfg, "consensus", "timeout_commit", "\"300ms\"")?;
        set_toml(&cfg, "consensus", "timeout_propose", "\"1s\"")
    }

    pub fn node_home(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{i}"))
    }

    pub fn app_home(&self, i: usize) -> PathBuf {
        self.dir.join(format!("app{i}"))
    }

    pub fn port(&self, i: usize, k: u16) -> u16 {
        self.base + 10 * i as u16 + k
    }

    pub fn rpc(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.port(i, 7))
    }

    fn spawn(&mut self, name: String, cmd: &mut Command) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs").join(format!("{name}.log")))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.procs.insert(name, child);
        Ok(())
    }

    /// Starts application `i` with `args` beyond its home and address, and waits until
    /// it listens.
    pub fn start_app(&mut self, i: usize, args: &[String]) -> Result<()> {
        let mut cmd = Command::new(&self.bins.app);
        cmd.arg("serve").arg("--home").arg(self.app_home(i));
        cmd.args(["--listen", &format!("127.0.0.1:{}", self.port(i, 8))]).args(args);
        self.spawn(format!("app{i}"), &mut cmd)?;
        let addr = format!("127.0.0.1:{}", self.port(i, 8));
        let start = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            if !self.alive(&format!("app{i}")) {
                bail!("app{i} exited (see {}/logs/app{i}.log)", self.dir.display());
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("app{i} does not listen on {addr}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    pub fn start_node(&mut self, i: usize) -> Result<()> {
        let mut cmd = Command::new(&self.bins.cometbft);
        cmd.arg("start").arg("--home").arg(self.node_home(i));
        self.spawn(format!("node{i}"), &mut cmd)
    }

    /// Starts a background command (the load generator) under `name`.
    pub fn start_other(&mut self, name: &str, cmd: &mut Command) -> Result<()> {
        self.spawn(name.to_string(), cmd)
    }

    pub fn alive(&mut self, name: &str) -> bool {
        self.procs.get_mut(name).is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The peak resident set (`VmHWM`) of a running process of ours, in bytes.
    pub fn peak_rss(&self, name: &str) -> u64 {
        let Some(c) = self.procs.get(name) else { return 0 };
        bavl_abci::report::peak_rss_bytes_of(&c.id().to_string())
    }

    /// SIGKILL and reap one process.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut c) = self.procs.remove(name) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn height(&self, i: usize) -> Result<u64> {
        Ok(bavl_abci::rpc::latest_height(&self.rpc(i))?)
    }

    /// Waits until node `i` is at height `h` or more.
    pub fn wait_height(&mut self, i: usize, h: u64, limit: Duration) -> Result<u64> {
        let start = Instant::now();
        loop {
            match self.height(i) {
                Ok(now) if now >= h => return Ok(now),
                _ if start.elapsed() > limit => {
                    bail!("node{i} did not reach height {h} in {limit:?}")
                }
                _ => std::thread::sleep(Duration::from_millis(300)),
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for c in self.procs.values_mut() {
            let _ = c.kill();
        }
        for c in self.procs.values_mut() {
            let _ = c.wait();
        }
    }
}
