//! Where and when a figure was measured: the block every result file of the lab carries
//! under `"machine"`.
//!
//! [`Machine::probe`] reads Linux's `/proc` and asks `git` and `rustc`; anything it cannot
//! read becomes `"unknown"` (or 0), never an error, so a run outside a git tree or on
//! another system still writes its figures. The caller calls [`Machine::finish`] when
//! the measurements end, which records the load average then.
//!
//! Field names are part of the result files' format (`docs/results/*.json`):
//! `cpu`, `nproc`, `mem_total_gib`, `kernel`, `sha_ni`, `rustc`, `git_commit`,
//! `git_dirty`, `date`, `command`, `load_avg_start`, `load_avg_end`, then the optional
//! `others_busy_cores` and any extra fields a benchmark adds (`go`, `note`, ...).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The machine, toolchain and commit a run measured, with its date and command line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// The CPU's model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// CPUs of the machine (`processor` lines of `/proc/cpuinfo`), not of the process's
    /// affinity mask: a run pinned to one core still reports the machine.
    pub nproc: usize,
    /// `MemTotal`, GiB, one decimal.
    pub mem_total_gib: f64,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// Whether the CPU has the SHA extensions (`sha_ni`) that the SHA-256 backend uses.
    pub sha_ni: bool,
    /// `rustc --version` (of `$RUSTC` when set, as cargo sets it for build scripts).
    pub rustc: String,
    /// The full hash of the checked-out commit.
    pub git_commit: String,
    /// Whether tracked files differ from that commit (untracked files, such as a run's
    /// own outputs, do not count).
    pub git_dirty: bool,
    /// UTC at the probe, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The command line, arguments joined by spaces.
    pub command: String,
    /// `/proc/loadavg`'s three averages at the probe.
    pub load_avg_start: String,
    /// The same at [`Machine::finish`] (empty before).
    pub load_avg_end: String,
    /// Cores kept busy by other processes, on average over the run, where measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_busy_cores: Option<f64>,
    /// What a benchmark adds (the Go toolchain, a note on how the machine was shared).
    #[serde(flatten)]
    pub extra: BTreeMap<String, String>,
}

impl Machine {
    /// Everything but the end-of-run fields.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mem_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| field(&s, "MemTotal"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        let processors = cpuinfo.lines().filter(|l| key(l) == Some("processor")).count();
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        Machine {
            cpu: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            nproc: if processors > 0 {
                processors
            } else {
                std::thread::available_parallelism().map_or(1, |n| n.get())
            },
            mem_total_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            sha_ni: field(&cpuinfo, "flags")
                .is_some_and(|f| f.split_whitespace().any(|x| x == "sha_ni")),
            rustc: run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into()),
            git_commit: git_commit().unwrap_or_else(|| "unknown".into()),
            git_dirty: run("git", &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty()),
            date: utc_now(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            load_avg_start: load_avg(),
            load_avg_end: String::new(),
            others_busy_cores: None,
            extra: BTreeMap::new(),
        }
    }

    /// For a report written after its measurements (from their files): the probe with
    /// both load averages read now.
    pub fn at_end() -> Machine {
        let mut m = Machine::probe();
        m.finish();
        m
    }

    /// The machine with the command line written as `command` (a binary's name rather
    /// than the path it was started by).
    pub fn with_command(mut self, command: impl Into<String>) -> Machine {
        self.command = command.into();
        self
    }

    /// The machine with an extra field.
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Machine {
        self.extra.insert(name.to_string(), value.into());
        self
    }

    /// Records the end of the run: the load average now.
    pub fn finish(&mut self) {
        self.load_avg_end = load_avg();
    }

    /// The first `n` characters of the commit, for a summary line.
    pub fn short_commit(&self, n: usize) -> &str {
        let end = self.git_commit.char_indices().nth(n).map_or(self.git_commit.len(), |(i, _)| i);
        &self.git_commit[..end]
    }
}

/// Runs `cmd` and returns its trimmed stdout if it succeeded.
pub fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The full hash of the checked-out commit; `None` outside a git tree.
pub fn git_commit() -> Option<String> {
    run("git", &["rev-parse", "HEAD"])
}

/// The three load averages of `/proc/loadavg` (`"1.17 1.16 1.44"`); empty if unreadable.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The key of a `key: value` line of `/proc/cpuinfo` or `/proc/meminfo`.
fn key(line: &str) -> Option<&str> {
    line.split_once(':').map(|(k, _)| k.trim())
}

/// The value of the first `name: value` line of `text`.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find(|l| key(l) == Some(name))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400 + 3_723), "2000-02-29T01:02:03Z");
    }

    #[test]
    fn fields_are_found_by_exact_key() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sha_ni\n\
                       processor\t: 1\nmodel name\t: AMD EPYC\n";
        assert_eq!(field(cpuinfo, "model name").as_deref(), Some("AMD EPYC"));
        assert_eq!(field(cpuinfo, "model"), None);
        assert_eq!(cpuinfo.lines().filter(|l| key(l) == Some("processor")).count(), 2);
        assert_eq!(
            field("MemTotal:       24641180 kB\n", "MemTotal").as_deref(),
            Some("24641180 kB")
        );
    }

    #[test]
    fn the_block_keeps_its_field_names() {
        let mut m = Machine::probe().with_command("bavl-bench --quick").with("go", "go1.26");
        m.finish();
        assert!(m.nproc >= 1);
        assert_eq!(m.date.len(), "2026-11-22T04:50:23Z".len());
        let v = serde_json::to_value(&m).unwrap();
        let names: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for name in [
            "cpu",
            "nproc",
            "mem_total_gib",
            "kernel",
            "sha_ni",
            "rustc",
            "git_commit",
            "git_dirty",
            "date",
            "command",
            "load_avg_start",
            "load_avg_end",
            "go",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(!names.contains(&"others_busy_cores"), "absent unless measured");
        assert_eq!(v["command"], "bavl-bench --quick");
        let back: Machine = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.short_commit(7).len(), m.git_commit.len().min(7));
    }
}
