//! Byzantine serving, a test facility: a [`super::Server`] that lies in one fixed way
//! (`bavl-harness serve-liar --byzantine KIND`), so the peer policy of
//! `docs/sync-protocol.md` §5 can be exercised against real processes on real sockets.
//!
//! Each kind tells its lie where it reaches the syncing node: the body lies
//! (`wrong-bytes` … `redirect-loop`) on every chunk request, with honest listings and
//! manifests (so the client does ask this source for chunks); the manifest lies
//! (`lying-manifest`, `wrong-version`) on the listing and manifests, with honest chunks.
//! The adversarial kinds of `docs/sync-adversarial.md` (`drip-head` … `reset-truncate`)
//! attack the client's progress rather than its verification: they delay, hold or cut
//! answers, or answer in legal but unusual ways (`early-hints`, `gzip-manifest`, `slow`
//! are honest). Everything else is answered as an honest server would, and a path the
//! server does not hold is still `404`.
//!
//! [`lies`] decides what a request gets; [`raw`] plays the lies that are not one
//! well-formed response on the socket, and the ones that change how every response is
//! written (`drip-head`, `early-hints`) or that must act before the request is read
//! (`reset-truncate`).

mod lies;
mod raw;
#[cfg(test)]
mod socket_tests;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub(super) use lies::{Answer, Liar};

/// How a Byzantine server lies. Names (`Display`, `FromStr`) are the kebab-case ones of
/// `bavl-harness serve-liar --byzantine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Byzantine {
    /// Each chunk with one byte flipped (at a position that varies with the index).
    WrongBytes,
    /// Chunk `i + 1` for chunk `i` (chunk 0 for the last one).
    WrongIndex,
    /// Chunk `i` of another tree the server holds (another retained version, or else a
    /// small tree of its own): a valid chunk, of the wrong root.
    OtherVersion,
    /// The first two thirds of each chunk, with a `Content-Length` that says so.
    Truncate,
    /// Each chunk followed by [`OVERLONG_EXTRA`] more bytes, `Content-Length` included.
    Overlong,
    /// A chunked-encoding body that never ends.
    Endless,
    /// Reads the chunk request, then never answers (until the client hangs up).
    Stall,
    /// The right chunk, one byte every [`TRICKLE_INTERVAL`].
    Trickle,
    /// `500 Internal Server Error` for every chunk (transient by the policy: the source is
    /// retried with backoff, then dropped, never banned).
    HttpError,
    /// Non-HTTP bytes, then the connection closed.
    Garbage,
    /// `302` to the very path asked, forever.
    RedirectLoop,
    /// Manifests claiming one chunk (and one key) more than the tree has; a listing with
    /// wrong roots and counts.
    LyingManifest,
    /// The manifest of another version than the one asked (or the asked one relabelled).
    WrongVersion,
    /// Every response (listing, manifest, chunk) honest, its head sent one byte every
    /// [`TRICKLE_INTERVAL`], then its body at once.
    DripHead,
    /// Chunk responses: the head at once, then the body one byte every
    /// [`TRICKLE_INTERVAL`] (the same bytes on the wire as `trickle`, under the name of
    /// the adversarial case).
    DripBody,
    /// Chunk responses in chunked encoding: the right chunk, the last (zero-size) chunk,
    /// then trailer lines without end, [`TRAILER_WRITE`] bytes per write.
    EndlessTrailers,
    /// The true manifest, fast; chunk 0 never answered (held like `stall`); every other
    /// chunk `404`.
    NoChunkZero,
    /// A manifest that decodes (format 1, the version and root asked) but claims a false
    /// tree as large as the default 8 MiB manifest limit allows (about 2.8M chunk sizes);
    /// every chunk `404`.
    HugeManifest,
    /// Honest but slow: the right chunks at [`SLOW_RATE`] bytes per second (above the
    /// client's default minimum of 16 KiB/s).
    Slow,
    /// Honest: a `103 Early Hints` interim response before every real one.
    EarlyHints,
    /// Honest: manifests sent with `Content-Encoding: gzip` (a real gzip of the true
    /// manifest), whatever the request's `Accept-Encoding`.
    GzipManifest,
    /// Every other chunk response: the head with the right `Content-Length`, half the
    /// body, then a TCP reset.
    ResetTruncate,
}

/// Bytes an `overlong` chunk carries beyond the true chunk.
pub const OVERLONG_EXTRA: usize = 64;
/// Time between two bytes of a `trickle` or `drip-body` body, or of a `drip-head` head.
pub const TRICKLE_INTERVAL: Duration = Duration::from_millis(100);
/// How long a `stall` connection is held at most.
pub const STALL_MAX: Duration = Duration::from_secs(3600);
/// Bytes a `slow` server sends per second: 20 KiB/s, above the client's 16 KiB/s minimum.
pub const SLOW_RATE: usize = 20 << 10;
/// Bytes per write of the endless trailer section of `endless-trailers`.
pub const TRAILER_WRITE: usize = 3;
/// The interim response an `early-hints` server sends before each real one.
pub const EARLY_HINTS: &[u8] = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n";

