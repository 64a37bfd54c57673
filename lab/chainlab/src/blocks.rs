//! The throughput experiment: the validators of a chain with a preloaded state take a
//! snapshot every `interval` heights while a load generator submits transactions as fast
//! as the nodes take them; node0's block log (`bavl-abci serve --block-log`) gives each
//! block's arrival, transactions and the time spent in bavl.
//!
//! Definitions (`docs/chain.md` §11): the block time of block `h` is the time
//! between the arrivals of `FinalizeBlock` `h - 1` and `h`. A snapshot taken in the
//! `Commit` of height `s` delays block `s + 1`, and the proposal of `s + 2` was waiting
//! for it: blocks `s + 1` and `s + 2` are "during" the snapshot, every other block is
//! "outside". Throughput is committed transactions over the sum of those blocks' times.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_labkit::stats::percentile;
use serde::Serialize;

use crate::net::{Bins, Net, VALIDATORS};
use crate::Setup;

/// One line of a block log.
#[derive(Debug, Clone, Serialize)]
pub struct Block {
    pub height: u64,
    pub arrived_unix_ms: u64,
    pub txs: u64,
    pub ops: u64,
    pub finalize_ms: f64,
    pub commit_ms: f64,
    pub snapshot_ms: f64,
}

/// Reads a block log (skipping its header and any line cut by a crash).
pub fn read_blocks(path: &Path) -> Result<Vec<Block>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let parse = |line: &str| -> Option<Block> {
        let f: Vec<&str> = line.split(',').collect();
        let [h, a, t, o, fin, com, snap] = f[..] else { return None };
        Some(Block {
            height: h.parse().ok()?,
            arrived_unix_ms: a.parse().ok()?,
            txs: t.parse().ok()?,
            ops: o.parse().ok()?,
            finalize_ms: fin.parse().ok()?,
            commit_ms: com.parse().ok()?,
            snapshot_ms: snap.parse().ok()?,
        })
    };
    Ok(text.lines().skip(1).filter_map(parse).collect())
}

/// What one chain's run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub format: String,
    pub blocks_measured: usize,
    pub snapshots: usize,
    pub tx_per_s: f64,
    pub tx_per_s_outside: f64,
    pub tx_per_s_during: f64,
    pub snapshot_throughput_ratio: f64,
    pub block_time_p50_ms_outside: f64,
    pub block_time_p99_ms_outside: f64,
    pub block_time_p99_ms_during: f64,
    pub snapshot_block_time_p99_ratio: f64,
    pub snapshot_ms_mean: f64,
    /// (FinalizeBlock + Commit) over wall time, every measured block.
    pub bavl_share: f64,
    #[serde(skip)]
    pub blocks: Vec<Block>,
}

/// Splits the blocks after the first into "during" and "outside" and sums them.
pub fn analyse(format: &str, blocks: Vec<Block>) -> Throughput {
    let snaps: Vec<u64> = blocks.iter().filter(|b| b.snapshot_ms > 0.0).map(|b| b.height).collect();
    let during = |h: u64| snaps.iter().any(|&s| h == s + 1 || h == s + 2);
    let (mut dt_in, mut dt_out, mut tx_in, mut tx_out) = (vec![], vec![], 0u64, 0u64);
    let (mut busy, mut wall) = (0.0, 0.0);
    for w in blocks.windows(2) {
        let dt = w[1].arrived_unix_ms.saturating_sub(w[0].arrived_unix_ms) as f64;
        busy += w[1].finalize_ms + w[1].commit_ms;
        wall += dt;
        if during(w[1].height) {
            dt_in.push(dt);
            tx_in += w[1].txs;
        } else {
            dt_out.push(dt);
            tx_out += w[1].txs;
        }
    }
    let rate = |tx: u64, dts: &[f64]| tx as f64 / (dts.iter().sum::<f64>() / 1e3).max(1e-9);
    let (r_in, r_out) = (rate(tx_in, &dt_in), rate(tx_out, &dt_out));
    let p99_in = percentile(&dt_in, 99.0);
    let p99_out = percentile(&dt_out, 99.0);
    let snap_ms: Vec<f64> =
        blocks.iter().filter(|b| b.snapshot_ms > 0.0).map(|b| b.snapshot_ms).collect();
    Throughput {
        format: format.to_string(),
        blocks_measured: blocks.len().saturating_sub(1),
        snapshots: snaps.len(),
        tx_per_s: rate(tx_in + tx_out, &[dt_in.clone(), dt_out.clone()].concat()),
        tx_per_s_outside: r_out,
        tx_per_s_during: r_in,
        snapshot_throughput_ratio: if r_out > 0.0 { r_in / r_out } else { 0.0 },
        block_time_p50_ms_outside: percentile(&dt_out, 50.0),
        block_time_p99_ms_outside: p99_out,
        block_time_p99_ms_during: p99_in,
        snapshot_block_time_p99_ratio: if p99_out > 0.0 { p99_in / p99_out } else { 0.0 },
        snapshot_ms_mean: snap_ms.iter().sum::<f64>() / snap_ms.len().max(1) as f64,
        bavl_share: if wall > 0.0 { busy / wall } else { 0.0 },
        blocks,
    }
}

