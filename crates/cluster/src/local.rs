//! A local cluster of node processes on loopback: node `id` listens on
//! `127.0.0.1:(base_port + id)` and keeps its files in `dir/node-<id>` and its log in
//! `dir/node-<id>.log`. Used by `bavl-cluster local` and `bavl-cluster demo`, and by the
//! lab's cluster experiments, whose node processes run the same way under another
//! executable.
//!
//! Each node is started as `<exe> node --id <id> --peers <peers> --dir <dir/node-id>
//! [--bootstrap] <args>...`, standard output discarded, standard error appended to its log.
//! [`LocalCluster`] owns the child processes: [`LocalCluster::kill`] sends SIGKILL (nothing
//! is flushed: what survives is what the node made durable) and reaps the process, and
//! dropping the cluster kills every node still running, so no node outlives the caller's
//! cluster value, even on an error or a panic that unwinds.
//!
//! The caller guarantees that the ports are free and that `dir` holds either nothing or
//! the files of an earlier run it means to reopen; the harness neither clears nor checks it.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::types::{NodeId, RangeDesc};

/// How to start the nodes of a [`LocalCluster`].
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// The executable each node runs (`bavl-cluster`, or a lab binary with the same `node`
    /// command line).
    pub exe: PathBuf,
    /// Where the nodes' directories and logs go (created if missing).
    pub dir: PathBuf,
    /// Nodes `1..=nodes` are started.
    pub nodes: u64,
    /// Node `id` listens on `base_port + id`.
    pub base_port: u16,
    /// Give the first `nodes` nodes `--bootstrap` (a node bootstraps only an empty
    /// directory, so a restarted one is not affected); nodes added by
    /// [`LocalCluster::join`] never get it.
    pub bootstrap: bool,
    /// Further arguments for every node, after the ones above.
    pub args: Vec<String>,
}

/// Node processes on loopback; see the module doc. Killed when dropped.
pub struct LocalCluster {
    opts: LocalOptions,
    addrs: BTreeMap<NodeId, SocketAddr>,
    children: HashMap<NodeId, Child>,
}

impl LocalCluster {
    /// Starts nodes `1..=opts.nodes`. Fails if there are none, if a port would lie past
    /// 65535, or if `dir` cannot be created or a process cannot be started (the nodes
    /// already started are then killed).
    pub fn start(opts: LocalOptions) -> io::Result<Self> {
        if opts.nodes == 0 {
            return Err(invalid("a local cluster needs at least one node".into()));
        }
        std::fs::create_dir_all(&opts.dir).map_err(|e| context(e, "cannot create", &opts.dir))?;
        let mut c = LocalCluster { opts, addrs: BTreeMap::new(), children: HashMap::new() };
        for id in 1..=c.opts.nodes {
            let addr = c.addr_of(id)?;
            c.addrs.insert(id, addr);
        }
        for id in 1..=c.opts.nodes {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// Every node as `id=host:port`, comma-separated: the nodes' `--peers`.
    pub fn peers(&self) -> String {
        let list: Vec<String> = self.addrs.iter().map(|(id, a)| format!("{id}={a}")).collect();
        list.join(",")
    }

    /// Every node's address, including nodes killed or stopped.
    pub fn addrs(&self) -> &BTreeMap<NodeId, SocketAddr> {
        &self.addrs
    }

    /// The nodes' addresses as a transport takes them.
    pub fn peer_map(&self) -> HashMap<NodeId, SocketAddr> {
        self.addrs.iter().map(|(id, a)| (*id, *a)).collect()
    }

    /// The directory the nodes' directories and logs are in.
    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }

    /// Starts one more node, `id`, empty and not bootstrapped, on `base_port + id`; it
    /// still has to be registered in the directory (`AddNode`). The nodes started before
    /// keep the `--peers` they were given (they learn of it from the directory). Returns
    /// its address.
    pub fn join(&mut self, id: NodeId) -> io::Result<SocketAddr> {
        if self.addrs.contains_key(&id) {
            return Err(invalid(format!("node {id} is already part of the cluster")));
        }
        let addr = self.addr_of(id)?;
        self.addrs.insert(id, addr);
        self.spawn(id)?;
        Ok(addr)
    }

    fn addr_of(&self, id: NodeId) -> io::Result<SocketAddr> {
        u16::try_from(u64::from(self.opts.base_port) + id)
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| invalid(format!("node {id}'s port base+{id} lies past 65535")))
    }