impl Byzantine {
    /// Every kind: the lies of `docs/sync-protocol.md` §9 ([`Byzantine::CLASSIC`]), then
    /// the adversarial kinds of `docs/sync-adversarial.md` ([`Byzantine::ADVERSARIAL`]).
    pub const ALL: [Byzantine; 22] = [
        Byzantine::WrongBytes,
        Byzantine::WrongIndex,
        Byzantine::OtherVersion,
        Byzantine::Truncate,
        Byzantine::Overlong,
        Byzantine::Endless,
        Byzantine::Stall,
        Byzantine::Trickle,
        Byzantine::HttpError,
        Byzantine::Garbage,
        Byzantine::RedirectLoop,
        Byzantine::LyingManifest,
        Byzantine::WrongVersion,
        Byzantine::DripHead,
        Byzantine::DripBody,
        Byzantine::EndlessTrailers,
        Byzantine::NoChunkZero,
        Byzantine::HugeManifest,
        Byzantine::Slow,
        Byzantine::EarlyHints,
        Byzantine::GzipManifest,
        Byzantine::ResetTruncate,
    ];

    /// The lies of `docs/sync-protocol.md` §9: each is banned (or, `http-error`, dropped)
    /// at its first answer by the policy of §5.
    pub const CLASSIC: [Byzantine; 13] = {
        let mut k = [Byzantine::WrongBytes; 13];
        let mut i = 0;
        while i < 13 {
            k[i] = Byzantine::ALL[i];
            i += 1;
        }
        k
    };

    /// The kinds of `docs/sync-adversarial.md`: attacks on progress, and honest servers
    /// answering in legal but unusual ways.
    pub const ADVERSARIAL: [Byzantine; 9] = {
        let mut k = [Byzantine::WrongBytes; 9];
        let mut i = 0;
        while i < 9 {
            k[i] = Byzantine::ALL[13 + i];
            i += 1;
        }
        k
    };

    /// The kind's name, as `bavl-harness serve-liar --byzantine` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Byzantine::WrongBytes => "wrong-bytes",
            Byzantine::WrongIndex => "wrong-index",
            Byzantine::OtherVersion => "other-version",
            Byzantine::Truncate => "truncate",
            Byzantine::Overlong => "overlong",
            Byzantine::Endless => "endless",
            Byzantine::Stall => "stall",
            Byzantine::Trickle => "trickle",
            Byzantine::HttpError => "http-error",
            Byzantine::Garbage => "garbage",
            Byzantine::RedirectLoop => "redirect-loop",
            Byzantine::LyingManifest => "lying-manifest",
            Byzantine::WrongVersion => "wrong-version",
            Byzantine::DripHead => "drip-head",
            Byzantine::DripBody => "drip-body",
            Byzantine::EndlessTrailers => "endless-trailers",
            Byzantine::NoChunkZero => "no-chunk-zero",
            Byzantine::HugeManifest => "huge-manifest",
            Byzantine::Slow => "slow",
            Byzantine::EarlyHints => "early-hints",
            Byzantine::GzipManifest => "gzip-manifest",
            Byzantine::ResetTruncate => "reset-truncate",
        }
    }

    /// Whether the lie is told on manifests (and the listing) rather than on chunks.
    pub fn lies_on_manifests(self) -> bool {
        matches!(self, Byzantine::LyingManifest | Byzantine::WrongVersion | Byzantine::HugeManifest)
    }

    /// Whether the server is in fact honest: every answer it gives is true and legal HTTP
    /// (`slow` at 20 KiB/s, `early-hints`, `gzip-manifest`). A client must not ban it.
    pub fn is_honest(self) -> bool {
        matches!(self, Byzantine::Slow | Byzantine::EarlyHints | Byzantine::GzipManifest)
    }
}

impl fmt::Display for Byzantine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`Byzantine`] kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown Byzantine kind {0:?} (one of: {list})", list = Byzantine::ALL.map(Byzantine::name).join(", "))]
pub struct UnknownKind(pub String);

impl FromStr for Byzantine {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Byzantine::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownKind(s.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in Byzantine::ALL {
            assert_eq!(k.name().parse::<Byzantine>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        let e = "honest".parse::<Byzantine>().unwrap_err();
        assert!(e.to_string().contains("wrong-bytes"), "{e}");
        assert!(e.to_string().contains("reset-truncate"), "{e}");
    }

    #[test]
    fn classic_and_adversarial_partition_all() {
        let mut both: Vec<Byzantine> = Byzantine::CLASSIC.to_vec();
        both.extend(Byzantine::ADVERSARIAL);
        assert_eq!(both, Byzantine::ALL.to_vec());
        assert_eq!(Byzantine::CLASSIC[12], Byzantine::WrongVersion);
        assert_eq!(Byzantine::ADVERSARIAL[0], Byzantine::DripHead);
        let honest: Vec<_> = Byzantine::ALL.into_iter().filter(|k| k.is_honest()).collect();
        assert_eq!(honest, [Byzantine::Slow, Byzantine::EarlyHints, Byzantine::GzipManifest]);
    }
}