/// Runs a chain of `format` under load for `setup.load_s` seconds and analyses node0.
pub fn run(bins: &Bins, dir: &Path, base: u16, format: &str, setup: &Setup) -> Result<Throughput> {
    let app_state = serde_json::json!({"bavl_preload": {"keys": setup.keys, "seed": 7}});
    let mut net = Net::generate(dir, bins, base, 0, &app_state)?;
    for v in 0..VALIDATORS {
        let log = dir.join(format!("logs/blocks{v}.csv")).display().to_string();
        let args: Vec<String> = [
            "--snapshot-interval",
            &setup.load_interval.to_string(),
            "--snapshot-format",
            format,
            "--block-log",
            &log,
        ]
        .map(String::from)
        .to_vec();
        net.start_app(v, &args)?;
        net.start_node(v)?;
    }
    net.wait_height(0, 2, Duration::from_secs(600)).context("the chain's first blocks")?;
    let rpcs: Vec<String> = (0..VALIDATORS).map(|v| net.rpc(v)).collect();
    let mut load = Command::new(&bins.app);
    load.arg("load").arg("--rpc").args(&rpcs);
    load.args(["--txs", "1000000000", "--rate", "0", "--ops", "10"]);
    load.args(["--threads", &setup.load_threads.to_string(), "--keys", &setup.keys.to_string()]);
    net.start_other("load", &mut load)?;
    // The first seconds fill the mempool and the first blocks drain a burst: skip them.
    std::thread::sleep(Duration::from_secs(setup.load_warmup_s));
    let h0 = net.height(0)? + 2;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(setup.load_s) {
        if !net.alive("load") || !net.alive("node0") {
            bail!("the load generator or node0 exited (see {}/logs)", dir.display());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let h1 = net.height(0)?;
    net.kill("load");
    let blocks: Vec<Block> = read_blocks(&dir.join("logs/blocks0.csv"))?
        .into_iter()
        .filter(|b| b.height >= h0 && b.height <= h1)
        .collect();
    if blocks.len() < 3 {
        bail!("only {} blocks between heights {h0} and {h1}", blocks.len());
    }
    let t = analyse(format, blocks);
    eprintln!(
        "chainlab: {format}: {:.0} tx/s ({} blocks, {} snapshots of {:.0} ms): during/outside {:.3}, block p99 {:.0}/{:.0} ms, bavl share {:.3}",
        t.tx_per_s, t.blocks_measured, t.snapshots, t.snapshot_ms_mean, t.snapshot_throughput_ratio,
        t.block_time_p99_ms_during, t.block_time_p99_ms_outside, t.bavl_share
    );
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(height: u64, at: u64, txs: u64, snap: f64) -> Block {
        Block {
            height,
            arrived_unix_ms: at,
            txs,
            ops: txs * 10,
            finalize_ms: 1.0,
            commit_ms: 1.0,
            snapshot_ms: snap,
        }
    }

    #[test]
    fn the_blocks_after_a_snapshot_are_during_it() {
        // 1 s blocks of 100 txs, except a snapshot at 3 that delays block 4 by 2 s.
        let b = vec![
            block(1, 0, 100, 0.0),
            block(2, 1000, 100, 0.0),
            block(3, 2000, 100, 5.0),
            block(4, 5000, 100, 0.0),
            block(5, 6000, 100, 0.0),
            block(6, 7000, 100, 0.0),
        ];
        let t = analyse("x", b);
        assert_eq!((t.snapshots, t.blocks_measured), (1, 5));
        assert!((t.tx_per_s_outside - 100.0).abs() < 1e-9);
        assert!((t.tx_per_s_during - 50.0).abs() < 1e-9); // 200 txs over 4 s
        assert!((t.snapshot_throughput_ratio - 0.5).abs() < 1e-9);
        assert!((t.block_time_p99_ms_during - 3000.0).abs() < 1e-9);
        assert!((t.bavl_share - 10.0 / 7000.0).abs() < 1e-9);
    }
}
