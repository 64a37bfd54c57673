//! What the application measures of itself: the time blocks spend in bavl.
//!
//! Each `FinalizeBlock` (apply and hash) and `Commit` (durable log record, snapshot) is
//! timed from its request's arrival to its answer; every `every` heights one log line
//! sums a window of blocks: blocks per second, transactions and operations, the time in
//! bavl and its share of the wall time, and the slowest block's. The share is the one
//! `docs/chain.md` §5 and §11 report (block time spent in bavl); the wall time includes
//! consensus.

use std::io::Write as _;
use std::time::{Duration, Instant};

/// One line per committed block, appended to `--block-log FILE` (CSV, header written
/// when the file is new): the height, when its `FinalizeBlock` arrived (Unix ms), its
/// transactions and operations, the milliseconds in `FinalizeBlock`, in `Commit`, and of
/// that in taking a snapshot. The chain experiments read block times and the time in
/// bavl from it.
pub(crate) struct BlockLog {
    out: std::io::BufWriter<std::fs::File>,
}

/// A block's figures, as [`BlockLog`] writes them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct BlockTimes {
    pub(crate) arrived_unix_ms: u128,
    pub(crate) txs: usize,
    pub(crate) ops: usize,
    pub(crate) finalize: Duration,
    pub(crate) commit: Duration,
    pub(crate) snapshot: Duration,
}

impl BlockLog {
    pub(crate) fn open(path: &std::path::Path) -> std::io::Result<BlockLog> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        let mut out = std::io::BufWriter::new(file);
        if out.get_ref().metadata()?.len() == 0 {
            writeln!(out, "height,arrived_unix_ms,txs,ops,finalize_ms,commit_ms,snapshot_ms")?;
        }
        Ok(BlockLog { out })
    }

    /// Appends one block (best effort: a failed write is logged once per block).
    pub(crate) fn record(&mut self, height: u64, t: &BlockTimes) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let line = writeln!(
            self.out,
            "{height},{},{},{},{:.3},{:.3},{:.3}",
            t.arrived_unix_ms,
            t.txs,
            t.ops,
            ms(t.finalize),
            ms(t.commit),
            ms(t.snapshot)
        );
        if let Err(e) = line.and_then(|()| self.out.flush()) {
            tracing::warn!(height, "writing the block log: {e}");
        }
    }
}

/// A window of blocks being summed.
pub(crate) struct Window {
    since: Instant,
    first: u64,
    blocks: u64,
    txs: u64,
    ops: u64,
    busy: Duration,
    slowest: Duration,
}

impl Window {
    pub(crate) fn new(next_height: u64) -> Window {
        Window {
            since: Instant::now(),
            first: next_height,
            blocks: 0,
            txs: 0,
            ops: 0,
            busy: Duration::ZERO,
            slowest: Duration::ZERO,
        }
    }

    /// Adds one block's FinalizeBlock and Commit times.
    pub(crate) fn record(&mut self, txs: usize, ops: usize, busy: Duration) {
        self.blocks += 1;
        self.txs += txs as u64;
        self.ops += ops as u64;
        self.busy += busy;
        self.slowest = self.slowest.max(busy);
    }

    /// Logs the window ending at `height` if it is a multiple of `every`, and starts the
    /// next one.
    pub(crate) fn maybe_report(&mut self, height: u64, every: u64) {
        if every == 0 || !height.is_multiple_of(every) || self.blocks == 0 {
            return;
        }
        let wall = self.since.elapsed().as_secs_f64();
        let busy = self.busy.as_secs_f64();
        tracing::info!(
            heights = %format!("{}..={height}", self.first),
            blocks_per_s = %format!("{:.2}", self.blocks as f64 / wall),
            txs = self.txs,
            ops = self.ops,
            bavl_ms = %format!("{:.1}", busy * 1e3),
            bavl_share = %format!("{:.4}", busy / wall),
            slowest_block_ms = %format!("{:.2}", self.slowest.as_secs_f64() * 1e3),
            "block window"
        );
        *self = Window::new(height + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_sums_and_restarts_at_its_boundary() {
        let mut w = Window::new(1);
        w.record(3, 30, Duration::from_millis(2));
        w.record(1, 5, Duration::from_millis(7));
        w.maybe_report(2, 4);
        assert_eq!((w.blocks, w.txs, w.ops, w.slowest), (2, 4, 35, Duration::from_millis(7)));
        w.maybe_report(4, 4);
        assert_eq!((w.first, w.blocks, w.busy), (5, 0, Duration::ZERO));
    }
}
