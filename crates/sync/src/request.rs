//! Requests the syncer asks the transport to make, how they fail, and the body guard
//! every transport applies while reading a response.
//!
//! The syncer decides what to ask whom, with a byte limit, a deadline and a minimum rate;
//! the transport makes the request and reads the body through a [`BodyGuard`], which
//! turns an over-long, endless, stalled or trickling body into a [`FailureKind`] the
//! moment it shows, so a response never holds more than its limit in memory.

use std::fmt;
use std::time::Duration;

use bavl_core::Digest;

use crate::protocol;

/// A source (peer or mirror), numbered in the order it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceId(pub u32);

/// A request, unique for the lifetime of a syncer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The manifest of the syncer's version.
    Manifest,
    /// Chunk `index` of the syncer's root.
    Chunk(u64),
}

/// A request for the transport to make. Times are the caller's clock, as given to the
/// syncer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub source: SourceId,
    pub want: Want,
    /// The path to `GET` below the source's base URL.
    pub path: String,
    /// The body may not exceed this many bytes: more is [`FailureKind::TooLong`].
    pub limit: u64,
    /// When it was sent.
    pub sent: Duration,
    /// The syncer cancels the request at this time (a timeout).
    pub deadline: Duration,
    /// After `grace`, the body must have arrived at `min_rate` bytes per second on average
    /// since `sent`, or it is [`FailureKind::Stalled`].
    pub min_rate: u64,
    pub grace: Duration,
}

impl Request {
    pub(crate) fn path_for(want: Want, version: u64, root: &Digest) -> String {
        match want {
            Want::Manifest => protocol::manifest_path(version),
            Want::Chunk(i) => protocol::chunk_path(root, i),
        }
    }

    /// The guard to read this request's body through.
    pub fn guard(&self) -> BodyGuard {
        BodyGuard {
            sent: self.sent,
            limit: self.limit,
            min_rate: self.min_rate,
            grace: self.grace,
            received: 0,
            framing: 0,
            wire: 0,
        }
    }
}

/// How a request failed, as the transport reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No complete answer by the deadline.
    Timeout,
    /// The body arrived below the minimum rate after the grace period (stalled or
    /// trickling).
    Stalled,
    /// The body exceeded the request's limit (over-long or endless).
    TooLong,
    /// A status other than 200 (after following at most the transport's redirect limit).
    Http(u16),
    /// More redirects than the transport follows (a loop).
    TooManyRedirects,
    /// Not an HTTP response: garbage, a header over its limit, a bad chunked encoding,
    /// or a redirect without a usable `Location`.
    Malformed,
    /// Connection refused or reset, DNS failure, TLS error: the network, not the source.
    Transport,
    /// The connection ended (closed or reset) in the middle of a response, after its
    /// head: transient, but it weighs twice in the source's failure debt (a source that
    /// cuts every other answer is dropped).
    Truncated,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::Timeout => write!(f, "timed out"),
            FailureKind::Stalled => write!(f, "stalled below the minimum rate"),
            FailureKind::TooLong => write!(f, "body over its limit"),
            FailureKind::Http(s) => write!(f, "HTTP status {s}"),
            FailureKind::TooManyRedirects => write!(f, "too many redirects"),
            FailureKind::Malformed => write!(f, "malformed HTTP response"),
            FailureKind::Transport => write!(f, "transport error"),
            FailureKind::Truncated => write!(f, "connection ended in the middle of the response"),
        }
    }
}

/// What a failure says about its source (the peer policy, `docs/sync-protocol.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Retry later with backoff; drop the source after too many in a row.
    Transient,
    /// The source does not hold what was asked: drop it, no ban.
    Unavailable,
    /// An honest source never does this: ban it.
    Invalid,
}

impl FailureKind {
    /// The peer policy for this failure.
    pub fn verdict(self) -> Verdict {
        match self {
            FailureKind::Timeout | FailureKind::Transport | FailureKind::Truncated => {
                Verdict::Transient
            }
            FailureKind::Http(408 | 429) => Verdict::Transient,
            FailureKind::Http(s) if (500..600).contains(&s) => Verdict::Transient,
            FailureKind::Http(404 | 410) => Verdict::Unavailable,
            FailureKind::Http(_)
            | FailureKind::Stalled
            | FailureKind::TooLong
            | FailureKind::TooManyRedirects
            | FailureKind::Malformed => Verdict::Invalid,
        }
    }
}

/// Enforces a request's limits and minimum rate on the whole response, from its first
/// byte to its last. Pure: the caller reports bytes and time.
///
/// Every byte read off the wire counts towards the rate ([`BodyGuard::on_wire`]), whatever
/// part of the response it belongs to (status line, headers, interim responses, chunk
/// framing, body, trailers), so a response dripped anywhere is `Stalled` after the grace.
/// The body may not exceed the request's limit ([`BodyGuard::on_bytes`]) and everything
/// else, the framing, may not exceed [`BodyGuard::framing_limit`] ([`BodyGuard::on_framing`]):
/// the whole response is bounded in bytes as well as in time.
#[derive(Debug, Clone)]
pub struct BodyGuard {
    sent: Duration,
    limit: u64,
    min_rate: u64,
    grace: Duration,
    received: u64,
    framing: u64,
    wire: u64,
}