    fn spawn(&mut self, id: NodeId) -> io::Result<()> {
        let dir = &self.opts.dir;
        let log_path = dir.join(format!("node-{id}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| context(e, "cannot open", &log_path))?;
        let mut cmd = Command::new(&self.opts.exe);
        cmd.args(["node", "--id", &id.to_string(), "--peers", &self.peers()]);
        cmd.arg("--dir").arg(dir.join(format!("node-{id}")));
        if self.opts.bootstrap && id <= self.opts.nodes {
            cmd.arg("--bootstrap");
        }
        let child = cmd
            .args(&self.opts.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| context(e, "cannot start a node process from", &self.opts.exe))?;
        self.children.insert(id, child);
        Ok(())
    }

    /// Node `id`'s process id, while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.children.get(&id).map(Child::id)
    }

    /// Kills node `id` with SIGKILL (no chance to flush anything) and waits for it to end.
    /// Does nothing for a node not running.
    pub fn kill(&mut self, id: NodeId) {
        if let Some(mut c) = self.children.remove(&id) {
            // An error means the process has ended already; either way it is reaped below.
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills node `id` if it runs and starts it again on its files.
    pub fn restart(&mut self, id: NodeId) -> io::Result<()> {
        if !self.addrs.contains_key(&id) {
            return Err(invalid(format!("node {id} is not part of the cluster")));
        }
        self.kill(id);
        self.spawn(id)
    }

    /// Kills every node still running.
    pub fn stop(&mut self) {
        let ids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }

    /// Waits up to `limit` until `client` finds at least `ranges` ranges in the directory
    /// and every range's leader serves a read (of the range's start key); returns the
    /// ranges, or `None` if the cluster was not ready in time.
    pub async fn wait_ready(
        &self,
        client: &mut Client,
        ranges: u64,
        limit: Duration,
    ) -> Option<Vec<RangeDesc>> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(found) = client.ranges().await {
                let mut all = found.len() as u64 >= ranges;
                for d in &found {
                    let probe = if d.start.is_empty() { b"k".to_vec() } else { d.start.clone() };
                    all &= client.get(&probe).await.is_ok();
                }
                if all {
                    return Some(found);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// `e` with what was being done to `path`, keeping its kind.
fn context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in node: appends its arguments as a line to `args` beside it, then sleeps
    /// until killed.
    fn fake_node(dir: &Path) -> PathBuf {
        let exe = dir.join("fake-node");
        std::fs::write(
            &exe,
            "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/args\"\nexec sleep 600\n",
        )
        .unwrap();
        let mut perm = std::fs::metadata(&exe).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&exe, perm).unwrap();
        exe
    }

    /// The argument lines the fake nodes wrote, once there are `n` (sorted).
    fn lines(dir: &Path, n: usize) -> Vec<String> {
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(dir.join("args")).unwrap_or_default();
            let mut v: Vec<String> = text.lines().map(str::to_string).collect();
            if v.len() >= n || t.elapsed() > Duration::from_secs(20) {
                v.sort();
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn nodes_start_with_their_command_line_and_die_with_the_cluster() {
        let tmp = tempfile::tempdir().unwrap();
        let exe = fake_node(tmp.path());
        let dir = tmp.path().join("c");
        let args = vec!["--x".to_string(), "y".to_string()];
        let opts = LocalOptions {
            exe,
            dir: dir.clone(),
            nodes: 2,
            base_port: 40100,
            bootstrap: true,
            args,
        };
        let mut c = LocalCluster::start(opts).unwrap();
        let peers = "1=127.0.0.1:40101,2=127.0.0.1:40102";
        assert_eq!(c.peers(), peers);
        let d = dir.display();
        let first = lines(tmp.path(), 2);
        assert_eq!(
            first,
            [1, 2].map(|i| format!(
                "node --id {i} --peers {peers} --dir {d}/node-{i} --bootstrap --x y"
            ))
        );
        assert!(dir.join("node-1.log").exists() && dir.join("node-2.log").exists());

        // A joining node is not bootstrapped and knows itself; the others are unchanged.
        assert_eq!(c.join(3).unwrap(), SocketAddr::from(([127, 0, 0, 1], 40103)));
        assert!(c.join(3).is_err(), "a node joins once");
        let all = lines(tmp.path(), 3);
        let p3 = format!("{peers},3=127.0.0.1:40103");
        assert_eq!(all[2], format!("node --id 3 --peers {p3} --dir {d}/node-3 --x y"));

        // kill: the process is gone (reaped) at once; restart starts another one.
        let p1 = c.pid(1).unwrap();
        c.kill(1);
        assert!(c.pid(1).is_none() && !alive(p1), "node 1 killed and reaped");
        c.restart(1).unwrap();
        let p1b = c.pid(1).unwrap();
        assert!(alive(p1b) && p1b != p1);
        assert!(c.restart(9).is_err(), "no node 9");

        // Dropping the cluster kills every node.
        let pids: Vec<u32> = [1, 2, 3].map(|i| c.pid(i).unwrap()).to_vec();
        drop(c);
        assert!(pids.iter().all(|p| !alive(*p)), "all nodes gone after the drop");
    }

    #[test]
    fn unusable_options_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let opts = |nodes, base_port| LocalOptions {
            exe: PathBuf::from("/bin/true"),
            dir: tmp.path().join("c"),
            nodes,
            base_port,
            bootstrap: true,
            args: Vec::new(),
        };
        let e = LocalCluster::start(opts(0, 40200)).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = LocalCluster::start(opts(3, 65534)).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let missing = LocalOptions { exe: tmp.path().join("none"), ..opts(1, 40200) };
        let e = LocalCluster::start(missing).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
