//! The crash test's child: `bavl-harness loadtest --print-roots` spawned on the store, its output
//! read on threads of their own (the versions and roots it reports as committed, the
//! moment it reports the store open), and a guard that kills and reaps it on every way
//! out.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use bavl_core::Digest;
use bavl_workload::Mix;

use super::{CrashtestArgs, Epoch, CHILD_BLOCKS, CHILD_KEEP};

/// Kills and reaps the child when dropped (also on an early return).
pub(super) struct ChildGuard(pub(super) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the child printed.
#[derive(Default)]
pub(super) struct Printed {
    pub(super) opened: Option<(u64, Digest)>,
    pub(super) commits: Vec<(u64, Digest)>,
    pub(super) bad_lines: Vec<String>,
}

pub(super) fn parse_line(line: &str) -> Option<(&str, u64, Digest)> {
    let mut w = line.split_whitespace();
    let what = w.next()?;
    let version = w.next()?.parse().ok()?;
    let root: Digest = hex::decode(w.next()?).ok()?.try_into().ok()?;
    w.next().is_none().then_some((what, version, root))
}

/// Reads the child's stdout until it closes; signals `opened` at the `opened` line.
pub(super) fn read_stdout(
    out: impl Read + Send + 'static,
    opened: mpsc::Sender<()>,
) -> JoinHandle<Printed> {
    std::thread::spawn(move || {
        let mut p = Printed::default();
        let mut r = BufReader::new(out);
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line without its newline was cut by the kill: not a report.
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => match parse_line(&line) {
                    Some(("committed", v, root)) => p.commits.push((v, root)),
                    Some(("opened", v, root)) if p.opened.is_none() => {
                        p.opened = Some((v, root));
                        let _ = opened.send(());
                    }
                    _ => p.bad_lines.push(line.trim_end().to_string()),
                },
            }
        }
        p
    })
}

pub(super) fn read_stderr(err: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(err).take(64 << 10).read_to_string(&mut s);
        s
    })
}

pub(super) fn spawn_child(
    exe: &Path,
    dir: &Path,
    args: &CrashtestArgs,
    e: &Epoch,
    mix: Mix,
) -> Result<ChildGuard> {
    let mut cmd = Command::new(exe);
    cmd.arg("loadtest")
        .arg("--db")
        .arg(dir)
        .args(["--blocks", &CHILD_BLOCKS.to_string()])
        .args(["--inserts", &mix.inserts.to_string()])
        .args(["--updates", &mix.updates.to_string()])
        .args(["--deletes", &mix.deletes.to_string()])
        .args(["--seed", &e.seed.to_string()])
        .args(["--capacity", &args.capacity.to_string()])
        .args(["--keep", &CHILD_KEEP.to_string()])
        .args(["--checkpoint-mb", &args.checkpoint_mb.to_string()])
        .args(["--checkpoint-ratio", "0"])
        .args(["--print-roots", "--quiet"]);
    if let Some(m) = args.cache_mib {
        cmd.args(["--cache-mib", &m.to_string()]);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().with_context(|| format!("spawning {}", exe.display()))?;
    Ok(ChildGuard(child))
}
