//! The processes of the adversarial benchmark on loopback: a `bavl serve` (honest), a
//! `bavl-synclab crowd` (liars), and the measured `bavl sync` child.
//!
//! Servers are started with a pipe on their standard input and exit when it closes; a
//! [`Proc`] also kills and reaps its child when dropped, so no server outlives a run,
//! whichever way it ends. A measured child is polled every [`POLL`]: its peak resident set
//! is the kernel's high-water mark (`VmHWM` in `/proc/PID/status`, monotonic, so the last
//! value read before the exit is the peak up to within one poll), its CPU time the `utime
//! + stime` of `/proc/PID/stat`, and it is killed at the timeout.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_labkit::procstat::{cpu_seconds, vm_hwm};

/// How often a measured child is looked at.
pub const POLL: Duration = Duration::from_millis(10);

/// A child process killed and reaped when dropped; its stdin closes with it.
pub struct Proc {
    child: Child,
    _stdin: Option<ChildStdin>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` with piped stdin and stdout and reads lines from its stdout until `done`
/// says the last one came; the process and the lines.
fn start(mut cmd: Command, done: impl Fn(&str) -> bool) -> Result<(Proc, Vec<String>)> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().context("no stdout")?;
    let proc = Proc { child, _stdin: stdin };
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading a server's stdout")?;
        let last = done(&line);
        lines.push(line);
        if last {
            return Ok((proc, lines));
        }
    }
    bail!("{cmd:?} ended before it was ready: {lines:?}")
}

/// An honest `bavl serve --dir EXPORT` on a free loopback port, and its URL.
pub fn serve(bavl: &Path, export: &Path) -> Result<(Proc, String)> {
    let mut cmd = Command::new(bavl);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--exit-on-eof", "--dir"]).arg(export);
    let (proc, lines) = start(cmd, |l| l.starts_with("serving "))?;
    let url = lines.last().and_then(|l| l.strip_prefix("serving ")).unwrap_or_default();
    Ok((proc, url.to_string()))
}

/// `count` liars of `kind` in one `bavl-synclab crowd` process (`exe`), and their URLs.
pub fn crowd(exe: &Path, kind: &str, count: usize, export: &Path) -> Result<(Proc, Vec<String>)> {
    let mut cmd = Command::new(exe);
    cmd.args(["crowd", "--kind", kind, "--count", &count.to_string(), "--dir"]).arg(export);
    let (proc, mut lines) = start(cmd, |l| l == "ready")?;
    lines.pop();
    if lines.len() != count || !lines.iter().all(|l| l.starts_with("http://")) {
        bail!("the crowd printed {lines:?}, not {count} URLs");
    }
    Ok((proc, lines))
}

/// How a measured child ended.
#[derive(Debug, Clone)]
pub struct Measured {
    /// `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    pub seconds: f64,
    pub peak_rss_bytes: u64,
    pub cpu_s: f64,
}

/// Runs `cmd` to its end (or kills it after `timeout`), timing it and watching its
/// memory and CPU.
pub fn run_measured(mut cmd: Command, timeout: Duration) -> Result<Measured> {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let (mut peak, mut cpu) = (0u64, 0f64);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        peak = peak.max(vm_hwm(pid).unwrap_or(0));
        cpu = cpu_seconds(pid).unwrap_or(cpu);
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(POLL);
    };
    let seconds = start.elapsed().as_secs_f64();
    Ok(Measured { status, seconds, peak_rss_bytes: peak, cpu_s: cpu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child_and_kills_it_at_the_timeout() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "x=$(head -c 30000000 /dev/zero | tr '\\0' a); sleep 0.2"]);
        let m = run_measured(cmd, Duration::from_secs(20)).unwrap();
        assert!(m.status.is_some_and(|s| s.success()), "{m:?}");
        assert!(m.seconds >= 0.2, "{m:?}");
        // The shell held the 30 MB string: its peak is above it.
        assert!(m.peak_rss_bytes > 30_000_000, "{m:?}");
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let m = run_measured(cmd, Duration::from_millis(300)).unwrap();
        assert!(m.status.is_none() && m.seconds < 5.0, "{m:?}");
    }
}
