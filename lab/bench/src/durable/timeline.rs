//! The pure part of the checkpoint experiment: blocks and checkpoint intervals on a time
//! line, throughput in fixed windows, and the "during a checkpoint" / "outside"
//! classification behind the ratios. No clocks here: times are seconds since a run began.

use bavl_labkit::stats::{mean, percentile};
use serde::Serialize;

/// One committed block: when it started, when `commit()` was called (the end of applying
/// its operations) and when the commit returned.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct BlockRec {
    pub start: f64,
    pub commit_start: f64,
    pub end: f64,
    pub ops: u64,
}

impl BlockRec {
    pub fn latency(&self) -> f64 {
        self.end - self.start
    }
}

/// A checkpoint (bavl) or a writer pause (blocking baseline). Its start is known exactly;
/// its end only within `[end_min, end_max]` when it is observed between blocks (bavl:
/// the store notices a finished checkpoint at the next commit), exactly for a pause.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Interval {
    pub start: f64,
    pub end_min: f64,
    pub end_max: f64,
}

impl Interval {
    pub fn exact(start: f64, end: f64) -> Self {
        Interval { start, end_min: end, end_max: end }
    }
}

/// Where a span of time lies relative to the checkpoint intervals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Entirely inside a span where a checkpoint certainly ran.
    During,
    /// Overlaps no span where a checkpoint may have run.
    Outside,
    /// Straddles a boundary (or an uncertain end): counted in neither mean.
    Edge,
}

impl Class {
    /// The CSV value: 1 during, 0 outside, 0.5 on an edge.
    pub fn csv(self) -> &'static str {
        match self {
            Class::During => "1",
            Class::Outside => "0",
            Class::Edge => "0.5",
        }
    }
}

/// Classifies the span `[lo, hi]`.
pub fn classify(lo: f64, hi: f64, intervals: &[Interval]) -> Class {
    if intervals.iter().any(|c| c.start <= lo && hi <= c.end_min) {
        return Class::During;
    }
    if intervals.iter().all(|c| hi <= c.start || lo >= c.end_max) {
        return Class::Outside;
    }
    Class::Edge
}

/// Throughput in one window.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Window {
    pub start: f64,
    /// Operations completed in the window / window length.
    pub ops_per_s: f64,
    pub class: Class,
}

/// Throughput in consecutive windows of `len` seconds from 0 up to `total` (only whole
/// windows). A block's operations are spread evenly over its time, so a window holds
/// the share of each block that overlaps it; time between blocks (a writer pause) holds
/// none.
pub fn windows(blocks: &[BlockRec], len: f64, total: f64, intervals: &[Interval]) -> Vec<Window> {
    assert!(len > 0.0, "window length must be positive");
    let n = (total / len + 1e-9).floor().max(0.0) as usize;
    let mut ops = vec![0.0f64; n];
    for b in blocks {
        let d = b.end - b.start;
        if d <= 0.0 {
            // A block of no measurable length: all of it where it ended.
            let i = (b.end / len) as usize;
            if let Some(o) = ops.get_mut(i) {
                *o += b.ops as f64;
            }
            continue;
        }
        let rate = b.ops as f64 / d;
        let first = (b.start / len).floor().max(0.0) as usize;
        let last = ((b.end / len).ceil() as usize).min(n);
        for (i, o) in ops.iter_mut().enumerate().take(last).skip(first) {
            let (lo, hi) = (i as f64 * len, (i + 1) as f64 * len);
            let overlap = b.end.min(hi) - b.start.max(lo);
            if overlap > 0.0 {
                *o += rate * overlap;
            }
        }
    }
    ops.iter()
        .enumerate()
        .map(|(i, &o)| {
            let (lo, hi) = (i as f64 * len, (i + 1) as f64 * len);
            Window { start: lo, ops_per_s: o / len, class: classify(lo, hi, intervals) }
        })
        .collect()
}

/// Mean of a figure during checkpoints and outside them, and their ratio.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Split {
    pub during: f64,
    pub outside: f64,
    /// `during / outside` (NaN when either side is empty).
    pub ratio: f64,
    pub n_during: usize,
    pub n_outside: usize,
}

