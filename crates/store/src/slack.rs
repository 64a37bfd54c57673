//! Counting the allocator's slack against a paged store's budget
//! ([`crate::Options::cache_counts_slack`], `docs/design.md` §8.5.1).
//!
//! The pager counts the heap bytes of the bodies it keeps (each buffer's capacity), but
//! the process pays more than that for them: a body is four allocations of four size
//! classes, bodies are loaded on reading threads and freed on the writer's in another
//! order, so the allocator's pages end up partly used, and freed memory goes back to the
//! OS only after a delay. Measured at 30M keys with a 512 MiB budget, the process held
//! about 1.5 bytes of memory per byte of body counted (`lab/notes/results-history.md`).
//!
//! So after each block the pager compares the memory the process has gained since the
//! pager started (anonymous resident memory, `RssAnon` in `/proc/self/status`) with the
//! bytes it counts (bodies and skeleton), and evicts to `budget / factor` instead of
//! `budget`: the budget then bounds what the bodies cost in memory, slack included. The
//! factor follows a sample above it at once and one below it by halves (the budget bounds
//! the peak: a factor that rose slowly let the cache overshoot while the slack grew over a
//! store's first blocks), is sampled only while the bodies fill at least half the
//! budget (a store that never does is never touched; below it the last factor stays),
//! and kept within `[1, MAX_FACTOR]`: the
//! budget is never exceeded by the count, and memory the process gains for other reasons
//! (which the gauge cannot tell from slack) can at most halve the cache. Without
//! `/proc/self/status` (not Linux) the factor stays 1.

/// The most the budget is divided by.
pub const MAX_FACTOR: f64 = 2.0;

/// The smoothed ratio of memory gained to bytes counted.
#[derive(Debug, Clone)]
pub(crate) struct SlackGauge {
    /// Anonymous resident bytes when the pager started; `None`: not counting slack.
    baseline: Option<u64>,
    factor: f64,
    /// Reads the process's anonymous resident bytes ([`anon_resident`]; tests pass
    /// their own).
    read: fn() -> Option<u64>,
}

impl SlackGauge {
    /// A gauge that counts slack if `on` and the process's memory can be read.
    pub(crate) fn new(on: bool) -> SlackGauge {
        SlackGauge::reading(on, anon_resident)
    }

    /// [`SlackGauge::new`] reading the process's memory with `read`.
    pub(crate) fn reading(on: bool, read: fn() -> Option<u64>) -> SlackGauge {
        SlackGauge { baseline: if on { read() } else { None }, factor: 1.0, read }
    }

    /// The factor to divide the budget by, after a block: `bodies` heap bytes of bodies
    /// held (working tree and retained versions), `skeleton` heap bytes of the skeleton.
    pub(crate) fn factor(&mut self, bodies: u64, skeleton: u64, budget: u64) -> f64 {
        let Some(base) = self.baseline else { return 1.0 };
        if bodies == 0 || bodies < budget / 2 {
            return self.factor;
        }
        if let Some(now) = (self.read)() {
            let gained = now.saturating_sub(base).saturating_sub(skeleton);
            self.factor = smooth(self.factor, gained as f64 / bodies as f64);
        }
        self.factor
    }

    /// The current factor, in thousandths (for [`crate::PagingStats`]).
    pub(crate) fn permille(&self) -> u64 {
        (self.factor * 1000.0).round() as u64
    }
}

/// The next smoothed factor from the last one and a new sample, the sample first clamped
/// to `[1, MAX_FACTOR]` (a sample that is not a number is 1): a sample above the factor
/// is taken at once, one below it is averaged with it. The budget bounds a peak, so the
/// factor follows the slack up without delay (averaging from 1 let the cache overshoot
/// while the slack grew over the first blocks) and down only by halves.
fn smooth(last: f64, sample: f64) -> f64 {
    let s = if sample.is_nan() { 1.0 } else { sample.clamp(1.0, MAX_FACTOR) };
    if s > last {
        s
    } else {
        (last + s) / 2.0
    }
}

/// `RssAnon` of this process in bytes, if the system reports it.
fn anon_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_rss_anon(&status)
}

/// The `RssAnon:` line of a `/proc/<pid>/status` text, in bytes.
fn parse_rss_anon(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: u64 = line["RssAnon:".len()..].trim().strip_suffix("kB")?.trim().parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rss_anon() {
        let status = "Name:\tx\nVmRSS:\t  9000 kB\nRssAnon:\t    1234 kB\nRssFile:\t 1 kB\n";
        assert_eq!(parse_rss_anon(status), Some(1234 * 1024));
        assert_eq!(parse_rss_anon("VmRSS: 5 kB\n"), None);
        assert_eq!(parse_rss_anon("RssAnon: lots kB\n"), None);
        assert_eq!(parse_rss_anon("RssAnon: 5 MB\n"), None);
    }

    #[test]
    fn smoothing_stays_within_bounds() {
        assert_eq!(smooth(1.0, 0.2), 1.0, "never below 1: the budget is not raised");
        assert_eq!(smooth(1.0, 9.0), 2.0, "a sample counts at most MAX_FACTOR");
        assert_eq!(smooth(1.5, f64::NAN), 1.25);
        assert_eq!(smooth(1.2, 1.6), 1.6, "up: at once");
        assert_eq!(smooth(1.6, 1.2), 1.4, "down: by halves");
        let mut f = 2.0;
        for _ in 0..60 {
            f = smooth(f, 1.3);
        }
        assert!((f - 1.3).abs() < 1e-9, "converges to a steady sample: {f}");
    }

    #[test]
    fn off_or_small_leaves_the_budget() {
        let mut off = SlackGauge::new(false);
        assert_eq!(off.factor(1 << 30, 0, 1 << 20), 1.0);
        // Bodies under half the budget: no sample, whatever the process holds.
        let mut on = SlackGauge::reading(true, || Some(1 << 40));
        assert_eq!(on.factor(10, 0, 1 << 30), 1.0);
        assert_eq!(on.factor(0, 0, 0), 1.0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn counts_memory_gained_since_the_start() {
        // Baseline 0: everything this test process holds counts as gained, far more than
        // one byte of "bodies", so the factor moves towards MAX_FACTOR.
        let mut g = SlackGauge { baseline: Some(0), ..SlackGauge::new(true) };
        assert_eq!(g.factor(1, 0, 1), 2.0);
        assert_eq!(g.permille(), 2000);
        // Bodies larger than the whole process: the sample is 1.
        assert_eq!(g.factor(u64::MAX / 4, 0, 1), 1.5);
    }
}
