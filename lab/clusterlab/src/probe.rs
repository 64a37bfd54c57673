//! `bavl-clusterlab probe`: one workload's throughput phase at a few partition counts, side
//! by side in one run, printed as a table: the quick A/B of a change to the cluster's costs
//! (the full run takes ~10 minutes; this one about 30 s per partition count). No results
//! are written; the clusters live under `--work`.
//!
//! Every partition count gets a fresh cluster with the same settings as the full run's
//! default sweep (`experiments::config`), an idle background measurement, a warm-up and one
//! throughput phase of `--seconds` with `--clients` concurrent clients.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cluster::LabCluster;
use crate::experiments::{background, config, phase};
use crate::load::{PhaseSpec, Spec, Workload};
use crate::metrics::metrics;
use crate::setup::Setup;
use crate::RunArgs;

#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Partition counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub partitions: Vec<u64>,
    /// The workload of the throughput phase.
    #[arg(long, value_enum, default_value = "update")]
    pub workload: Workload,
    /// Concurrent clients (the full run uses 64 per partition).
    #[arg(long, default_value_t = 64)]
    pub clients: u32,
    /// Give each partition `--clients` clients (P x clients in all), as the full run's
    /// default does, instead of sharing `--clients` among the partitions (its
    /// `fixed_clients` setting).
    #[arg(long)]
    pub per_partition: bool,
    /// Clients sharing one multiplexed connection per node (0: every client has its own
    /// connections, one request at a time on each).
    #[arg(long, default_value_t = 64)]
    pub clients_per_connection: u32,
    /// Load only the first partition's keys (the other groups idle): a partition's cost
    /// when its leader need not share its process's CPU with the others' loads.
    #[arg(long)]
    pub one_partition: bool,
    /// Length of the throughput phase.
    #[arg(long, default_value_t = 8.0)]
    pub seconds: f64,
}

pub async fn run(run: &RunArgs, a: &ProbeArgs, work: &Path) -> Result<()> {
    let s = Setup::new(run);
    println!(
        "{:>3} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "P", "ops/s", "node µs/op", "all µs/op", "rpcs/op", "raft/op", "p50 ms"
    );
    let mut port = run.port;
    let mut base: Option<f64> = None;
    for &p in &a.partitions {
        let c = LabCluster::start(
            &work.join(format!("probe-p{p}")),
            port,
            config(&s, p, s.capacity_default),
        )?;
        port += 10;
        c.wait_ready(Duration::from_secs(60)).await?;
        let bg = background(&c, s.idle_s).await;
        let clients = if a.per_partition { a.clients * p as u32 } else { a.clients };
        let spec = Spec {
            peers: c.peers.clone(),
            no_cache: false,
            clients_per_connection: a.clients_per_connection,
            keys: s.keys,
            phases: vec![
                phase("warmup".into(), a.workload, clients, 1.0),
                PhaseSpec {
                    partition: a.one_partition.then_some((0, p)),
                    ..phase("throughput".into(), a.workload, clients, a.seconds)
                },
            ],
            history: None,
            seed: p,
        };
        let res = c.load(&spec).await?;
        let Some(ph) = res.phases.get(1) else { anyhow::bail!("no throughput phase") };
        let m = metrics(ph, Some(&bg));
        let all = m.cpu_s_per_op * 1e6;
        let ratio = base.map(|b| format!("  x{:.2} of P={}", all / b, a.partitions[0]));
        base.get_or_insert(all);
        println!(
            "{p:>3} {:>10.0} {:>12.1} {all:>12.1} {:>10.2} {:>10.3} {:>10.2}{}",
            m.throughput_ops_s,
            m.node_cpu_s_per_op * 1e6,
            m.rpcs_per_op,
            m.raft_rpcs_per_op,
            m.p50_ms,
            ratio.unwrap_or_default()
        );
        let mut classes = std::collections::BTreeMap::<&str, u64>::new();
        for n in ph.nodes.values() {
            for (class, c) in &n.classes {
                *classes.entry(class.as_str()).or_default() += c.rpcs;
            }
        }
        let ops = ph.ok.max(1) as f64;
        let per: Vec<String> =
            classes.iter().map(|(k, v)| format!("{k} {:.3}", *v as f64 / ops)).collect();
        println!("    per op: {}", per.join(", "));
    }
    Ok(())
}
