//! What the syncer knows of one source: its health, its manifest, its requests in flight
//! and its adaptive concurrency window.
//!
//! The window is AIMD driven by latency: a response whose round trip stays within
//! `latency_tolerance` times the fastest seen from this source grows the window by
//! `1 / window` (one more request per window of answers); a slower one (requests queue at
//! the source or on its link) shrinks it by as much; a transient failure halves it. A
//! source that answers fast and keeps its latency flat under load is thus given more
//! requests at once, and the scheduler prefers the source that would answer one more
//! request soonest.

use std::time::Duration;

use crate::error::{BanReason, DropReason};
use crate::protocol::Manifest;

/// A source's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Live,
    /// Sent an invalid response; never asked again.
    Banned(BanReason),
    /// Unavailable or unreliable; never asked again, but not a liar.
    Dropped(DropReason),
}

#[derive(Debug, Clone)]
pub(crate) enum ManifestState {
    Needed,
    InFlight,
    Have(Manifest),
}

/// Counters of one source, for reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceStats {
    /// Requests sent (manifest and chunks).
    pub requests: u64,
    /// Chunks it sent that were verified and kept.
    pub chunks: u64,
    /// Verified chunks it sent that were already held (a speculative duplicate lost).
    pub duplicates: u64,
    /// Bytes of every complete response body.
    pub bytes: u64,
    /// Transient failures (timeouts, transport errors, 5xx).
    pub transient_failures: u64,
}

/// What a report says of a source.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceReport {
    pub health: Health,
    pub stats: SourceStats,
    /// Current concurrency window (requests it may have in flight).
    pub window: u32,
    /// Smoothed round trip of its chunk and manifest requests.
    pub srtt: Option<Duration>,
}

pub(crate) struct Source {
    pub health: Health,
    pub manifest: ManifestState,
    pub in_flight: u32,
    window: f64,
    max_window: f64,
    min_rtt: Option<Duration>,
    srtt: Option<Duration>,
    /// Consecutive transient failures.
    pub failures: u32,
    /// No request before this time (backoff).
    pub retry_at: Duration,
    pub stats: SourceStats,
    /// Chunks it answered `404` for before the count was known: judged once its manifest
    /// or the first verified chunk says whether they exist.
    pub early_404: Vec<u64>,
}

impl Source {
    pub fn new(initial_window: u32, max_window: u32) -> Self {
        Source {
            health: Health::Live,
            manifest: ManifestState::Needed,
            in_flight: 0,
            window: f64::from(initial_window),
            max_window: f64::from(max_window),
            min_rtt: None,
            srtt: None,
            failures: 0,
            retry_at: Duration::ZERO,
            stats: SourceStats::default(),
            early_404: Vec::new(),
        }
    }

    pub fn is_live(&self) -> bool {
        self.health == Health::Live
    }

    pub fn manifest(&self) -> Option<&Manifest> {
        match &self.manifest {
            ManifestState::Have(m) => Some(m),
            _ => None,
        }
    }

    /// Requests it may have in flight now.
    pub fn window(&self) -> u32 {
        self.window as u32
    }

    pub fn has_room(&self, now: Duration) -> bool {
        self.is_live() && self.retry_at <= now && self.in_flight < self.window()
    }

    /// Expected time until one more request would be answered: lower is better; a source
    /// not yet measured comes first so every source gets measured.
    pub fn score(&self) -> f64 {
        let rtt = self.srtt.map_or(0.0, |d| d.as_secs_f64());
        rtt * f64::from(self.in_flight + 1) / self.window
    }

    /// A complete response arrived `rtt` after its request.
    pub fn on_success(&mut self, rtt: Duration, tolerance: f64) {
        self.failures = 0;
        let min = self.min_rtt.map_or(rtt, |m| m.min(rtt));
        self.min_rtt = Some(min);
        self.srtt = Some(self.srtt.map_or(rtt, |s| (s * 7 + rtt) / 8));
        let step = 1.0 / self.window;
        let slack = Duration::from_millis(1);
        if rtt <= min.mul_f64(tolerance) + slack {
            self.window = (self.window + step).min(self.max_window);
        } else {
            self.window = (self.window - step).max(1.0);
        }
    }

    /// A transient failure: halve the window and back off exponentially.
    pub fn on_transient(&mut self, now: Duration, base: Duration, max: Duration) {
        self.failures += 1;
        self.stats.transient_failures += 1;
        self.window = (self.window / 2.0).max(1.0);
        let shift = (self.failures - 1).min(16);
        self.retry_at = now + (base * (1u32 << shift)).min(max);
    }

    pub fn report(&self) -> SourceReport {
        SourceReport {
            health: self.health.clone(),
            stats: self.stats.clone(),
            window: self.window(),
            srtt: self.srtt,
        }
    }
}
