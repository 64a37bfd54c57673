//! What a result file records about where and when it was measured: the machine (CPU,
//! cores, memory, kernel, load), the git commit, the UTC date.

use serde_json::json;

/// The short hash of the checked-out commit (empty outside a git tree).
pub fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The machine: CPU model, cores, memory, kernel, load average and the git commit.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    json!({"cpu": cpu, "nproc": std::thread::available_parallelism().map_or(1, |n| n.get()),
           "mem_gib": (mem / 1048576.0 * 10.0).round() / 10.0, "kernel": kernel.trim(),
           "load_avg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
           "git_commit": git_commit()})
}

/// Now, UTC, as `2026-11-25T01:02:03Z`.
pub fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
