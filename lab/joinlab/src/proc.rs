//! The processes of a run: servers (`bavl serve`, `bavl-harness serve-liar`) started with
//! a pipe on their standard input and `--exit-on-eof`, killed and reaped when their
//! [`Proc`] is dropped; and measured children (`bavl import`, `sync`, `check`, `stats`),
//! optionally inside a memory cgroup, polled every [`POLL`] for their peak resident set
//! (`VmHWM`, monotonic: the last value read before the exit is the peak to within a poll)
//! and CPU time, killed at a timeout. A measured child's stdout and stderr go to files
//! (no pipe to fill up), whose text is returned.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_labkit::cgroup::{CgroupStats, MemCgroup};
use bavl_labkit::procstat::{cpu_seconds, vm_hwm};
use serde::Serialize;

/// How often a measured child is looked at.
pub const POLL: Duration = Duration::from_millis(20);

/// A child killed and reaped when dropped; its stdin (if piped) closes with it.
pub struct Proc {
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl Proc {
    /// The process's peak resident set so far (`VmHWM`), if it is alive.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        vm_hwm(self.child.id())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server (`cmd` with `--listen 127.0.0.1:0 --exit-on-eof` already given) and
/// waits for its `serving http://ADDR` line; stderr goes to `log`. The process and URL.
pub fn serve(mut cmd: Command, log: &Path) -> Result<(Proc, String)> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err);
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().context("no stdout")?;
    let proc = Proc { child, _stdin: stdin };
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading a server's stdout")?;
        if let Some(url) = line.strip_prefix("serving ") {
            return Ok((proc, url.to_string()));
        }
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    bail!("{cmd:?} ended before serving: {}", text.trim())
}

/// How a measured child ended.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Exit code; `None` when killed (at the timeout, or by a signal: the OOM killer).
    pub code: Option<i32>,
    pub timed_out: bool,
    pub seconds: f64,
    pub peak_rss_bytes: u64,
    pub cpu_s: f64,
    /// The memory cgroup's counters, when it ran in one.
    pub cgroup: Option<CgroupStats>,
    #[serde(skip)]
    pub stdout: String,
    #[serde(skip)]
    pub stderr: String,
}

impl Measured {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `program args` to its end (killed after `timeout`) in a new memory cgroup of
/// `limit` bytes when given (named `tag`), timing it and watching its memory and CPU;
/// output goes to `out_prefix.stdout` / `.stderr`.
pub fn run_measured(
    program: &Path,
    args: &[String],
    limit: Option<(u64, &str)>,
    timeout: Duration,
    out_prefix: &Path,
) -> Result<Measured> {
    let group = limit.map(|(bytes, tag)| MemCgroup::create(tag, bytes)).transpose()?;
    let mut cmd = match &group {
        Some(g) => g.wrap(program),
        None => Command::new(program),
    };
    cmd.args(args);
    let out_path = out_prefix.with_extension("stdout");
    let err_path = out_prefix.with_extension("stderr");
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?);
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let (mut peak, mut cpu) = (0u64, 0f64);
    let (status, timed_out): (ExitStatus, bool) = loop {
        if let Some(st) = child.try_wait()? {
            break (st, false);
        }
        peak = peak.max(vm_hwm(pid).unwrap_or(0));
        cpu = cpu_seconds(pid).unwrap_or(cpu);
        if start.elapsed() > timeout {
            let _ = child.kill();
            break (child.wait()?, true);
        }
        std::thread::sleep(POLL);
    };
    let seconds = start.elapsed().as_secs_f64();
    let cgroup = match group {
        Some(g) => {
            let s = g.stats()?;
            g.remove()?;
            Some(s)
        }
        None => None,
    };
    Ok(Measured {
        code: status.code(),
        timed_out,
        seconds,
        peak_rss_bytes: peak,
        cpu_s: cpu,
        cgroup,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child_and_kills_it_at_the_timeout() {
        let dir = std::env::temp_dir().join(format!("bavl-joinlab-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sh = Path::new("sh");
        let script = "x=$(head -c 30000000 /dev/zero | tr '\\0' a); echo done; sleep 0.1";
        let args = vec!["-c".to_string(), script.to_string()];
        let m = run_measured(sh, &args, None, Duration::from_secs(20), &dir.join("a")).unwrap();
        assert!(m.success() && m.stdout.trim() == "done", "{m:?}");
        assert!(m.peak_rss_bytes > 30_000_000, "{m:?}");
        let args = vec!["30".to_string()];
        let m = run_measured(
            Path::new("sleep"),
            &args,
            None,
            Duration::from_millis(300),
            &dir.join("b"),
        )
        .unwrap();
        assert!(m.timed_out && !m.success() && m.seconds < 5.0, "{m:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
