//! The syncer's limits and policy knobs, with the defaults `docs/sync-protocol.md` gives.

use std::time::Duration;

use crate::error::OptionsError;
use crate::protocol::DEFAULT_MAX_MANIFEST_BYTES;

/// Limits and policy of a [`crate::Syncer`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Bound on the byte limits of requests in flight plus the bodies awaiting
    /// verification. Must hold one manifest and one chunk at their limits.
    pub max_buffered_bytes: u64,
    /// Largest chunk body accepted. A chunk that every source says is larger cannot be
    /// fetched (the sync fails with `ChunkTooLarge`); a source claiming more for a chunk is
    /// just not asked for it.
    pub max_chunk_bytes: u64,
    /// Largest manifest body accepted.
    pub max_manifest_bytes: u64,
    /// Byte limit of a manifest asked before the chunk count is known: a guess (a larger
    /// manifest is no lie; it is asked again once the count bounds it exactly), so that a
    /// crowd of sources cannot tie up the budget with manifest reservations. Capped at
    /// `max_manifest_bytes` and at an unproven source's share of the budget.
    pub manifest_guess: u64,
    /// Requests in flight at once over all sources: the transport's threads and
    /// connections. Unproven sources together hold at most half of them.
    pub max_in_flight: u32,
    /// A request not answered by then is cancelled (a transient failure).
    pub request_timeout: Duration,
    /// After `grace`, bodies must arrive at `min_rate` bytes per second on average, or the
    /// source is banned for stalling.
    pub min_rate: u64,
    pub grace: Duration,
    /// Concurrency window of a new source, and its ceiling.
    pub initial_window: u32,
    pub max_window: u32,
    /// Round trips within this factor of a source's fastest grow its window; slower ones
    /// shrink it.
    pub latency_tolerance: f64,
    /// How many sources are asked for chunk 0 at once before the chunk count is known.
    pub probe: u8,
    /// Before the chunk count is known, chunks `1..early_chunks` may be asked for too
    /// (a chunk's URL needs only the root and its index): the first round trip then
    /// carries data from every source. `0` asks for chunk 0 alone until it verifies.
    pub early_chunks: u32,
    /// Byte limit of a chunk asked for before its source's manifest came: a guess, so a
    /// body over it is not a lie (the chunk is asked again once a manifest states its
    /// size). Capped at `max_chunk_bytes`.
    pub early_limit: u64,
    /// Consecutive transient failures after which a source is dropped.
    pub max_retries: u32,
    /// Backoff after a transient failure: `base * 2^(n-1)`, at most `max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// When nothing is left to hand out, ask an idle source for a chunk still in flight
    /// elsewhere (at most two copies at once); the first valid answer wins.
    pub speculate: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_buffered_bytes: 128 << 20,
            max_chunk_bytes: 32 << 20,
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            manifest_guess: 256 << 10,
            max_in_flight: 128,
            request_timeout: Duration::from_secs(30),
            min_rate: 16 << 10,
            grace: Duration::from_secs(5),
            initial_window: 6,
            max_window: 32,
            latency_tolerance: 1.25,
            probe: 3,
            early_chunks: 64,
            early_limit: 1 << 20,
            max_retries: 4,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(10),
            speculate: true,
        }
    }
}

impl Options {
    pub(crate) fn check(&self) -> Result<(), OptionsError> {
        let bad = |why| Err(OptionsError::Invalid(why));
        if self.max_buffered_bytes < self.max_chunk_bytes.max(self.max_manifest_bytes) {
            return bad("max_buffered_bytes must hold one chunk and one manifest at their limits");
        }
        if self.max_chunk_bytes < crate::protocol::MIN_CHUNK_LEN || self.max_manifest_bytes == 0 {
            return bad("max_chunk_bytes and max_manifest_bytes must admit a valid body");
        }
        if self.manifest_guess < 1024 || self.max_in_flight < 4 {
            return bad("manifest_guess must be at least 1 KiB and max_in_flight at least 4");
        }
        if self.initial_window == 0 || self.max_window < self.initial_window {
            return bad("windows must satisfy 1 <= initial_window <= max_window");
        }
        if self.early_limit < crate::protocol::MIN_CHUNK_LEN {
            return bad("early_limit must admit a valid chunk");
        }
        if self.probe == 0 || self.probe > 64 {
            return bad("probe must be 1..=64");
        }
        if self.request_timeout.is_zero()
            || self.latency_tolerance.is_nan()
            || self.latency_tolerance < 1.0
        {
            return bad("request_timeout must be positive and latency_tolerance at least 1");
        }
        Ok(())
    }
}
