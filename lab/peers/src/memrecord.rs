//! One store's run under a memory limit as the report keeps it ([`RunRecord`]): built from
//! the kernel's counters for its group and the child's report, or from how the child died
//! (an OOM kill is a result: the record keeps the last progress line and the keys loaded).

use std::os::unix::process::ExitStatusExt;

use anyhow::Result;
use bavl_peers::cgroup;
use bavl_peers::child::ChildReport;
use bavl_peers::stream;
use serde::Serialize;

use crate::memplot;

/// One store at one key count under the limit.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunRecord {
    pub store: String,
    pub initial_keys: u64,
    pub memory_limit_bytes: u64,
    /// `ok`, `oom-killed`, `failed` or `wrong-state` (ended with another state than expected).
    pub status: String,
    pub error: Option<String>,
    /// The child's last progress line (where an OOM-killed run was).
    pub last_progress: Option<String>,
    /// Keys the store had committed by its last `loaded N/..` progress line (printed every
    /// 100,000 keys): when it died, at least these, fewer than 100,000 more.
    pub died_after_keys_loaded: Option<u64>,
    pub oom_kills: u64,
    pub limit_hits: u64,
    pub cgroup_peak_bytes: u64,
    pub cgroup_peak_before_readback_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    pub rss_peak_after_load_bytes: Option<u64>,
    pub keys_final: Option<u64>,
    pub state_matches: Option<bool>,
    pub ops_measured: u64,
    pub ops_per_s: Option<f64>,
    pub commit_p50_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
    pub commit_max_ms: Option<f64>,
    pub ram_bytes_per_key: Option<f64>,
    pub cgroup_bytes_per_key: Option<f64>,
    pub disk_bytes: u64,
    pub disk_bytes_per_key: Option<f64>,
    pub write_bytes_per_op: Option<f64>,
    pub read_bytes_per_op: Option<f64>,
    pub pages_4k_read_per_op: Option<f64>,
    /// Seconds the initial load took (with `loaded_outside`: in the loader, outside the
    /// group, commits of 100,000 keys, and for bavl a final checkpoint).
    pub load_s: Option<f64>,
    pub load_write_bytes_per_key: Option<f64>,
    /// The initial state was loaded by a process outside the memory group (`--preload`);
    /// the measured process opened it (`open_s`) inside the group.
    pub loaded_outside: bool,
    pub open_s: Option<f64>,
    pub reopen_s: Option<f64>,
    pub verify_s: Option<f64>,
    pub child_wall_s: f64,
    pub block_ms: Vec<f64>,
    /// What the store reports about itself (scalars only).
    pub store_extra: serde_json::Value,
}

/// "nomt 1M: ok, 23.5k ops/s, p99 476 ms, RSS 1253 MB, cgroup 2048 MB".
pub fn one_line(r: &RunRecord) -> String {
    let mb = |b: Option<u64>| b.map_or("-".into(), |b| format!("{:.0} MB", b as f64 / 1e6));
    let mut s = format!("{} {}: {}", r.store, memplot::keys_label(r.initial_keys), r.status);
    if let Some(o) = r.ops_per_s {
        s += &format!(
            ", {o:.0} ops/s, p50 {:.1} ms, p99 {:.1} ms",
            r.commit_p50_ms.unwrap_or(0.0),
            r.commit_p99_ms.unwrap_or(0.0)
        );
    }
    s += &format!(
        ", RSS peak {}, cgroup peak {}",
        mb(r.rss_peak_bytes),
        mb(Some(r.cgroup_peak_bytes))
    );
    if let Some(k) = r.died_after_keys_loaded.filter(|_| r.status != "ok") {
        s += &format!(", died after {k} keys loaded");
    }
    if let Some(e) = &r.error {
        s += &format!(" ({e})");
    }
    s
}

fn last_loaded(tail: &[String]) -> Option<u64> {
    tail.iter().rev().find_map(|l| {
        let rest = l.split_once("] loaded ")?.1;
        rest.split('/').next()?.parse().ok()
    })
}

/// A run that could not start (its loader failed).
pub fn failed(name: &str, keys: u64, limit: u64, e: &anyhow::Error) -> RunRecord {
    let stats = cgroup::CgroupStats { limit_bytes: limit, ..Default::default() };
    let expected = stream::Expected { keys: 0, digest: String::new(), measured_ops: 0 };
    record(name, keys, &stats, Err(anyhow::anyhow!("{e:#}")), None, 0, &expected)
}

/// Takes the load's figures from the loader child's report `l` (`--preload`).
pub fn loaded_outside(r: &mut RunRecord, l: &ChildReport) {
    r.loaded_outside = true;
    r.load_s = Some((l.load_s * 100.0).round() / 100.0);
    let lw = l.io_after_load.write_bytes.saturating_sub(l.io_start.write_bytes) as f64;
    r.load_write_bytes_per_key = Some((lw / l.load_keys.max(1) as f64 * 10.0).round() / 10.0);
    if r.died_after_keys_loaded.is_none() && r.status != "ok" {
        // It died opening the state or in a block: everything was loaded already.
        r.died_after_keys_loaded = Some(l.load_keys);
    }
}