/// Framing allowed beside a body of `limit` bytes: 16 KiB for heads (interim ones too)
/// and trailers — one head of the largest size the client reads, or many ordinary ones —
/// and an eighth of the body for chunk-size lines. (64 KiB at first: 48 sources sending
/// endless trailers a few bytes per write cost a 200k-key sync 1.5 s of reading.)
pub fn framing_limit(limit: u64) -> u64 {
    (16 << 10) + limit / 8
}

impl BodyGuard {
    /// A guard of `limit` body bytes (and the framing beside them) with no minimum rate,
    /// for a plain request bounded by a deadline instead (`http::get`).
    pub fn plain(limit: u64) -> BodyGuard {
        let (sent, grace) = (Duration::ZERO, Duration::ZERO);
        BodyGuard { sent, limit, min_rate: 0, grace, received: 0, framing: 0, wire: 0 }
    }

    /// `n` more body bytes. Fails as soon as the body exceeds the limit (the caller must
    /// stop reading and drop what it holds). Counts for the limit only: the caller reports
    /// the same bytes to [`BodyGuard::on_wire`] when it reads them (for a transport that
    /// does not tell the two apart, as a simulation, `on_bytes` alone counts them for the
    /// rate too: see [`BodyGuard::on_body_read`]).
    pub fn on_bytes(&mut self, now: Duration, n: u64) -> Result<(), FailureKind> {
        self.received = self.received.saturating_add(n);
        if self.received > self.limit {
            return Err(FailureKind::TooLong);
        }
        self.check(now)
    }

    /// `n` more body bytes read off the wire at once: [`BodyGuard::on_wire`] and
    /// [`BodyGuard::on_bytes`] together.
    pub fn on_body_read(&mut self, now: Duration, n: u64) -> Result<(), FailureKind> {
        self.wire = self.wire.saturating_add(n);
        self.on_bytes(now, n)
    }

    /// `n` more bytes that are not body (heads, chunk framing, trailers). Fails when the
    /// framing exceeds [`framing_limit`].
    pub fn on_framing(&mut self, now: Duration, n: u64) -> Result<(), FailureKind> {
        self.framing = self.framing.saturating_add(n);
        if self.framing > framing_limit(self.limit) {
            return Err(FailureKind::TooLong);
        }
        self.check(now)
    }

    /// `n` more bytes read off the wire (any part of the response): checks the rate.
    pub fn on_wire(&mut self, now: Duration, n: u64) -> Result<(), FailureKind> {
        self.wire = self.wire.saturating_add(n);
        self.check(now)
    }

    /// Checks the rate at `now`: after the grace, the bytes read off the wire since the
    /// request was sent must average `min_rate` per second. Call it on every read and at
    /// least once a second while waiting for bytes.
    pub fn check(&self, now: Duration) -> Result<(), FailureKind> {
        let elapsed = now.saturating_sub(self.sent);
        if elapsed < self.grace {
            return Ok(());
        }
        // wire / elapsed < min_rate, without division.
        let need = u128::from(self.min_rate) * elapsed.as_millis();
        if u128::from(self.wire.max(self.received)) * 1000 < need {
            return Err(FailureKind::Stalled);
        }
        Ok(())
    }

    /// Body bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The body's limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            id: RequestId(1),
            source: SourceId(0),
            want: Want::Chunk(0),
            path: String::new(),
            limit: 100,
            sent: Duration::from_secs(10),
            deadline: Duration::from_secs(40),
            min_rate: 10,
            grace: Duration::from_secs(5),
        }
    }

    #[test]
    fn guard_limit_and_rate() {
        let s = Duration::from_secs;
        let mut g = req().guard();
        assert_eq!(g.check(s(14)), Ok(()));
        assert_eq!(g.check(s(15)), Err(FailureKind::Stalled));
        assert_eq!(g.on_bytes(s(15), 50), Ok(()));
        assert_eq!(g.check(s(15)), Ok(()));
        assert_eq!(g.check(s(16)), Err(FailureKind::Stalled), "50 B in 6 s is below 10 B/s");
        assert_eq!(g.on_bytes(s(16), 50), Ok(()));
        assert_eq!(g.on_bytes(s(16), 1), Err(FailureKind::TooLong));
    }

    #[test]
    fn guard_counts_every_wire_byte_for_the_rate_and_bounds_the_framing() {
        let s = Duration::from_secs;
        let mut g = req().guard();
        // A head dripped: wire bytes, no body; judged by the rate like a body.
        assert_eq!(g.on_wire(s(14), 40), Ok(()));
        assert_eq!(g.on_framing(s(14), 40), Ok(()));
        assert_eq!(g.check(s(14)), Ok(()), "within the grace");
        assert_eq!(g.check(s(15)), Err(FailureKind::Stalled), "40 B in 5 s is below 10 B/s");
        // Framing beyond its limit fails, whatever the rate.
        let mut g = req().guard();
        let cap = framing_limit(100);
        assert_eq!(g.on_framing(s(11), cap), Ok(()));
        assert_eq!(g.on_framing(s(11), 1), Err(FailureKind::TooLong));
    }

    #[test]
    fn verdicts() {
        assert_eq!(FailureKind::Http(503).verdict(), Verdict::Transient);
        assert_eq!(FailureKind::Http(404).verdict(), Verdict::Unavailable);
        assert_eq!(FailureKind::Http(418).verdict(), Verdict::Invalid);
        assert_eq!(FailureKind::TooManyRedirects.verdict(), Verdict::Invalid);
        assert_eq!(FailureKind::Timeout.verdict(), Verdict::Transient);
    }
}
