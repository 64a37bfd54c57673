//! The demo's peers on loopback ports, each serving the demo's `bavl export` directory:
//! the honest ones are `bavl serve --dir` processes (this binary's `serve`, the same code
//! as `bavl serve`, or a `bavl` given with `--bavl`), the liars `bavl-harness serve-liar --byzantine
//! KIND --dir` processes of this binary (the lying server is the `liars` feature of
//! bavl-sync, which `bavl` never enables).
//!
//! Every child is killed and reaped when [`Peers`] is dropped, which happens on every way
//! out of the demo (success, error, panic). Each child also runs with `--exit-on-eof` and
//! its standard input a pipe from the demo, so it exits by itself if the demo dies without
//! dropping (killed by a signal); Ctrl-C in a terminal reaches the whole process group,
//! children included.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use bavl_sync::http::Byzantine;
use rand::seq::SliceRandom;
use rand::Rng;

/// One running peer.
pub struct Peer {
    /// `None` for an honest peer.
    pub kind: Option<Byzantine>,
    pub url: String,
    pub pid: u32,
}

/// The running peers; dropping this kills them.
pub struct Peers {
    children: Vec<Child>,
    pub peers: Vec<Peer>,
}

/// `peers` behaviours of which `liars` lie, at places drawn from `rng`; the liars take the
/// kinds of `lies` in turn.
pub fn assign(
    peers: usize,
    liars: usize,
    lies: &[Byzantine],
    rng: &mut impl Rng,
) -> Vec<Option<Byzantine>> {
    let mut places: Vec<usize> = (0..peers).collect();
    places.shuffle(rng);
    let mut kinds = vec![None; peers];
    for (k, &p) in places.iter().take(liars).enumerate() {
        kinds[p] = lies.get(k % lies.len().max(1)).copied();
    }
    kinds
}

impl Peers {
    /// Starts one process serving `dir` per entry of `kinds` (`serve` of `bavl` — this
    /// binary or the shipped one — for an honest peer, `bavl-harness serve-liar` for a liar) and waits until each
    /// listens. On error, those already started are stopped.
    pub fn start(dir: &Path, kinds: &[Option<Byzantine>], bavl: &Path) -> Result<Peers> {
        let harness = std::env::current_exe().context("locating the bavl-harness binary")?;
        let mut peers = Peers { children: Vec::new(), peers: Vec::new() };
        for &kind in kinds {
            let exe = if kind.is_some() { &harness } else { bavl };
            let mut cmd = Command::new(exe);
            match kind {
                Some(k) => cmd.args(["serve-liar", "--byzantine", k.name()]),
                None => cmd.arg("serve"),
            };
            cmd.args(["--listen", "127.0.0.1:0", "--exit-on-eof", "--dir"]).arg(dir);
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
            let mut child = cmd.spawn().with_context(|| format!("starting {}", exe.display()))?;
            let (pid, stdout) = (child.id(), child.stdout.take());
            // Owned before anything can fail, so it is stopped with the others.
            peers.children.push(child);
            let Some(stdout) = stdout else { bail!("peer {pid}: no stdout") };
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .with_context(|| format!("reading peer {pid}'s address"))?;
            let Some(url) = line.trim().strip_prefix("serving ") else {
                bail!("peer {pid} did not start (it said {line:?})");
            };
            peers.peers.push(Peer { kind, url: url.to_string(), pid });
        }
        Ok(peers)
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn liars_take_the_lies_in_turn() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let lies = [Byzantine::WrongBytes, Byzantine::Stall];
        let kinds = assign(10, 3, &lies, &mut rng);
        assert_eq!(kinds.len(), 10);
        let told: Vec<Byzantine> = kinds.iter().flatten().copied().collect();
        assert_eq!(told.len(), 3);
        assert_eq!(told.iter().filter(|&&k| k == Byzantine::WrongBytes).count(), 2);
        assert_eq!(assign(4, 0, &lies, &mut rng), vec![None; 4]);
    }
}
