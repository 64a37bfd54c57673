//! `cluster.json` and its CSV and PNG: the per-operation costs measured per phase, the
//! model calibrated on them, the cluster's targets, and the raw counters of every
//! phase. Every figure sits in a section whose `kind` is `measured` or `modelled`.

use std::path::Path;

use anyhow::{Context, Result};
use bavl_labkit::Machine;
use serde_json::{json, Value};

use crate::experiments::{Results, Setup, SweepRow};
use crate::load::Workload;
use crate::metrics::{metrics, wname};
use crate::model::{Calibration, Modelled, Point, FORMULA};

/// The machine block, read when the report is written (both load averages are then's).
fn machine() -> Machine {
    Machine::at_end().with(
        "note",
        "2 cores shared by 3 node processes, the client process and other work on the machine",
    )
}

/// f_L(w): the busiest node's share of node CPU in the P = 1 throughput phase.
fn leader_shares(sweep: &[SweepRow]) -> Vec<(Workload, f64)> {
    sweep
        .iter()
        .filter(|r| r.partitions == 1 && r.cache)
        .map(|r| {
            let cpus: Vec<f64> = r.throughput.nodes.values().map(|n| n.cpu_s).collect();
            let sum: f64 = cpus.iter().sum();
            let max = cpus.iter().copied().fold(0.0, f64::max);
            (r.workload, if sum > 0.0 { max / sum } else { 1.0 })
        })
        .collect()
}

fn point(r: &SweepRow) -> Point {
    let m = metrics(&r.throughput, Some(&r.background));
    Point {
        partitions: r.partitions,
        workload: r.workload,
        cache: r.cache,
        node_cpu_per_op: m.node_cpu_s_per_op_net,
        background_cpu_per_s: r.background.node_cpu_s / r.background.seconds.max(1e-9),
        dir_lookups_per_op: m.dir_lookups_per_op,
        dir_writes_per_op: m.dir_writes_per_op,
    }
}

/// c_lookup: extra node CPU per extra directory lookup, cache off over cache on (search,
/// the largest partition count run both ways).
fn lookup_cost(sweep: &[SweepRow]) -> (f64, Option<u64>) {
    let mut best = (0.0, None);
    for off in sweep.iter().filter(|r| !r.cache && r.workload == Workload::Search) {
        let Some(on) = sweep
            .iter()
            .find(|r| r.cache && r.workload == Workload::Search && r.partitions == off.partitions)
        else {
            continue;
        };
        let (a, b) = (point(off), point(on));
        let extra = a.dir_lookups_per_op - b.dir_lookups_per_op;
        if extra > 0.1 {
            best =
                (((a.node_cpu_per_op - b.node_cpu_per_op) / extra).max(0.0), Some(off.partitions));
        }
    }
    best
}

pub struct Derived {
    pub calibration: Calibration,
    pub lookup_from: Option<u64>,
    pub modelled: Vec<Modelled>,
}

/// The calibration and the model over `rows` (one snapshot policy); `lookup`: c_lookup
/// taken from elsewhere when `rows` hold no cache-off run.
fn derive(rows: &[SweepRow], lookup: Option<(f64, Option<u64>)>) -> Derived {
    let leader_share = leader_shares(rows);
    let (c_lookup_s, lookup_from) = lookup.unwrap_or_else(|| lookup_cost(rows));
    let c_write_s = rows
        .iter()
        .find(|x| x.partitions == 1 && x.cache && x.workload == Workload::Update)
        .map_or(0.0, |x| {
            let share =
                leader_share.iter().find(|(w, _)| *w == Workload::Update).map_or(1.0, |s| s.1);
            point(x).node_cpu_per_op * share
        });
    let calibration = Calibration { leader_share, c_lookup_s, c_write_s };
    let points: Vec<Point> = rows.iter().map(point).collect();
    let modelled = calibration.model(&points);
    Derived { calibration, lookup_from, modelled }
}

fn efficiency(d: &Derived, p: u64, w: Workload) -> Option<f64> {
    d.modelled.iter().find(|m| m.partitions == p && m.workload == w && m.cache)?.efficiency
}

/// Measured CPU-s per op (nodes + client, or nodes only) at `p` over the same at 1.
fn cost_ratio(rows: &[SweepRow], p: u64, w: Workload, nodes_only: bool) -> Option<f64> {
    let find = |q: u64| rows.iter().find(|x| x.partitions == q && x.workload == w && x.cache);
    let (a, b) = (metrics(&find(p)?.throughput, None), metrics(&find(1)?.throughput, None));
    Some(if nodes_only {
        a.node_cpu_s_per_op / b.node_cpu_s_per_op
    } else {
        a.cpu_s_per_op / b.cpu_s_per_op
    })
}

