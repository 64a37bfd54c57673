//! The CSV files of `docs/results/cluster/`: every measured phase of the partition sweep,
//! the modelled points, chunk capacities, the split phases and the histories.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::experiments::Results;
use crate::metrics::{metrics, wname};
use crate::report::Derived;

pub fn write(r: &Results, ds: &[(&str, &Derived)], fig: &Path) -> Result<()> {
    let mut t = String::from("kind,partitions,workload,client_cache,setting,phase,clients,ops,seconds,throughput_ops_s,cpu_s_per_op,node_cpu_s_per_op,client_cpu_s_per_op,rpcs_per_op,bytes_per_op,dir_lookups_per_op,retries_per_op,p50_ms,p99_ms\n");
    for x in &r.sweep {
        for (phase, p) in [("single_client", &x.latency), ("concurrent", &x.throughput)] {
            let m = metrics(p, Some(&x.background));
            writeln!(t, "measured,{},{},{},{},{phase},{},{},{:.3},{:.1},{:.3e},{:.3e},{:.3e},{:.3},{:.0},{:.4},{:.4},{:.3},{:.3}",
                x.partitions, wname(x.workload), x.cache, x.setting, m.clients, m.ops, m.seconds, m.throughput_ops_s,
                m.cpu_s_per_op, m.node_cpu_s_per_op, m.client_cpu_s_per_op, m.rpcs_per_op, m.bytes_per_op,
                m.dir_lookups_per_op, m.retries_per_op, m.p50_ms, m.p99_ms)?;
        }
    }
    std::fs::write(fig.join("partitions.csv"), t)?;
    let mut t = String::from("kind,setting,partitions,workload,client_cache,throughput_ops_s,partition_bound_ops_s,directory_bound_ops_s,efficiency\n");
    for (setting, m) in ds.iter().flat_map(|(n, d)| d.modelled.iter().map(move |m| (n, m))) {
        writeln!(
            t,
            "modelled,{setting},{},{},{},{:.0},{:.0},{},{}",
            m.partitions,
            wname(m.workload),
            m.cache,
            m.throughput_ops_s,
            m.partition_bound_ops_s,
            m.directory_bound_ops_s.map_or(String::new(), |v| format!("{v:.0}")),
            m.efficiency.map_or(String::new(), |v| format!("{v:.3}"))
        )?;
    }
    std::fs::write(fig.join("model.csv"), t)?;
    let mut t = String::from("kind,capacity,partitions,throughput_ops_s,cpu_s_per_op,node_cpu_s_per_op,rpcs_per_op,bytes_per_op,p50_ms,p99_ms\n");
    for c in &r.capacity {
        let m = metrics(&c.throughput, None);
        writeln!(
            t,
            "measured,{},{},{:.1},{:.3e},{:.3e},{:.3},{:.0},{:.3},{:.3}",
            c.capacity,
            c.partitions,
            m.throughput_ops_s,
            m.cpu_s_per_op,
            m.node_cpu_s_per_op,
            m.rpcs_per_op,
            m.bytes_per_op,
            m.p50_ms,
            m.p99_ms
        )?;
    }
    std::fs::write(fig.join("capacity.csv"), t)?;
    if let Some(sp) = &r.splits {
        let mut t = String::from("kind,phase,workload,ops,throughput_ops_s,retries_per_op,stale_per_op,not_leader_per_op,client_dir_lookups_per_op,dir_lookups_per_op,dir_writes_per_op\n");
        for p in sp.phases.iter().filter(|p| p.name != "warmup") {
            let m = metrics(p, None);
            writeln!(
                t,
                "measured,{},{},{},{:.1},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
                p.name,
                p.workload.map_or("", wname),
                m.ops,
                m.throughput_ops_s,
                m.retries_per_op,
                m.stale_per_op,
                m.not_leader_per_op,
                p.client.directory_lookups as f64 / p.ok.max(1) as f64,
                m.dir_lookups_per_op,
                m.dir_writes_per_op
            )?;
        }
        std::fs::write(fig.join("splits.csv"), t)?;
    }
    let mut t = String::from("kind,history,operations,killed_node,killed_at_s,restarted_at_s,unknown_outcome_writes,ranges_at_end\n");
    for (i, h) in r.histories.iter().enumerate() {
        writeln!(
            t,
            "measured,{i},{},{},{:.2},{:.2},{},{}",
            h.operations,
            h.killed_node,
            h.killed_at_s,
            h.restarted_at_s,
            h.phase.unknown,
            h.ranges_at_end
        )?;
    }
    std::fs::write(fig.join("histories.csv"), t)?;
    Ok(())
}
