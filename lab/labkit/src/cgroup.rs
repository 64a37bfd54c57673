//! A cgroup v1 `memory` child group for one measured process, so that "larger than memory"
//! is real: the kernel charges the process's anonymous memory *and* the page cache it
//! fills to the group, reclaims cache at the limit and OOM-kills the process when nothing
//! more can be reclaimed.
//!
//! Guarantees:
//! - [`MemCgroup::create`] makes `/sys/fs/cgroup/memory/bavl-lab-<pid>-<tag>` with
//!   `memory.limit_in_bytes` read back and checked, and `memory.swappiness` 0 so that swap
//!   (where a machine has it) cannot stretch the limit;
//! - the group is removed on every way out the parent survives: [`MemCgroup::remove`],
//!   or `Drop` (an error path, a panic), which first SIGKILLs any process still inside
//!   (only processes of that group: the store child this program started); groups left by
//!   a parent that was itself killed are removed by [`sweep_stale`] on the next run;
//! - a child process joins with [`join`] (writes its own pid to `cgroup.procs`) before it
//!   allocates anything of note, so no `unsafe` pre-exec hook is needed; a program that
//!   is not ours joins through [`MemCgroup::wrap`] (`sh` writes its pid, then `exec`s it).
//!
//! Needs root (or a delegated memory hierarchy); the errors say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Where the v1 memory hierarchy is mounted.
pub const ROOT: &str = "/sys/fs/cgroup/memory";
/// Name prefix of every group a lab program makes (the pid of the program follows).
pub const PREFIX: &str = "bavl-lab-";

/// What the kernel counted for a group (read after the child has exited).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CgroupStats {
    pub limit_bytes: u64,
    /// `memory.max_usage_in_bytes`: peak of anonymous memory + page cache charged.
    pub max_usage_bytes: u64,
    /// `memory.failcnt`: times a charge hit the limit (each followed by reclaim).
    pub failcnt: u64,
    /// `oom_kill` of `memory.oom_control`: processes the OOM killer ended in the group.
    pub oom_kills: u64,
}

/// A memory cgroup owned by this process; removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    path: PathBuf,
    removed: bool,
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn read_u64(path: &Path) -> Result<u64> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    s.trim().parse().with_context(|| format!("{} holds {:?}, not a number", path.display(), s))
}

/// The `oom_kill` count in the text of `memory.oom_control` (0 when the kernel predates
/// the field).
pub fn parse_oom_kills(oom_control: &str) -> u64 {
    oom_control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A byte size such as `2GiB`, `512MiB`, `1500M`, `4096` (binary units for `Ki`/`Mi`/`Gi`
/// and for the bare `K`/`M`/`G`, as cgroup files read them).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().with_context(|| format!("{s:?}: expected a size like 2GiB"))?;
    let mul: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        u => bail!("{s:?}: unknown unit {u:?} (use KiB, MiB or GiB)"),
    };
    let v = n * mul as f64;
    if !(v.is_finite() && (1.0..1e18).contains(&v)) {
        bail!("{s:?}: size out of range");
    }
    Ok(v as u64)
}

impl MemCgroup {
    /// Creates the group `bavl-lab-<pid>-<tag>` with a limit of `limit_bytes`.
    pub fn create(tag: &str, limit_bytes: u64) -> Result<MemCgroup> {
        let root = Path::new(ROOT);
        if !root.join("memory.limit_in_bytes").exists() {
            bail!("no cgroup v1 memory hierarchy at {ROOT} (this benchmark needs one)");
        }
        let path = root.join(format!("{PREFIX}{}-{tag}", std::process::id()));
        std::fs::create_dir(&path)
            .with_context(|| format!("creating the cgroup {} (needs root)", path.display()))?;
        let g = MemCgroup { path, removed: false };
        write(&g.path.join("memory.limit_in_bytes"), &limit_bytes.to_string())?;
        // No swapping out of the group (where the machine has swap). A memory+swap limit
        // would do it too, but on this kernel it stops `memory.failcnt` from counting.
        write(&g.path.join("memory.swappiness"), "0")?;
        let got = read_u64(&g.path.join("memory.limit_in_bytes"))?;
        // The kernel rounds the limit down to whole pages.
        if got > limit_bytes || limit_bytes - got >= 4096 {
            bail!(
                "{}: asked a limit of {limit_bytes} bytes, the kernel set {got}",
                g.path.display()
            );
        }
        Ok(g)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `program args...` run inside the group: `sh -c 'echo $$ > GROUP/cgroup.procs &&
    /// exec "$@"'`, so the program's pid (the shell's, kept by `exec`) is charged from its
    /// first instruction. Add the program's arguments to the command returned.
    pub fn wrap(&self, program: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.path)
            .arg(program);
        cmd
    }

    /// The kernel's counters for the group.
    pub fn stats(&self) -> Result<CgroupStats> {
        let oom = std::fs::read_to_string(self.path.join("memory.oom_control"))
            .context("reading memory.oom_control")?;
        Ok(CgroupStats {
            limit_bytes: read_u64(&self.path.join("memory.limit_in_bytes"))?,
            max_usage_bytes: read_u64(&self.path.join("memory.max_usage_in_bytes"))?,
            failcnt: read_u64(&self.path.join("memory.failcnt"))?,
            oom_kills: parse_oom_kills(&oom),
        })
    }

    /// Pids still in the group.
    fn procs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Removes the group: SIGKILLs what is still inside, then `rmdir` (retried while the
    /// kernel finishes tearing the exited processes down).
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        remove_dir(&self.path, &self.procs())
    }
}

