//! Why the CPU per update depends on how many partitions share the clients: a fit of the
//! measured cost per update against the Raft entries per update, over every update
//! throughput phase of the fsynced settings (`default`, `fixed_clients`, `double_clients`).
//!
//! The leader batches the writes waiting for its group into one entry (`propose.rs`), so an
//! update costs a fixed part `a` (its client request, its apply, its share of hashing) and
//! `b` per entry shared by the writes of that entry (the Raft round: appends to two
//! followers and their replies, the commit-only appends openraft sends after, three
//! fsyncs): `cpu per update = a + b * entries per update`. With a fixed number of clients, 8
//! partitions give each group an eighth of them, so smaller entries: the fit says how much
//! of the `per_op_cost_ratio` that explains, and how small `b` would have to be for the
//! ratio to meet its target at the measured batch sizes. Measured points, fitted line.

use serde_json::{json, Value};

use crate::experiments::SweepRow;
use crate::load::Workload;
use crate::metrics::metrics;

/// Followers of a group (3 replicas).
const FOLLOWERS: f64 = 2.0;
/// The settings whose logs are fsynced and snapshots on: the entry-cost line's points.
const FSYNCED: [&str; 3] = ["default", "fixed_clients", "double_clients"];

/// Least-squares line `y = a + b x`, with its R².
fn fit(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = sxy / sxx;
    let a = my - b * mx;
    let r2 = if syy > 0.0 { sxy * sxy / (sxx * syy) } else { 1.0 };
    Some((a, b, r2))
}

/// The `entry_cost` section of `cluster.json`.
pub fn entry_cost(sweep: &[SweepRow], target_ratio: f64) -> Value {
    let rows: Vec<&SweepRow> = sweep
        .iter()
        .filter(|r| r.workload == Workload::Update && r.cache)
        .filter(|r| FSYNCED.contains(&r.setting.as_str()))
        .collect();
    let mut points = vec![];
    let mut table = vec![];
    for r in &rows {
        let m = metrics(&r.throughput, None);
        let entries = m.raft_appends_per_op / FOLLOWERS;
        points.push((entries, m.cpu_s_per_op * 1e6));
        table.push(json!({
            "setting": r.setting, "partitions": r.partitions, "clients": m.clients,
            "entries_per_update": entries,
            "updates_per_entry": if entries > 0.0 { 1.0 / entries } else { 0.0 },
            "cpu_us_per_update": m.cpu_s_per_op * 1e6,
        }));
    }
    let Some((a, b, r2)) = fit(&points) else {
        return json!({"kind": "measured points, fitted line", "points": table, "fit": null});
    };
    let at = |p: u64| {
        rows.iter()
            .zip(&points)
            .find(|(r, _)| r.setting == "default" && r.partitions == p)
            .map(|(_, pt)| pt.0)
    };
    // Per-entry cost that would give the target ratio at the default setting's batch sizes:
    // (a + b' e8) / (a + b' e1) = t  =>  b' = a (t - 1) / (e8 - t e1).
    let needed = match (at(1), at(8)) {
        (Some(e1), Some(e8)) if e8 > target_ratio * e1 => {
            Some(a * (target_ratio - 1.0) / (e8 - target_ratio * e1))
        }
        _ => None,
    };
    json!({
        "kind": "measured points, fitted line",
        "model": "cpu_us_per_update = a + b * entries_per_update (entries_per_update = Raft appends with entries per update / 2 followers), least squares over the update throughput phases of the default, fixed_clients and double_clients settings",
        "a_us_per_update": a,
        "b_us_per_entry": b,
        "r2": r2,
        "b_us_per_entry_for_target": needed,
        "target_ratio": target_ratio,
        "points": table,
    })
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn the_fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> =
            (0..5).map(|i| (i as f64 * 0.1, 40.0 + 500.0 * i as f64 * 0.1)).collect();
        let (a, b, r2) = fit(&pts).unwrap();
        assert!((a - 40.0).abs() < 1e-9 && (b - 500.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-12);
        assert!(fit(&[(1.0, 2.0)]).is_none());
        assert!(fit(&[(1.0, 2.0), (1.0, 3.0)]).is_none(), "no spread in x: no line");
    }
}
