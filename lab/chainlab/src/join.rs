//! The join experiment: a fresh node state-syncs a chain's preloaded state from the 4
//! validators (1 of them lying, or none), and its application reports how it went
//! (`restore-report.json`, see `bavl_abci`'s report module).
//!
//! Each repetition starts right after node0 took a new snapshot, so that no snapshot is
//! taken while a joiner restores (the baseline's exports would otherwise load the CPU
//! the joiner shares); the joiners of one network take turns in an order that alternates
//! between repetitions.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::blocks::read_blocks;
use crate::net::{set_toml, Bins, Net, VALIDATORS};
use crate::Setup;

/// How a joiner restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Verifies every chunk (bavl) or the whole stream at the end (baseline).
    Verify,
    /// Accepts every chunk unread: CometBFT's own floor.
    Null,
}

/// One chain of the experiment: its snapshot format, its liar, and its joiners.
pub struct Network {
    pub format: &'static str,
    pub liar: Option<&'static str>,
    pub modes: Vec<Mode>,
}

/// One join, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct Join {
    pub variant: String,
    pub rep: usize,
    pub snapshot_height: u64,
    /// False when the joiner did not restore within the time limit (then the times are
    /// the limit, and the counts what it reported, nothing).
    pub restored: bool,
    /// From the first OfferSnapshot to the restored state written durably.
    pub restore_s: f64,
    /// From the joiner's start (discovery_time included).
    pub from_start_s: f64,
    pub bytes: u64,
    /// Every chunk received, of every snapshot tried (refused ones included).
    pub bytes_received: u64,
    pub bundles_kept: u64,
    pub bundles_refused: u64,
    pub offers_refused: u64,
    pub snapshots_rejected: u64,
    pub app_peak_rss_bytes: u64,
    pub node_peak_rss_bytes: u64,
}

pub fn variant_name(format: &str, liar: Option<&str>, mode: Mode) -> String {
    let what = if mode == Mode::Null { "null" } else { format };
    match liar {
        Some(l) => format!("{what}+1-{l}"),
        None => what.to_string(),
    }
}

/// Runs `net`'s chain and `setup.reps` joins per joiner; the processes stop on return.
pub fn run(bins: &Bins, dir: &Path, base: u16, spec: &Network, setup: &Setup) -> Result<Vec<Join>> {
    let app_state = serde_json::json!({"bavl_preload": {"keys": setup.keys, "seed": 7}});
    let mut net = Net::generate(dir, bins, base, spec.modes.len(), &app_state)?;
    let common = |i: usize| -> Vec<String> {
        let mut a = vec![
            "--snapshot-interval".into(),
            setup.interval.to_string(),
            // Snapshots outlive a slow join (a baseline joiner downloading forgeries).
            "--snapshot-keep".into(),
            setup.snapshot_keep.to_string(),
            "--snapshot-format".into(),
            spec.format.into(),
            "--block-log".into(),
            dir.join(format!("logs/blocks{i}.csv")).display().to_string(),
        ];
        if let (Some(l), true) = (spec.liar, i == VALIDATORS - 1) {
            a.extend(["--byzantine".to_string(), l.to_string()]);
        }
        a
    };
    for v in 0..VALIDATORS {
        net.start_app(v, &common(v))?;
        net.start_node(v)?;
    }
    net.wait_height(0, 2, Duration::from_secs(600)).context("the chain's first blocks")?;
    let mut joins = Vec::new();
    let mut last_snapshot = 0;
    for rep in 0..setup.reps {
        let s = wait_snapshot(&mut net, dir, last_snapshot, setup)?;
        last_snapshot = s;
        // Headers after every forgery (up to FORGERIES heights after s) exist.
        let forgeries = bavl_abci::byzantine::FORGERIES;
        net.wait_height(0, s + forgeries + 4, Duration::from_secs(120))?;
        let (trust_hash, _) = bavl_abci::rpc::block_hashes(&net.rpc(0), s)?;
        let mut order: Vec<usize> = (0..spec.modes.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let mode = spec.modes[k];
            let mut j =
                join_once(&mut net, bins, VALIDATORS + k, spec, mode, s, &trust_hash, setup)?;
            j.rep = rep;
            eprintln!(
                "chainlab: {} rep {rep}: restored height {s} in {:.2} s ({:.1} MB received, {} refused bundles, {} refused offers, {} rejected snapshots)",
                j.variant, j.restore_s, j.bytes_received as f64 / 1e6, j.bundles_refused, j.offers_refused, j.snapshots_rejected
            );
            joins.push(j);
        }
    }
    Ok(joins)
}