fn remove_dir(path: &Path, procs: &[u32]) -> Result<()> {
    for pid in procs {
        // Only processes inside this group, which this program started.
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    let mut last = None;
    for _ in 0..100 {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(last.expect("tried")).with_context(|| format!("removing the cgroup {}", path.display()))
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = remove_dir(&self.path, &self.procs()) {
                eprintln!("warning: {e:#}");
            }
        }
    }
}

/// Moves the calling process into the group at `path` (a child does this first thing).
pub fn join(path: &Path) -> Result<()> {
    write(&path.join("cgroup.procs"), &std::process::id().to_string())
        .context("joining the memory cgroup")
}

/// The memory cgroup directory of the calling process, when it is not the root group.
pub fn own_group() -> Option<PathBuf> {
    let s = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = s.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == "memory").then(|| path.to_string())
    })?;
    let rel = rel.trim_start_matches('/');
    (!rel.is_empty()).then(|| Path::new(ROOT).join(rel))
}

/// `memory.max_usage_in_bytes` of the calling process's group (`None` in the root group).
pub fn own_max_usage() -> Option<u64> {
    read_u64(&own_group()?.join("memory.max_usage_in_bytes")).ok()
}

/// Removes the `bavl-lab-<pid>-*` groups whose parent process `<pid>` is gone (a run
/// killed with SIGKILL cannot clean up after itself); returns how many.
pub fn sweep_stale() -> usize {
    let Ok(rd) = std::fs::read_dir(ROOT) else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let procs: Vec<u32> = std::fs::read_to_string(e.path().join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if remove_dir(&e.path(), &procs).is_ok() {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("2TB").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn oom_control() {
        let s = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_oom_kills(s), 3);
        assert_eq!(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), 0);
    }

    /// A process that outgrows its group is OOM-killed, the kernel counts it, and the
    /// group is gone afterwards. Needs root and the v1 memory hierarchy (CI has both).
    #[test]
    fn oom_kill_counted_and_group_removed() {
        let g = MemCgroup::create("test-oom", 32 << 20).expect("needs root and cgroup v1 memory");
        let path = g.path().to_path_buf();
        // `tail` keeps its whole last line in memory: 256 MiB without a newline.
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec sh -c 'head -c 268435456 /dev/zero | tail -n 1 >/dev/null'",
            path.display()
        );
        let status = std::process::Command::new("sh").arg("-c").arg(&script).status().unwrap();
        assert!(!status.success(), "the hog should have died");
        let s = g.stats().unwrap();
        assert_eq!(s.limit_bytes, 32 << 20);
        assert!(s.oom_kills >= 1, "{s:?}");
        assert!(s.failcnt >= 1, "{s:?}");
        assert!(s.max_usage_bytes > (28 << 20) && s.max_usage_bytes <= 32 << 20, "{s:?}");
        g.remove().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_wrapped_program_runs_inside() {
        let g = MemCgroup::create("test-wrap", 64 << 20).expect("needs root");
        let out = g.wrap(Path::new("cat")).arg("/proc/self/cgroup").output().unwrap();
        let name = g.path().file_name().unwrap().to_string_lossy().to_string();
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(&name), "{out:?}");
    }

    #[test]
    fn dropped_group_is_removed() {
        let g = MemCgroup::create("test-drop", 64 << 20).expect("needs root");
        let path = g.path().to_path_buf();
        assert!(path.join("memory.limit_in_bytes").exists());
        drop(g);
        assert!(!path.exists());
    }
}