impl Split {
    fn of(during: &[f64], outside: &[f64], stat: impl Fn(&[f64]) -> f64) -> Split {
        let (d, o) = (stat(during), stat(outside));
        let ratio = if during.is_empty() || outside.is_empty() { f64::NAN } else { d / o };
        Split { during: d, outside: o, ratio, n_during: during.len(), n_outside: outside.len() }
    }
}

/// Values sorted into during and outside by their class (edges dropped).
fn split_by<T>(items: &[T], f: impl Fn(&T) -> (Class, f64)) -> (Vec<f64>, Vec<f64>) {
    let (mut d, mut o) = (Vec::new(), Vec::new());
    for it in items {
        match f(it) {
            (Class::During, v) => d.push(v),
            (Class::Outside, v) => o.push(v),
            (Class::Edge, _) => {}
        }
    }
    (d, o)
}

/// Mean window throughput during checkpoints over the mean outside them.
pub fn throughput_split(windows: &[Window]) -> Split {
    let (d, o) = split_by(windows, |w| (w.class, w.ops_per_s));
    Split::of(&d, &o, mean)
}

/// For each checkpoint, the mean throughput of the windows wholly inside it over the mean
/// of the outside windows around it — within one checkpoint length before its start and
/// after its latest end: a ratio that slow drifts of the machine's speed over a run do not
/// bias. Checkpoints without such windows inside or around are left out.
pub fn local_ratios(windows: &[Window], len: f64, intervals: &[Interval]) -> Vec<f64> {
    let mut out = Vec::new();
    for c in intervals {
        let span = c.end_max - c.start;
        let (lo, hi) = (c.start - span, c.end_max + span);
        let during: Vec<f64> = windows
            .iter()
            .filter(|w| {
                w.class == Class::During && w.start >= c.start && w.start + len <= c.end_min
            })
            .map(|w| w.ops_per_s)
            .collect();
        let outside: Vec<f64> = windows
            .iter()
            .filter(|w| w.class == Class::Outside && w.start >= lo && w.start + len <= hi)
            .map(|w| w.ops_per_s)
            .collect();
        if !during.is_empty() && !outside.is_empty() {
            out.push(mean(&during) / mean(&outside));
        }
    }
    out
}

/// How a block relates to the checkpoints: during when a checkpoint certainly ran for
/// part of it; outside when none can have; an edge when the only overlap is with an
/// uncertain end.
pub fn block_class(b: &BlockRec, intervals: &[Interval]) -> Class {
    let overlaps = |lo: f64, hi: f64| b.start < hi && b.end > lo;
    if intervals.iter().any(|c| overlaps(c.start, c.end_min)) {
        Class::During
    } else if intervals.iter().any(|c| overlaps(c.start, c.end_max)) {
        Class::Edge
    } else {
        Class::Outside
    }
}

/// `p`-th percentile (nearest rank) of the block latencies, in milliseconds, during
/// checkpoints and outside them, and their ratio.
pub fn latency_split(blocks: &[(BlockRec, Class)], p: f64) -> Split {
    let (d, o) = split_by(blocks, |(b, c)| (*c, b.latency() * 1e3));
    Split::of(&d, &o, |v| if v.is_empty() { f64::NAN } else { percentile(v, p) })
}