/// Waits until node0 takes a snapshot above `after`; returns its height.
fn wait_snapshot(net: &mut Net, dir: &Path, after: u64, setup: &Setup) -> Result<u64> {
    let start = Instant::now();
    let limit = Duration::from_secs(120 + 5 * setup.interval);
    loop {
        let blocks = read_blocks(&dir.join("logs/blocks0.csv")).unwrap_or_default();
        if let Some(b) = blocks.iter().rev().find(|b| b.snapshot_ms > 0.0 && b.height > after) {
            return Ok(b.height);
        }
        if !net.alive("node0") || !net.alive("app0") {
            bail!("node0 or app0 exited (see {}/logs)", dir.display());
        }
        if start.elapsed() > limit {
            bail!("no snapshot above height {after} within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[allow(clippy::too_many_arguments)]
fn join_once(
    net: &mut Net,
    bins: &Bins,
    j: usize,
    spec: &Network,
    mode: Mode,
    trust_height: u64,
    trust_hash: &str,
    setup: &Setup,
) -> Result<Join> {
    let out = Command::new(&bins.cometbft)
        .args(["unsafe-reset-all", "--home"])
        .arg(net.node_home(j))
        .output()?;
    if !out.status.success() {
        bail!("resetting node{j}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(net.app_home(j));
    let cfg = net.node_home(j).join("config/config.toml");
    set_toml(&cfg, "statesync", "enable", "true")?;
    set_toml(&cfg, "statesync", "rpc_servers", &format!("\"{},{}\"", net.rpc(0), net.rpc(1)))?;
    set_toml(&cfg, "statesync", "trust_height", &trust_height.to_string())?;
    set_toml(&cfg, "statesync", "trust_hash", &format!("\"{trust_hash}\""))?;
    set_toml(&cfg, "statesync", "discovery_time", "\"5s\"")?;
    let mut args = vec!["--snapshot-format".to_string(), spec.format.to_string()];
    if mode == Mode::Null {
        args.push("--restore-null".into());
    }
    net.start_app(j, &args)?;
    let t0 = Instant::now();
    net.start_node(j)?;
    let report = net.app_home(j).join("restore-report.json");
    let limit = Duration::from_secs(setup.join_timeout_s);
    let mut restored = true;
    while !report.exists() {
        if !net.alive(&format!("node{j}")) || !net.alive(&format!("app{j}")) {
            bail!("joiner node{j} or app{j} exited (see {}/logs)", net.dir.display());
        }
        if t0.elapsed() > limit {
            eprintln!(
                "chainlab: joiner node{j} did not restore within {limit:?}: recorded as failed"
            );
            restored = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let from_start_s = t0.elapsed().as_secs_f64();
    let r: serde_json::Value = match restored {
        true => serde_json::from_slice(&std::fs::read(&report)?)?,
        false => serde_json::json!({"restore_s": from_start_s, "height": trust_height}),
    };
    let (app_rss, node_rss) = (net.peak_rss(&format!("app{j}")), net.peak_rss(&format!("node{j}")));
    net.kill(&format!("node{j}"));
    net.kill(&format!("app{j}"));
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    Ok(Join {
        variant: variant_name(spec.format, spec.liar, mode),
        rep: 0,
        snapshot_height: n("height"),
        restored,
        restore_s: r["restore_s"].as_f64().unwrap_or(0.0),
        from_start_s,
        bytes: n("bytes"),
        bytes_received: n("bytes_received"),
        bundles_kept: n("bundles_kept"),
        bundles_refused: n("bundles_refused"),
        offers_refused: n("offers_refused"),
        snapshots_rejected: n("snapshots_rejected"),
        app_peak_rss_bytes: app_rss.max(n("peak_rss_bytes")),
        node_peak_rss_bytes: node_rss,
    })
}
