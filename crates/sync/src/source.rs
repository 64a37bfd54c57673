//! What the syncer knows of one source: its health, its manifest, its requests in flight,
//! what it holds of the memory budget, whether it has proved itself, and its adaptive
//! concurrency window.
//!
//! A source is **proven** once it delivered a chunk that verified: only then is it
//! measured and ranked by its round trips, and preferred to every unproven source. Fast
//! answers that lead nowhere (a manifest, a `404`, a chunk that fails) earn nothing, so a
//! crowd of sources that answer manifests fast and chunks never cannot outrank one that
//! delivers. Transient failures add to a failure debt that verified chunks pay back at
//! half the rate, so a source failing every other request is dropped too.
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
use crate::request::FailureKind;

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
    /// Bytes of its chunks that verified (including duplicates that lost a race).
    pub verified_bytes: u64,
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
    /// Consecutive transient failures (for the backoff).
    pub failures: u32,
    /// Failure debt: +1 per transient failure (+2 for an answer cut in the middle), -1/2
    /// per verified chunk; dropped above `max_retries`.
    pub debt: f64,
    /// Bytes of the budget it holds: limits of its requests in flight, its bodies awaiting
    /// verification and its parsed manifest.
    pub reserved: u64,
    /// What its parsed manifest is charged to the budget (0 while it has none).
    pub manifest_held: u64,
    /// Its manifest outgrew the guess it was asked at: asked again once the chunk count is
    /// known (its exact bound then follows from the count).
    pub manifest_big: bool,
    /// Its last transient failure.
    pub last_failure: Option<FailureKind>,
    /// No manifest request before this time (its last one could not be held).
    pub manifest_after: Duration,
    /// Copies it held of chunks that came from another source first.
    pub outrun: u32,
    /// It was asked for a chunk at least once.
    pub probed: bool,
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
            debt: 0.0,
            reserved: 0,
            manifest_held: 0,
            manifest_big: false,
            probed: false,
            outrun: 0,
            manifest_after: Duration::ZERO,
            last_failure: None,
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

    /// It delivered a chunk that verified.
    pub fn proven(&self) -> bool {
        self.stats.verified_bytes > 0
    }

    pub fn has_room(&self, now: Duration) -> bool {
        self.is_live() && self.retry_at <= now && self.in_flight < self.window()
    }

    /// The order in which sources are offered work, lowest first: proven sources by the
    /// expected time until one more request would be answered (smoothed round trip of its
    /// verified chunks × (in flight + 1) / window), then unproven sources by how much they
    /// have in flight (so every unproven source is asked for something before any is
    /// asked for more).
    pub fn rank(&self) -> (u8, f64) {
        if self.proven() {
            let rtt = self.srtt.map_or(0.0, |d| d.as_secs_f64());
            (0, rtt * f64::from(self.in_flight + 1) / self.window)
        } else {
            (1, f64::from(self.in_flight))
        }
    }

    /// A chunk it sent `rtt` after its request verified: its round trip counts, its
    /// window adapts, its debt is paid down.
    pub fn on_verified(&mut self, rtt: Duration, len: u64, tolerance: f64) {
        self.stats.verified_bytes += len;
        self.debt = (self.debt - 0.5).max(0.0);
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

    /// A transient failure: halve the window and back off exponentially; add to the debt
    /// (twice for an answer cut in the middle).
    pub fn on_transient(
        &mut self,
        now: Duration,
        kind: FailureKind,
        base: Duration,
        max: Duration,
    ) {
        self.failures += 1;
        self.last_failure = Some(kind);
        self.debt += if kind == FailureKind::Truncated { 2.0 } else { 1.0 };
        self.stats.transient_failures += 1;
        self.window = (self.window / 2.0).max(1.0);
        let shift = (self.failures - 1).min(16);
        self.retry_at = now + (base * (1u32 << shift)).min(max);
    }

    /// Smoothed round trip of its verified chunks.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
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