fn model_json(d: &Derived) -> Value {
    let points: Vec<Value> = d
        .modelled
        .iter()
        .map(|m| {
            json!({"kind": "modelled", "partitions": m.partitions, "workload": wname(m.workload),
                   "client_cache": m.cache, "throughput_ops_s": m.throughput_ops_s,
                   "partition_bound_ops_s": m.partition_bound_ops_s,
                   "directory_bound_ops_s": m.directory_bound_ops_s, "efficiency": m.efficiency})
        })
        .collect();
    let shares: serde_json::Map<String, Value> =
        d.calibration.leader_share.iter().map(|(w, s)| (wname(*w).to_string(), json!(s))).collect();
    json!({
        "kind": "modelled",
        "formula": FORMULA,
        "calibration": {"kind": "measured", "leader_share": shares,
            "c_lookup_s": d.calibration.c_lookup_s, "c_lookup_from_partitions": d.lookup_from,
            "c_write_s": d.calibration.c_write_s},
        "points": points,
    })
}

fn min_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A target's entry; `interval`: the targets' bootstrap intervals ([`crate::interval`]),
/// whose entry under `name` it carries as `interval_95`.
fn target(name: &str, value: Option<f64>, goal: &str, kind: &str, interval: &Value) -> Value {
    let met = value.map(|v| match goal.split_once(' ') {
        Some((">=", g)) => g.parse().is_ok_and(|g: f64| v >= g),
        Some(("<=", g)) => g.parse().is_ok_and(|g: f64| v <= g),
        _ => false,
    });
    json!({"value": value, "target": goal, "kind": kind, "met": met, "interval_95": interval[name]})
}

/// The setting whose figures are the targets' (`headline_rule` in the JSON).
const HEADLINE: &str = "one_partition";

