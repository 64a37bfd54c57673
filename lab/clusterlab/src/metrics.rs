//! Per-operation figures of one measured phase: throughput, CPU-seconds (node processes,
//! client process, and the nodes' with the idle background removed), messages and bytes,
//! directory traffic, retries, latency.

use crate::experiments::Background;
use crate::load::{PhaseResult, Workload};

/// Per-operation figures of one phase (all measured).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Metrics {
    pub clients: u32,
    pub ops: u64,
    pub seconds: f64,
    pub throughput_ops_s: f64,
    pub node_cpu_s_per_op: f64,
    /// The same with the idle cluster's background CPU removed.
    pub node_cpu_s_per_op_net: f64,
    pub client_cpu_s_per_op: f64,
    /// Node and client processes together.
    pub cpu_s_per_op: f64,
    /// Request/reply exchanges between processes per operation (each is two messages).
    pub rpcs_per_op: f64,
    pub raft_rpcs_per_op: f64,
    /// Raft appends that carried entries, per operation (over both followers).
    pub raft_appends_per_op: f64,
    pub bytes_per_op: f64,
    pub dir_lookups_per_op: f64,
    pub dir_writes_per_op: f64,
    pub retries_per_op: f64,
    pub stale_per_op: f64,
    pub not_leader_per_op: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub unknown: u64,
    pub failed: u64,
    /// Node processes whose counters cover the whole phase (3 unless one was killed).
    pub nodes_counted: usize,
}

pub fn metrics(p: &PhaseResult, bg: Option<&Background>) -> Metrics {
    let ops = p.ok.max(1) as f64;
    let node_cpu: f64 = p.nodes.values().map(|n| n.cpu_s).sum();
    let bg_cpu = bg.map_or(0.0, |b| b.node_cpu_s / b.seconds.max(1e-9) * p.wall_s);
    let mut m = Metrics {
        clients: p.clients,
        ops: p.ok,
        seconds: p.wall_s,
        throughput_ops_s: p.ok as f64 / p.wall_s.max(1e-9),
        node_cpu_s_per_op: node_cpu / ops,
        node_cpu_s_per_op_net: (node_cpu - bg_cpu).max(0.0) / ops,
        client_cpu_s_per_op: p.client_cpu_s / ops,
        cpu_s_per_op: (node_cpu + p.client_cpu_s) / ops,
        retries_per_op: p.client.retries as f64 / ops,
        stale_per_op: p.client.stale as f64 / ops,
        not_leader_per_op: p.client.not_leader as f64 / ops,
        unknown: p.unknown,
        failed: p.failed,
        nodes_counted: p.nodes.len(),
        ..Default::default()
    };
    for n in p.nodes.values() {
        for (class, c) in &n.classes {
            m.rpcs_per_op += c.rpcs as f64 / ops;
            m.bytes_per_op += (c.bytes_in + c.bytes_out) as f64 / ops;
            if class.starts_with("raft_") {
                m.raft_rpcs_per_op += c.rpcs as f64 / ops;
            }
            match class.as_str() {
                "raft_append" => m.raft_appends_per_op += c.rpcs as f64 / ops,
                "dir_lookup" => m.dir_lookups_per_op += c.rpcs as f64 / ops,
                "dir_write" | "dir_read" => m.dir_writes_per_op += c.rpcs as f64 / ops,
                _ => {}
            }
        }
    }
    if let Some(l) = p.latency.get("all") {
        m.p50_ms = l.p50_ms;
        m.p99_ms = l.p99_ms;
    }
    m
}

pub fn wname(w: Workload) -> &'static str {
    match w {
        Workload::Search => "search",
        Workload::Update => "update",
        Workload::Insert => "insert",
        Workload::Mixed => "mixed",
        Workload::History => "history",
    }
}