/// Carries intervals from one run's time line to another's that applied the same blocks:
/// each time is placed at the same fraction of the same block (by block starts, the last
/// block's end closing the line), so a checkpoint that ran from block 57 a third of the way
/// into block 112 covers the same blocks in the other run. The control run of the
/// checkpoint experiment (no checkpoints at all) is classified with the checkpoint run's
/// intervals this way, to see how much of a during/outside ratio the blocks themselves
/// make (the state grows, later blocks are slower).
pub fn map_intervals(from: &[BlockRec], to: &[BlockRec], intervals: &[Interval]) -> Vec<Interval> {
    let n = from.len().min(to.len());
    let edge = |b: &[BlockRec], i: usize| if i < n { b[i].start } else { b[n - 1].end };
    let map = |t: f64| -> f64 {
        if n == 0 {
            return t;
        }
        // The last block start at or before t (or the first block).
        let i = from[..n].partition_point(|b| b.start <= t).saturating_sub(1);
        let (a, b) = (edge(from, i), edge(from, i + 1));
        let f = if b > a { ((t - a) / (b - a)).clamp(0.0, 1.0) } else { 0.0 };
        let (c, d) = (edge(to, i), edge(to, i + 1));
        c + f * (d - c)
    };
    intervals
        .iter()
        .map(|v| Interval { start: map(v.start), end_min: map(v.end_min), end_max: map(v.end_max) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: f64, end: f64, ops: u64) -> BlockRec {
        BlockRec { start, commit_start: end, end, ops }
    }

    #[test]
    fn classification_of_spans() {
        let c = [Interval { start: 1.0, end_min: 2.0, end_max: 2.5 }];
        assert_eq!(classify(1.0, 2.0, &c), Class::During);
        assert_eq!(classify(1.2, 1.8, &c), Class::During);
        assert_eq!(classify(0.0, 1.0, &c), Class::Outside, "touching the start is outside");
        assert_eq!(classify(2.5, 3.0, &c), Class::Outside, "after the latest possible end");
        assert_eq!(classify(0.5, 1.5, &c), Class::Edge, "straddles the start");
        assert_eq!(classify(1.5, 2.2, &c), Class::Edge, "reaches into the uncertain end");
        assert_eq!(classify(2.1, 2.4, &c), Class::Edge, "inside the uncertain end");
        assert_eq!(classify(0.0, 0.5, &[]), Class::Outside);
        let exact = [Interval::exact(1.0, 2.0)];
        assert_eq!(classify(2.0, 2.25, &exact), Class::Outside);
        assert_eq!(classify(1.75, 2.0, &exact), Class::During);
    }

    #[test]
    fn windows_spread_blocks_by_overlap() {
        // Two blocks of 100 ops: [0, 0.5) and [0.5, 1.0); windows of 0.25 s.
        let b = [block(0.0, 0.5, 100), block(0.5, 1.0, 100)];
        let w = windows(&b, 0.25, 1.0, &[]);
        assert_eq!(w.len(), 4);
        for x in &w {
            assert!((x.ops_per_s - 200.0).abs() < 1e-9, "{x:?}");
            assert_eq!(x.class, Class::Outside);
        }
        // A block straddling a window boundary is split in proportion.
        let b = [block(0.2, 0.3, 100)];
        let w = windows(&b, 0.25, 0.5, &[]);
        assert!((w[0].ops_per_s - 50.0 / 0.25).abs() < 1e-9);
        assert!((w[1].ops_per_s - 50.0 / 0.25).abs() < 1e-9);
        // Only whole windows; a block running past the end is cut off.
        let w = windows(&[block(0.0, 1.0, 1000)], 0.3, 1.0, &[]);
        assert_eq!(w.len(), 3);
        assert!(w.iter().all(|x| (x.ops_per_s - 1000.0).abs() < 1e-9));
    }

    #[test]
    fn a_pause_gives_zero_windows_and_a_zero_ratio() {
        // Blocks of 0.1 s with 1000 ops each, a pause in [1.0, 2.0].
        let mut b: Vec<BlockRec> =
            (0..10).map(|i| block(i as f64 * 0.1, (i + 1) as f64 * 0.1, 1000)).collect();
        b.extend((0..10).map(|i| block(2.0 + i as f64 * 0.1, 2.1 + i as f64 * 0.1, 1000)));
        let pause = [Interval::exact(1.0, 2.0)];
        let w = windows(&b, 0.25, 3.0, &pause);
        assert_eq!(w.len(), 12);
        let during: Vec<_> = w.iter().filter(|x| x.class == Class::During).collect();
        assert_eq!(during.len(), 4);
        assert!(during.iter().all(|x| x.ops_per_s == 0.0));
        let s = throughput_split(&w);
        assert_eq!(s.ratio, 0.0);
        assert_eq!(s.n_outside, 8);
        assert!((s.outside - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn ratio_of_a_slower_checkpoint_period() {
        // 1000 ops per 0.1 s outside, per 0.125 s during [1.0, 2.0].
        let mut b: Vec<BlockRec> =
            (0..10).map(|i| block(i as f64 * 0.1, (i + 1) as f64 * 0.1, 1000)).collect();
        b.extend((0..8).map(|i| block(1.0 + i as f64 * 0.125, 1.125 + i as f64 * 0.125, 1000)));
        b.extend((0..10).map(|i| block(2.0 + i as f64 * 0.1, 2.1 + i as f64 * 0.1, 1000)));
        let c = [Interval::exact(1.0, 2.0)];
        let s = throughput_split(&windows(&b, 0.25, 3.0, &c));
        assert!((s.ratio - 0.8).abs() < 1e-6, "{s:?}");
    }

    #[test]
    fn local_ratios_ignore_a_drift_between_checkpoints() {
        // 1000-op blocks: 10k ops/s before 2 s and 5k ops/s after, each checkpoint at 0.8
        // of its surroundings.
        let mut b = Vec::new();
        let mut seg = |from: f64, n: usize, d: f64| {
            b.extend((0..n).map(|i| block(from + i as f64 * d, from + (i + 1) as f64 * d, 1000)));
        };
        seg(0.0, 10, 0.1);
        seg(1.0, 4, 0.125);
        seg(1.5, 5, 0.1);
        seg(2.0, 5, 0.2);
        seg(3.0, 2, 0.25);
        seg(3.5, 5, 0.2);
        let c = [Interval::exact(1.0, 1.5), Interval::exact(3.0, 3.5)];
        let w = windows(&b, 0.125, 4.5, &c);
        let r = local_ratios(&w, 0.125, &c);
        assert_eq!(r.len(), 2);
        for x in &r {
            assert!((x - 0.8).abs() < 1e-6, "{r:?}");
        }
        // The pooled ratio mixes the two speeds.
        assert!((throughput_split(&w).ratio - 0.8).abs() > 0.02);
    }

    #[test]
    fn intervals_map_to_the_same_blocks_of_another_run() {
        // Run A: 0.1 s blocks; run B: the same blocks at 0.2 s each, from 1.0.
        let a: Vec<BlockRec> =
            (0..10).map(|i| block(i as f64 * 0.1, (i + 1) as f64 * 0.1, 1)).collect();
        let b: Vec<BlockRec> =
            (0..10).map(|i| block(1.0 + i as f64 * 0.2, 1.0 + (i + 1) as f64 * 0.2, 1)).collect();
        let m = map_intervals(&a, &b, &[Interval { start: 0.2, end_min: 0.55, end_max: 0.7 }]);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(
            close(m[0].start, 1.4) && close(m[0].end_min, 2.1) && close(m[0].end_max, 2.4),
            "{m:?}"
        );
        // Past the last block start: within the last block, then its end.
        let m = map_intervals(&a, &b, &[Interval { start: 0.95, end_min: 1.0, end_max: 5.0 }]);
        assert!(
            close(m[0].start, 2.9) && close(m[0].end_min, 3.0) && close(m[0].end_max, 3.0),
            "{m:?}"
        );
        // Same blocks, same classes.
        let c = [Interval { start: 0.2, end_min: 0.55, end_max: 0.7 }];
        let mc = map_intervals(&a, &b, &c);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(block_class(x, &c), block_class(y, &mc));
        }
    }

    #[test]
    fn blocks_during_outside_and_on_uncertain_ends() {
        let c = [Interval { start: 1.0, end_min: 1.5, end_max: 1.7 }];
        assert_eq!(block_class(&block(0.9, 1.0, 1), &c), Class::Outside);
        assert_eq!(block_class(&block(0.95, 1.05, 1), &c), Class::During);
        assert_eq!(block_class(&block(1.4, 1.6, 1), &c), Class::During);
        assert_eq!(block_class(&block(1.55, 1.65, 1), &c), Class::Edge);
        assert_eq!(block_class(&block(1.7, 1.8, 1), &c), Class::Outside);
        let blocks: Vec<(BlockRec, Class)> = [
            (block(0.0, 0.010, 1), Class::Outside),
            (block(0.0, 0.020, 1), Class::Outside),
            (block(0.0, 0.030, 1), Class::During),
            (block(0.0, 0.090, 1), Class::Edge),
        ]
        .into();
        let s = latency_split(&blocks, 99.0);
        assert!((s.during - 30.0).abs() < 1e-9);
        assert!((s.outside - 20.0).abs() < 1e-9);
        assert!((s.ratio - 1.5).abs() < 1e-9);
        assert_eq!((s.n_during, s.n_outside), (1, 2));
    }
}