pub fn write(s: &Setup, r: &Results, out: &Path, elapsed: f64) -> Result<()> {
    let fig = out.join("cluster");
    std::fs::create_dir_all(&fig).with_context(|| format!("creating {}", fig.display()))?;
    let rows_of = |setting: &str| -> Vec<SweepRow> {
        r.sweep.iter().filter(|x| x.setting == setting).cloned().collect()
    };
    let with = rows_of("default");
    let d = derive(&with, None);
    let lookup = Some((d.calibration.c_lookup_s, d.lookup_from));
    let mut settings: Vec<(String, Vec<SweepRow>, Derived)> = vec![];
    for name in std::iter::once("default".to_string()).chain(s.settings.iter().cloned()) {
        let rows = rows_of(&name);
        let dd = derive(&rows, lookup);
        settings.push((name, rows, dd));
    }
    let mut by_setting = serde_json::Map::new();
    let (mut upd8_min, mut sea8_min, mut ratio_max) = (None, None, None);
    let (mut upd8, mut sea8, mut ratio) = (None, None, None);
    for (name, rows, dd) in &settings {
        let u = efficiency(dd, 8, Workload::Update);
        let se = efficiency(dd, 8, Workload::Search);
        let ra = cost_ratio(rows, 8, Workload::Update, false);
        upd8_min = min_opt(upd8_min, u);
        sea8_min = min_opt(sea8_min, se);
        ratio_max = max_opt(ratio_max, ra);
        if name == HEADLINE {
            (upd8, sea8, ratio) = (u, se, ra);
        }
        by_setting.insert(
            name.clone(),
            json!({"update_efficiency_8": u, "search_efficiency_8": se, "per_op_cost_ratio": ra,
                   "per_op_cost_ratio_nodes_only": cost_ratio(rows, 8, Workload::Update, true)}),
        );
    }
    by_setting.insert(
        "worst_over_settings".into(),
        json!({"update_efficiency_8": upd8_min, "search_efficiency_8": sea8_min, "per_op_cost_ratio": ratio_max}),
    );
    // The targets' setting is one_partition (HEADLINE): its rounds give their interval.
    let interval = r.one_partition.as_ref().map_or(Value::Null, |k| {
        crate::interval::intervals(k, &|rows: &[SweepRow]| {
            let dd = derive(rows, lookup);
            let u = efficiency(&dd, 8, Workload::Update);
            [u, efficiency(&dd, 8, Workload::Search), cost_ratio(rows, 8, Workload::Update, false)]
        })
    });
    let lin = r.lincheck.as_ref();
    let violations: Option<u64> = lin.map(|l| {
        l["per_history"].as_array().map_or(0, |h| {
            h.iter().map(|x| x["violations"].as_array().map_or(0, |v| v.len() as u64)).sum()
        })
    });
    let checked = lin.and_then(|l| l["histories"].as_u64()).unwrap_or(0);
    let decided = r.lincheck_exit.is_some_and(|c| c == 0 || c == 1);
    let faults = r.histories.len() as u64;

    let partitions: Vec<Value> = r
        .sweep
        .iter()
        .map(|x| {
            json!({
                "kind": "measured",
                "partitions": x.partitions,
                "workload": wname(x.workload),
                "client_cache": x.cache,
                "setting": x.setting,
                "single_client": metrics(&x.latency, Some(&x.background)),
                "concurrent_clients": metrics(&x.throughput, Some(&x.background)),
                "latency_by_kind_single_client": x.latency.latency,
                "idle_background": x.background,
            })
        })
        .collect();
    let ratios = |rows: &[SweepRow]| -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        for &p in s.partitions.iter().filter(|&&p| p > 1) {
            for w in [Workload::Search, Workload::Update, Workload::Insert, Workload::Mixed] {
                if let Some(v) = cost_ratio(rows, p, w, false) {
                    m.insert(format!("{}_{p}", wname(w)), json!(v));
                }
            }
        }
        m
    };
    let cache: Vec<Value> = r
        .sweep
        .iter()
        .filter(|x| !x.cache)
        .filter_map(|off| {
            let on = r.sweep.iter().find(|x| {
                x.cache && x.setting == "default" && x.partitions == off.partitions && x.workload == off.workload
            })?;
            let mo = |c: bool| {
                d.modelled
                    .iter()
                    .find(|m| m.partitions == off.partitions && m.workload == off.workload && m.cache == c)
                    .map(|m| m.throughput_ops_s)
            };
            Some(json!({
                "partitions": off.partitions, "workload": wname(off.workload),
                "measured": {"kind": "measured",
                    "cache_on": metrics(&on.throughput, Some(&on.background)),
                    "cache_off": metrics(&off.throughput, Some(&off.background)),
                    "cache_on_single_client": metrics(&on.latency, Some(&on.background)),
                    "cache_off_single_client": metrics(&off.latency, Some(&off.background))},
                "modelled": {"kind": "modelled", "cache_on_ops_s": mo(true), "cache_off_ops_s": mo(false)},
            }))
        })
        .collect();
    let capacity: Vec<Value> = r
        .capacity
        .iter()
        .map(|c| {
            let m = metrics(&c.throughput, None);
            let fl = d.calibration.leader_share.iter().find(|(w, _)| *w == Workload::Insert).map_or(1.0, |x| x.1);
            json!({"capacity": c.capacity, "partitions": c.partitions, "workload": "insert",
                   "measured": {"kind": "measured", "concurrent_clients": m},
                   "modelled": {"kind": "modelled",
                       "throughput_ops_s": c.partitions as f64 / (fl * m.node_cpu_s_per_op).max(1e-12),
                       "formula": "P / (f_L(insert) * node CPU-s per op), background not removed"}})
        })
        .collect();
    let splits = r.splits.as_ref().map(|sp| {
        let phases: Vec<Value> = sp
            .phases
            .iter()
            .filter(|p| p.name != "warmup")
            .map(|p| json!({"phase": p.name, "workload": p.workload.map(wname), "kind": "measured", "metrics": metrics(p, None)}))
            .collect();
        json!({"ranges_before": sp.ranges_before, "ranges_after": sp.ranges_after,
               "splits": sp.ranges_after.saturating_sub(sp.ranges_before),
               "split_keys": s.split_keys, "preloaded_keys": s.split_preload, "phases": phases})
    });
    let merges = r.merges.as_ref().map(|m| {
        let phases: Vec<Value> = m
            .phases
            .iter()
            .filter(|p| p.name != "warmup")
            .map(|p| json!({"phase": p.name, "workload": p.workload.map(wname), "kind": "measured", "metrics": metrics(p, None),
                            "unknown_outcome_writes": p.unknown, "failed": p.failed}))
            .collect();
        json!({"ranges_before": m.ranges_before, "ranges_after": m.ranges_after, "merges": m.merges(),
               "range_counts": m.range_counts.iter().map(|(t, n)| json!({"t_s": t, "ranges": n})).collect::<Vec<_>>(),
               "merge_keys": s.merge_preload, "preloaded_keys": s.merge_preload, "phases": phases,
               "note": "the planner merges neighbours holding at most merge_keys keys whatever their load (merge_load unbounded), after 3 report rounds of 2 s each, one merge at a time; range_counts polls the directory every 250 ms from the start of the load"})
    });
    let histories: Vec<Value> = r
        .histories
        .iter()
        .map(|h| {
            json!({"file": h.file, "operations": h.operations, "killed_node": h.killed_node,
                   "killed_at_s": h.killed_at_s, "restarted_at_s": h.restarted_at_s,
                   "ranges_at_end": h.ranges_at_end, "unknown_outcome_writes": h.phase.unknown,
                   "failed": h.phase.failed, "metrics": metrics(&h.phase, None)})
        })
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let doc = json!({
        "experiment": "DynaTree experiments (the paper's section 6) on real bavl-cluster node processes",
        "command": command,
        "machine": machine(),
        "elapsed_s": elapsed,
        "setup": s,
        "placement": "3 node processes on loopback TCP (fsynced Raft logs unless setup.no_fsync); every range group and the directory group have one replica on each node (3 replicas per group); leaders wherever elections put them. Range groups are created at bootstrap (seed_group, as bavl-cluster's --bootstrap), cut evenly over the preloaded keys; no splits except in the splits and history experiments, no merges except in the merges experiment.",
        "baseline": "partitions = 1: ONE non-partitioned Raft group (3 replicas) holding every key, beside the directory group (idle once the client cache is warm). This is the paper's baseline role (its BerkeleyDB-HA); reads go to the leader (read-index), not to any replica.",
        "update_efficiency_8": upd8,
        "headline_rule": "the targets' figures (update_efficiency_8, search_efficiency_8, per_op_cost_ratio) are the one_partition setting's: the model's premise is every partition's leader on a core of its own, and one_partition measures a partition's cost in a cluster of P without the other partitions' loads on the same 3 processes and 2 cores (since 2026-11-29 afternoon; before, the default's). The default setting (every partition loaded at once, all leaders sharing the 3 processes) gives the measured throughput, latency and cache figures, and its own targets' figures under figures_by_setting.default (the co-located measurement); figures_by_setting gives every setting and the worst over all of them",
        "figures_by_setting": by_setting,
        "targets_interval_95": interval,
        "settings": {
            "default": "fsynced Raft logs, a log-compaction snapshot every 2000 entries (bavl-cluster node's settings), setup.throughput_clients concurrent clients per partition (the paper's peak throughput: clients increased until the system saturates); every workload, every partition count",
            "one_partition": "as default, but the partitions are loaded one at a time: for each partition i of P a throughput phase of setup.throughput_clients clients (one client machine) whose keys all fall in partition i, the other groups idle beside it; the P phases summed into one (lab/clusterlab/src/isolated.rs); search and update at 1 and 8 partitions",
            "own_connections": "as default but every client has its own plain connections (one request at a time on each), as all runs before 2026-11-29 afternoon did; the default shares one multiplexed connection per node among setup.clients_per_connection clients (bavl_cluster::mux); search and update at 1 and 8 partitions",
            "no_snapshots": "as default but no log-compaction snapshot during the load: a snapshot exports, serialises and fsyncs a whole range, so its cost per write grows with the range's size and partitioning divides it; search and update at 1 and 8 partitions",
            "fixed_clients": "as default but setup.throughput_clients concurrent clients in all at every P (the headline rule of the runs before 2026-11-29): a group of P = 8 gets an eighth of the clients, batches fewer operations per Raft round and pays more rounds per operation; search and update at 1 and 8 partitions",
            "double_clients": "as default but twice its clients (2 x setup.throughput_clients x P): if the throughput rose much, the default would not be at its peak; search and update at 1 and 8 partitions",
            "no_fsync": "as default but the Raft logs are not fsynced: with a ~4 ms fdatasync here one Raft group's throughput is bound by its fsync rounds, not its CPU; without the wait the leaders become CPU-bound (the model's premise); search and update at 1 and 8 partitions",
        },
        "search_efficiency_8": sea8,
        "per_op_cost_ratio": ratio,
        "linearizability_violations": violations,
        "histories_checked": checked,
        "faults_injected": faults,
        "targets": {
            "update_efficiency_8": target("update_efficiency_8", upd8, ">= 0.9", "modelled", &interval),
            "search_efficiency_8": target("search_efficiency_8", sea8, ">= 0.9", "modelled", &interval),
            "per_op_cost_ratio": target("per_op_cost_ratio", ratio, "<= 1.5", "measured", &interval),
            "linearizability_violations": {"value": violations, "target": "0", "kind": "measured",
                "met": violations.map(|v| v == 0 && decided && checked > 0),
                "histories_checked": checked, "faults_injected": faults, "lincheck_exit": r.lincheck_exit},
        },
        "definitions": {
            "per_op_cost_ratio": "measured CPU-seconds (3 node processes + the client process, utime+stime from /proc) per update at 8 partitions over the same at 1 partition, throughput phases of the headline setting (one_partition: setup.throughput_clients clients on one partition at a time; default: that many per partition, all at once; fixed_clients: that many in all, double_clients: twice the default)",
            "efficiency": "modelled T(P)/(P*T(1)), model section",
            "rpcs_per_op": "request/reply exchanges counted by the serving node (Raft append, heartbeat, vote, snapshot; client data requests; directory lookups and writes), each two messages",
            "bytes_per_op": "frame bytes of requests and replies, with their framing (4 bytes on a plain connection, 12 on a multiplexed one)",
            "faults_injected": "node processes killed with SIGKILL during a recorded load and restarted (one per history)",
        },
        "entry_cost": crate::entrycost::entry_cost(&r.sweep, 1.5),
        "per_op_cost_ratio_by_partitions": {"kind": "measured",
            "values": settings.iter().map(|(n, rows, _)| (n.clone(), json!(ratios(rows)))).collect::<serde_json::Map<_, _>>()},
        "partitions": partitions,
        "model": {
            "kind": "modelled",
            "formula": FORMULA,
            "assumptions": "each partition's leader on a core of its own, followers elsewhere, clients on machines of their own; the leader's share of a partition's CPU as measured at P=1; the directory's 3 replicas answer lookups, its leader writes. Not modelled: network bandwidth/latency, disk fsync latency (bounds a partition only through batching), client machines (see client_cpu_s_per_op).",
            "by_setting": settings.iter().map(|(n, _, dd)| (n.clone(), model_json(dd))).collect::<serde_json::Map<_, _>>(),
        },
        "cache": cache,
        "capacity": capacity,
        "splits": splits,
        "merges": merges,
        "linearizability": {"kind": "measured", "checker": "lab/lincheck (porcupine v1.3.1), scripts/install-lincheck.sh",
            "summary": r.lincheck, "exit": r.lincheck_exit, "histories": histories},
        "errors": r.errors,
        "raw": {"sweep": r.sweep, "capacity": r.capacity, "splits": r.splits},
    });
    std::fs::write(out.join("cluster.json"), serde_json::to_string_pretty(&doc)? + "\n")?;
    let ds: Vec<(&str, &Derived)> = settings.iter().map(|(n, _, dd)| (n.as_str(), dd)).collect();
    crate::csv::write(r, &ds, &fig)?;
    if let Err(e) = crate::plot::all(&fig, r, &d.modelled) {
        eprintln!("clusterlab: plots skipped: {e:#}");
    }
    eprintln!(
        "clusterlab: wrote {} (update_efficiency_8 {upd8:?}, search_efficiency_8 {sea8:?}, per_op_cost_ratio {ratio:?}, violations {violations:?} in {checked} histories)",
        out.join("cluster.json").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_met_by_its_goal_and_carries_its_interval() {
        let interval = json!({"update_efficiency_8": [0.8, 1.1]});
        let t = target("update_efficiency_8", Some(0.95), ">= 0.9", "modelled", &interval);
        assert_eq!(t["met"], json!(true));
        assert_eq!(t["interval_95"], json!([0.8, 1.1]));
        let t = target("per_op_cost_ratio", Some(1.6), "<= 1.5", "measured", &interval);
        assert_eq!((t["met"].clone(), t["interval_95"].clone()), (json!(false), Value::Null));
        assert_eq!(target("x", None, ">= 0.9", "m", &Value::Null)["met"], Value::Null);
        assert_eq!(target("x", Some(1.0), "= 1", "m", &Value::Null)["met"], json!(false));
    }
}
