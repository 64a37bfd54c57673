//! The larger-than-memory targets, computed from the `cgroup` subcommand's runs (written under
//! `targets` in its JSON): each figure with the runs it comes from, its target and whether
//! it is met. A figure whose runs are missing (not in this run, or failed) is `null` and
//! not met.

use serde_json::{json, Value};

use crate::memlimit::nomt_cache_mib;
use crate::memrecord::RunRecord;

const GIB: u64 = 1 << 30;

fn find<'a>(runs: &'a [RunRecord], store: &str, keys: u64, limit: u64) -> Option<&'a RunRecord> {
    runs.iter().find(|r| {
        r.store == store
            && r.initial_keys == keys
            && r.memory_limit_bytes == limit
            && r.status == "ok"
    })
}

/// bavl-paged's budget of chunk bodies under `limit` (what the child is given).
pub fn paged_budget_bytes(limit: u64) -> u64 {
    2 * nomt_cache_mib(limit) as u64 * (1 << 20)
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// One target: `value` (or null), `target`, `met` and what it was computed from.
fn target(value: Option<f64>, at_least: bool, goal: f64, from: &str) -> Value {
    let met = value.is_some_and(|v| if at_least { v >= goal } else { v <= goal });
    let op = if at_least { ">=" } else { "<=" };
    json!({ "value": value.map(|v| round(v, 3)), "target": format!("{op} {goal}"), "met": met, "from": from })
}

/// Every larger-than-memory target that these runs can give.
pub fn targets(runs: &[RunRecord]) -> Value {
    let m30 = 30_000_000;
    let ratio = |keys: u64, limit: u64| {
        let p = find(runs, "bavl-paged", keys, limit)?.ops_per_s?;
        let n = find(runs, "nomt", keys, limit)?.ops_per_s?;
        Some(p / n)
    };
    let rss_over = find(runs, "bavl-paged", m30, 2 * GIB).and_then(|r| {
        let rss = r.rss_peak_bytes? as f64;
        Some((rss - paged_budget_bytes(2 * GIB) as f64) / r.keys_final?.max(1) as f64)
    });
    let reopen = find(runs, "bavl-paged", m30, 2 * GIB).and_then(|r| r.reopen_s);
    let cached = (|| {
        let c = find(runs, "bavl-paged-cached", 1_000_000, 2 * GIB)?.ops_per_s?;
        let b = find(runs, "bavl", 1_000_000, 2 * GIB)?.ops_per_s?;
        Some(c / b)
    })();
    let mut ratios = serde_json::Map::new();
    let mut dies = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in runs {
        let (k, l) = (r.initial_keys, r.memory_limit_bytes);
        if !seen.insert((k, l)) {
            continue;
        }
        let name = format!("{}keys_{}MiB", k, l >> 20);
        ratios.insert(name, json!(ratio(k, l).map(|x| round(x, 3))));
        let paged_died = runs.iter().any(|p| {
            p.store == "bavl-paged"
                && p.initial_keys == k
                && p.memory_limit_bytes == l
                && p.status != "ok"
        });
        if paged_died && find(runs, "nomt", k, l).is_some() {
            dies.push(json!({ "keys": k, "memory_limit_bytes": l }));
        }
    }
    let nomt_ran = runs.iter().any(|r| r.store == "nomt");
    json!({
        "ops_ratio_vs_nomt_30m": target(ratio(m30, 2 * GIB), true, 2.0,
            "bavl-paged ops_per_s / nomt ops_per_s, 30M keys, 2 GiB"),
        "rss_over_budget_bytes_per_key_30m": target(rss_over, false, 8.0,
            "(bavl-paged rss_peak_bytes - its budget of chunk bodies) / keys_final, 30M keys, 2 GiB"),
        "reopen_s_30m": target(reopen, false, 5.0,
            "bavl-paged reopen_s (open of the closed store after the blocks, in the group), 30M keys, 2 GiB"),
        "cached_1m_ratio": target(cached, true, 0.9,
            "bavl-paged-cached ops_per_s / bavl ops_per_s, 1M keys, 2 GiB"),
        "bavl_paged_dies_where_nomt_runs": {
            "value": dies, "target": "none", "met": nomt_ran && dies.is_empty(),
            "from": "every (keys, limit) of this run where bavl-paged did not end ok and nomt did"
        },
        "ops_ratio_vs_nomt": ratios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(store: &str, keys: u64, ops: f64, status: &str) -> RunRecord {
        let stats = bavl_peers::cgroup::CgroupStats { limit_bytes: 2 * GIB, ..Default::default() };
        let e = bavl_peers::stream::Expected { keys: 0, digest: String::new(), measured_ops: 0 };
        let mut r =
            crate::memrecord::record(store, keys, &stats, Err(anyhow::anyhow!("x")), None, 0, &e);
        r.status = status.into();
        r.ops_per_s = Some(ops);
        r
    }

    #[test]
    fn ratios_and_deaths() {
        let runs = vec![
            run("nomt", 30_000_000, 10_000.0, "ok"),
            run("bavl-paged", 30_000_000, 25_000.0, "ok"),
            run("nomt", 1_000_000, 50_000.0, "ok"),
            run("bavl-paged", 1_000_000, 0.0, "oom-killed"),
        ];
        let t = targets(&runs);
        assert_eq!(t["ops_ratio_vs_nomt_30m"]["value"], json!(2.5));
        assert_eq!(t["ops_ratio_vs_nomt_30m"]["met"], json!(true));
        assert_eq!(t["cached_1m_ratio"]["value"], Value::Null);
        assert_eq!(t["cached_1m_ratio"]["met"], json!(false));
        let dies = &t["bavl_paged_dies_where_nomt_runs"];
        assert_eq!(dies["met"], json!(false));
        assert_eq!(dies["value"][0]["keys"], json!(1_000_000));
    }
}
