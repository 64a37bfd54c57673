//! What the figures were measured on: CPU, cores, memory, toolchain, commit, date and how
//! busy the machine was.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub nproc: usize,
    pub mem_total_gib: f64,
    /// Whether the CPU has the SHA extensions (`sha_ni`) that the SHA-256 backend uses.
    pub sha_ni: bool,
    pub rustc: String,
    pub git_commit: String,
    /// Whether the work tree had uncommitted changes.
    pub git_dirty: bool,
    pub load_avg_start: String,
    pub load_avg_end: String,
    /// Cores kept busy by other processes, on average over the whole run.
    pub others_busy_cores: f64,
}

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

impl Machine {
    /// Everything but the end-of-run fields.
    pub fn probe() -> Self {
        let mem_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
            })
            .unwrap_or(0.0);
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        Machine {
            cpu: cpuinfo_field("model name").unwrap_or_else(|| "unknown".into()),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            sha_ni: cpuinfo_field("flags")
                .is_some_and(|f| f.split_whitespace().any(|x| x == "sha_ni")),
            rustc: run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into()),
            git_commit: run("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
            git_dirty: run("git", &["status", "--porcelain"]).is_some_and(|s| !s.is_empty()),
            load_avg_start: load_avg(),
            load_avg_end: String::new(),
            others_busy_cores: 0.0,
        }
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
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

/// The calling thread pinned to the CPU it is running on; threads it spawns meanwhile
/// inherit the pin. Dropping it restores the previous affinity. Used to measure "one
/// core" figures even where the library would hash on a second thread.
pub struct Pin {
    old: libc::cpu_set_t,
}

impl Pin {
    /// Pins the calling thread; `None` where affinity cannot be changed.
    pub fn current_cpu() -> Option<Pin> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is plain data for which all-zero is a valid (empty) set;
        // the libc calls get a pointer to a live set and its exact size.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut old) != 0 {
                return None;
            }
            let cpu = usize::try_from(libc::sched_getcpu()).ok()?;
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            (libc::sched_setaffinity(0, size, &set) == 0).then_some(Pin { old })
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: restores a set obtained from `sched_getaffinity`, with its exact size.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }
}
