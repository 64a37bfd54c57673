//! What the application measures of itself: the time blocks spend in bavl.
//!
//! Each `FinalizeBlock` (apply and hash) and `Commit` (durable log record, snapshot) is
//! timed from its request's arrival to its answer; every `every` heights one log line
//! sums a window of blocks: blocks per second, transactions and operations, the time in
//! bavl and its share of the wall time, and the slowest block's. The share is what issue
//! 17 calls "the share of block time spent in bavl"; the wall time includes consensus.

use std::time::{Duration, Instant};

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