pub fn record(
    name: &str,
    keys: u64,
    stats: &cgroup::CgroupStats,
    ended: Result<crate::Ended>,
    readback: Option<Result<ChildReport>>,
    disk_bytes: u64,
    expected: &stream::Expected,
) -> RunRecord {
    let mut r = RunRecord {
        store: name.to_string(),
        initial_keys: keys,
        memory_limit_bytes: stats.limit_bytes,
        status: "failed".into(),
        error: None,
        last_progress: None,
        died_after_keys_loaded: None,
        oom_kills: stats.oom_kills,
        limit_hits: stats.failcnt,
        cgroup_peak_bytes: stats.max_usage_bytes,
        cgroup_peak_before_readback_bytes: None,
        rss_peak_bytes: None,
        rss_peak_after_load_bytes: None,
        keys_final: None,
        state_matches: None,
        ops_measured: 0,
        ops_per_s: None,
        commit_p50_ms: None,
        commit_p99_ms: None,
        commit_max_ms: None,
        ram_bytes_per_key: None,
        cgroup_bytes_per_key: None,
        disk_bytes,
        disk_bytes_per_key: None,
        write_bytes_per_op: None,
        read_bytes_per_op: None,
        pages_4k_read_per_op: None,
        load_s: None,
        load_write_bytes_per_key: None,
        loaded_outside: false,
        open_s: None,
        reopen_s: None,
        verify_s: None,
        child_wall_s: 0.0,
        block_ms: Vec::new(),
        store_extra: serde_json::Value::Null,
    };
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    r.last_progress = ended.tail.iter().rev().find(|l| l.starts_with('[')).cloned();
    r.died_after_keys_loaded = last_loaded(&ended.tail);
    if !ended.status.success() {
        let killed = ended.status.signal() == Some(9);
        r.status = if killed && stats.oom_kills > 0 { "oom-killed" } else { "failed" }.into();
        r.error = Some(format!("{}: {}", ended.status, ended.last_lines(3)));
        return r;
    }
    let mut c = match ended.report() {
        Ok(c) => c,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    match readback {
        Some(Ok(v)) => (c.keys, c.digest, c.verify_s) = (v.keys, v.digest, v.verify_s),
        Some(Err(e)) => {
            r.error = Some(format!("reading the state back: {e:#}"));
            return r;
        }
        None => {}
    }
    fill(&mut r, &c, expected);
    r
}

fn fill(r: &mut RunRecord, c: &ChildReport, expected: &stream::Expected) {
    let matches = c.keys == expected.keys && c.digest == expected.digest;
    r.status = if matches { "ok" } else { "wrong-state" }.into();
    r.state_matches = Some(matches);
    let keys = c.keys.max(1) as f64;
    let ops = c.ops_measured.max(1) as f64;
    let secs: f64 = c.block_ms.iter().sum::<f64>() / 1e3;
    r.ops_measured = c.ops_measured;
    r.ops_per_s = (secs > 0.0).then(|| (c.ops_measured as f64 / secs).round());
    let p = |q| (bavl_labkit::stats::percentile(&c.block_ms, q) * 100.0).round() / 100.0;
    r.commit_p50_ms = Some(p(50.0));
    r.commit_p99_ms = Some(p(99.0));
    r.commit_max_ms = Some(p(100.0));
    r.rss_peak_bytes = Some(c.hwm_bytes);
    r.rss_peak_after_load_bytes = Some(c.hwm_after_load_bytes);
    r.cgroup_peak_before_readback_bytes = c.cgroup_max_usage_after_blocks;
    r.keys_final = Some(c.keys);
    let r1 = |x: f64| (x * 10.0).round() / 10.0;
    r.ram_bytes_per_key = Some(r1(c.hwm_bytes as f64 / keys));
    r.cgroup_bytes_per_key = c.cgroup_max_usage_after_blocks.map(|b| r1(b as f64 / keys));
    r.disk_bytes_per_key = Some(r1(r.disk_bytes as f64 / keys));
    let (a, b) = (c.io_after_load, c.io_after_blocks);
    r.write_bytes_per_op = Some(r1(b.write_bytes.saturating_sub(a.write_bytes) as f64 / ops));
    let read = b.read_bytes.saturating_sub(a.read_bytes) as f64 / ops;
    r.read_bytes_per_op = Some(r1(read));
    r.pages_4k_read_per_op = Some((read / 4096.0 * 1000.0).round() / 1000.0);
    r.load_s = Some((c.load_s * 100.0).round() / 100.0);
    let lw = c.io_after_load.write_bytes.saturating_sub(c.io_start.write_bytes) as f64;
    r.load_write_bytes_per_key = Some(r1(lw / c.load_keys.max(1) as f64));
    r.reopen_s = c.reopen_s.map(|s| (s * 1000.0).round() / 1000.0);
    r.open_s = c.open_s.map(|s| (s * 1000.0).round() / 1000.0);
    r.verify_s = Some((c.verify_s * 100.0).round() / 100.0);
    r.block_ms = c.block_ms.iter().map(|x| (x * 100.0).round() / 100.0).collect();
    if let serde_json::Value::Object(m) = &c.extra {
        let scalars = m.iter().filter(|(_, v)| !v.is_array()).map(|(k, v)| (k.clone(), v.clone()));
        r.store_extra = serde_json::Value::Object(scalars.collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_keys_from_progress() {
        let tail = vec![
            "[bavl] loaded 100000/1000000 keys (0.6 s)".to_string(),
            "[bavl] loaded 200000/1000000 keys (1.2 s)".to_string(),
            "something else".to_string(),
        ];
        assert_eq!(last_loaded(&tail), Some(200_000));
        assert_eq!(last_loaded(&tail[2..]), None);
    }
}
