//! The node's side of the measurement: the cluster's TCP frames (the same format as
//! `bavl_cluster::tcp`: `len: u32 LE | body`, the body a binary-encoded `Request`), served
//! by a loop that counts every request and reply by class and size, and answers one extra
//! query (the JSON `{"lab":"stats"}`, which no request's encoding begins with) with the
//! counters and the process's CPU time.
//!
//! Counting on the serving side sees every message exactly once (each request is received
//! by one node; its reply leaves that node), at no cost beyond a match on the decoded
//! request. Stats queries are not counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bavl_cluster::limits::ConnLimits;
use bavl_cluster::msg::{ClientOp, Message, RaftRpc};
use bavl_cluster::node::Node;
use bavl_cluster::tcp::{read_frame, serve_with, write_frame, ServeHook};
use bavl_cluster::types::DIRECTORY_GROUP;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};

/// How a stats query begins. A request's encoding never does: it would be one from node
/// 123 whose message is variant 34, and `Message` has far fewer.
const LAB_QUERY_PREFIX: &[u8] = b"{\"lab\"";

#[derive(Deserialize)]
struct LabQuery {
    lab: String,
}

/// Requests, request bytes and reply bytes of one class of message (frames with their
/// framing: 4 bytes on a plain connection, 12 on a multiplexed one).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Count {
    pub rpcs: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// What a node answers to a stats query.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeStats {
    pub pid: u32,
    /// utime + stime of the whole process, seconds.
    pub cpu_s: f64,
    /// Per class: `raft_append` (with entries), `raft_heartbeat` (no entries), `raft_vote`,
    /// `raft_snapshot`, `client_data`, `dir_lookup`, `dir_write` (Report, AllocGroupId),
    /// `dir_read` (Ranges), `dir_heartbeat` (a node's heartbeat, not logged),
    /// `dir_forwarded` (a directory operation passed on by a node that could not serve it:
    /// counted once more, apart, where it is finally served).
    pub classes: BTreeMap<String, Count>,
}

impl Count {
    pub fn add(&mut self, o: &Count) {
        self.rpcs += o.rpcs;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
    }
}

impl NodeStats {
    pub fn total(&self) -> Count {
        let mut t = Count::default();
        for c in self.classes.values() {
            t.add(c);
        }
        t
    }

    /// Adds `o`'s CPU time and counters to these, class by class.
    pub fn add(&mut self, o: &NodeStats) {
        self.cpu_s += o.cpu_s;
        for (class, c) in &o.classes {
            self.classes.entry(class.clone()).or_default().add(c);
        }
    }

    /// `self - earlier`, class by class.
    pub fn since(&self, earlier: &NodeStats) -> NodeStats {
        let mut classes = BTreeMap::new();
        for (k, c) in &self.classes {
            let e = earlier.classes.get(k).copied().unwrap_or_default();
            classes.insert(
                k.clone(),
                Count {
                    rpcs: c.rpcs - e.rpcs,
                    bytes_in: c.bytes_in - e.bytes_in,
                    bytes_out: c.bytes_out - e.bytes_out,
                },
            );
        }
        NodeStats { pid: self.pid, cpu_s: self.cpu_s - earlier.cpu_s, classes }
    }
}

/// Ticks per second of `/proc/*/stat` times (USER_HZ; 100 on every Linux we run on).
const USER_HZ: f64 = 100.0;

/// utime + stime of process `pid` in seconds (`self` for this process), from /proc.
pub fn proc_cpu_s(pid: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

fn class(msg: &Message) -> &'static str {
    match msg {
        Message::Raft { rpc, .. } => match rpc.as_ref() {
            RaftRpc::Append(a) if a.entries.is_empty() => "raft_heartbeat",
            RaftRpc::Append(_) => "raft_append",
            RaftRpc::Vote(_) => "raft_vote",
            RaftRpc::Snapshot(_) => "raft_snapshot",
            RaftRpc::Fetch(_) => "raft_fetch",
        },
        Message::Client(req) if req.group == DIRECTORY_GROUP => match &req.op {
            // Passed on by a node holding no directory replica (bavl_cluster::dirroute).
            ClientOp::Forwarded(_) => "dir_forwarded",
            ClientOp::Lookup(_) => "dir_lookup",
            ClientOp::Ranges => "dir_read",
            // Node liveness and range stats, kept in the directory leader's memory (no log
            // entry): not a directory write.
            ClientOp::Heartbeat { .. } => "dir_heartbeat",
            _ => "dir_write",
        },
        Message::Client(_) => "client_data",
    }
}

type Counters = Arc<Mutex<BTreeMap<&'static str, Count>>>;

/// Counts every message by class as the node serves it; answers stats queries.
struct Counting(Counters);

impl ServeHook for Counting {
    type Tag = (&'static str, usize);

    fn query(&self, frame: &[u8]) -> Option<Vec<u8>> {
        if !frame.starts_with(LAB_QUERY_PREFIX) {
            return None;
        }
        let q = serde_json::from_slice::<LabQuery>(frame).ok()?;
        (q.lab == "stats").then(|| stats_json(&self.0))
    }

    fn before(&self, msg: &Message, wire_in: usize) -> Self::Tag {
        (class(msg), wire_in)
    }

    fn after(&self, (class, wire_in): Self::Tag, wire_out: usize) {
        let mut c = self.0.lock().expect("not poisoned");
        let one = Count { rpcs: 1, bytes_in: wire_in as u64, bytes_out: wire_out as u64 };
        c.entry(class).or_default().add(&one);
    }
}

/// Serves `node` on `listener` as `bavl_cluster::tcp::serve` does (plain and multiplexed
/// connections), counting every message.
pub async fn serve_counted(node: Arc<Node>, listener: TcpListener) {
    serve_with(node, listener, Arc::new(Counting(Counters::default())), ConnLimits::default()).await
}

fn stats_json(counters: &Counters) -> Vec<u8> {
    let stats = NodeStats {
        pid: std::process::id(),
        cpu_s: proc_cpu_s("self").unwrap_or(0.0),
        classes: counters
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    };
    serde_json::to_vec(&stats).expect("stats serialize")
}

/// Asks the node at `addr` for its counters and CPU time.
pub async fn query_stats(addr: std::net::SocketAddr) -> std::io::Result<NodeStats> {
    let mut s = tokio::time::timeout(std::time::Duration::from_secs(3), TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    write_frame(&mut s, br#"{"lab":"stats"}"#).await?;
    let frame = tokio::time::timeout(std::time::Duration::from_secs(5), read_frame(&mut s))
        .await
        .map_err(|_| std::io::Error::other("stats timed out"))??
        .ok_or_else(|| std::io::Error::other("connection closed"))?;
    serde_json::from_slice(&frame).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_deltas_subtract_per_class() {
        assert!(proc_cpu_s("self").is_some());
        let c = |rpcs, b| Count { rpcs, bytes_in: b, bytes_out: 2 * b };
        let a =
            NodeStats { pid: 1, cpu_s: 1.0, classes: [("raft_append".into(), c(3, 10))].into() };
        let b = NodeStats {
            pid: 1,
            cpu_s: 1.5,
            classes: [("raft_append".into(), c(5, 30)), ("dir_lookup".into(), c(1, 1))].into(),
        };
        let d = b.since(&a);
        assert!((d.cpu_s - 0.5).abs() < 1e-9);
        assert_eq!(d.classes["raft_append"], c(2, 20));
        assert_eq!(d.classes["dir_lookup"], c(1, 1));
        assert_eq!(d.total(), Count { rpcs: 3, bytes_in: 21, bytes_out: 42 });
    }
}
