//! Byzantine serving, a test facility: a [`super::Server`] that lies in one fixed way
//! (`bavl serve --byzantine KIND`), so the peer policy of `docs/sync-protocol.md` §5 can
//! be exercised against real processes on real sockets.
//!
//! Each kind tells its lie where it reaches the syncing node: the body lies
//! (`wrong-bytes` … `redirect-loop`) on every chunk request, with honest listings and
//! manifests (so the client does ask this source for chunks); the manifest lies
//! (`lying-manifest`, `wrong-version`) on the listing and manifests, with honest chunks.
//! Everything else is answered as an honest server would, and a path the server does not
//! hold is still `404`.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bavl_core::{Digest, Snapshot, Tree};

use super::server::{Objects, Response, Target};
use crate::protocol::{Listing, Manifest};

/// How a Byzantine server lies. Names (`Display`, `FromStr`) are the kebab-case ones of
/// `bavl serve --byzantine`.
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
}

/// Bytes an `overlong` chunk carries beyond the true chunk.
pub const OVERLONG_EXTRA: usize = 64;
/// Time between two bytes of a `trickle` body.
pub const TRICKLE_INTERVAL: Duration = Duration::from_millis(100);
/// How long a `stall` connection is held at most.
pub const STALL_MAX: Duration = Duration::from_secs(3600);

impl Byzantine {
    /// Every kind, in the order of `docs/sync-protocol.md`.
    pub const ALL: [Byzantine; 13] = [
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
    ];

    /// The kind's name, as `bavl serve --byzantine` takes it.
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
        }
    }

    /// Whether the lie is told on manifests (and the listing) rather than on chunks.
    pub fn lies_on_manifests(self) -> bool {
        matches!(self, Byzantine::LyingManifest | Byzantine::WrongVersion)
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

/// What the liar makes of a request.
pub(super) enum Answer {
    /// Answer it honestly.
    Honest,
    /// Send this response (a lie).
    Respond(Response),
    /// Do this on the socket, then close it.
    Raw(Raw),
}

/// Lies that are not a well-formed response.
pub(super) enum Raw {
    Stall,
    Trickle(Vec<u8>),
    Endless,
    Garbage(u64),
}

/// A server's liar: its kind and, for `other-version` on a server holding one tree, the
/// other tree it serves chunks of (built once, on first use).
pub(super) struct Liar {
    kind: Byzantine,
    fallback: OnceLock<Option<Snapshot>>,
}

impl Liar {
    pub fn new(kind: Byzantine) -> Liar {
        Liar { kind, fallback: OnceLock::new() }
    }

    /// The answer to a `GET` of `path` (parsed as `target`).
    pub fn answer(&self, objects: &dyn Objects, target: Option<Target>, path: &str) -> Answer {
        let lie = match (self.kind.lies_on_manifests(), target) {
            (false, Some(Target::Chunk(root, index))) => {
                self.chunk_lie(objects, &root, index, path)
            }
            (true, Some(Target::Manifest(v))) => self.manifest_lie(objects, v),
            (true, Some(Target::Listing)) if self.kind == Byzantine::LyingManifest => {
                lying_listing(objects)
            }
            _ => None,
        };
        lie.unwrap_or(Answer::Honest)
    }

    /// `None` (answer honestly) when the chunk is not held or cannot be read.
    fn chunk_lie(
        &self,
        objects: &dyn Objects,
        root: &Digest,
        i: u64,
        path: &str,
    ) -> Option<Answer> {
        let chunk = objects.chunk(root, i).ok()??;
        let respond = |body| Some(Answer::Respond(Response::chunk(body)));
        match self.kind {
            Byzantine::WrongBytes => respond(flip_byte(chunk, i)),
            Byzantine::WrongIndex => {
                let next = objects.chunk(root, i + 1).ok().flatten();
                let wrapped = || objects.chunk(root, 0).ok().flatten().filter(|_| i != 0);
                // A tree of one chunk has no other index: its chunk with a byte flipped.
                respond(next.or_else(wrapped).unwrap_or_else(|| flip_byte(chunk, i)))
            }
            Byzantine::OtherVersion => respond(self.other_chunk(objects, root, i, &chunk)),
            Byzantine::Truncate => {
                let mut c = chunk;
                c.truncate(c.len() * 2 / 3);
                respond(c)
            }
            Byzantine::Overlong => {
                let mut c = chunk;
                c.extend_from_slice(&[0xA5; OVERLONG_EXTRA]);
                respond(c)
            }
            Byzantine::Endless => Some(Answer::Raw(Raw::Endless)),
            Byzantine::Stall => Some(Answer::Raw(Raw::Stall)),
            Byzantine::Trickle => Some(Answer::Raw(Raw::Trickle(chunk))),
            Byzantine::HttpError => {
                Some(Answer::Respond(Response::error(500, "internal server error")))
            }
            Byzantine::Garbage => Some(Answer::Raw(Raw::Garbage(i))),
            Byzantine::RedirectLoop => {
                let mut r = Response::error(302, "found");
                r.location = Some(path.to_string());
                Some(Answer::Respond(r))
            }
            Byzantine::LyingManifest | Byzantine::WrongVersion => None,
        }
    }

    /// Chunk `i` (modulo its count) of another tree: another root the server holds, else
    /// the liar's own small tree of the same capacity.
    fn other_chunk(&self, objects: &dyn Objects, root: &Digest, i: u64, chunk: &[u8]) -> Vec<u8> {
        let listing = objects.listing().ok().and_then(|b| Listing::decode(&b).ok());
        let own = hex::encode(root);
        let held = listing.map_or_else(Vec::new, |l| l.snapshots);
        for s in held.iter().filter(|s| s.root != own && s.chunk_count > 0) {
            let Ok(other) = crate::protocol::parse_root(&s.root) else { continue };
            if let Ok(Some(c)) = objects.chunk(&other, i % s.chunk_count) {
                return c;
            }
        }
        let fallback = self.fallback.get_or_init(|| {
            let capacity = bavl_core::verify_chunk::<bavl_core::Sha256>(root, i, chunk).ok()?;
            other_tree(capacity.capacity)
        });
        match fallback {
            Some(t) => t.export_chunk(i % t.chunk_count().max(1)).unwrap_or_default(),
            None => flip_byte(chunk.to_vec(), i),
        }
    }

    fn manifest_lie(&self, objects: &dyn Objects, version: u64) -> Option<Answer> {
        let json = |m: &Manifest| {
            let body = m.to_json();
            Some(Answer::Respond(Response::new(200, "application/json", "max-age=60", body)))
        };
        let decode = |v| {
            let body = objects.manifest(v).ok()??;
            serde_json::from_slice::<Manifest>(&body).ok()
        };
        match self.kind {
            Byzantine::LyingManifest => {
                let mut m = decode(version)?;
                let last = m.chunk_sizes.last().copied().unwrap_or(crate::protocol::MIN_CHUNK_LEN);
                m.chunk_count += 1;
                m.key_count += 1;
                m.chunk_sizes.push(last);
                json(&m)
            }
            Byzantine::WrongVersion => {
                let listing = Listing::decode(&objects.listing().ok()?).ok()?;
                let other = listing.snapshots.iter().map(|s| s.version).find(|&v| v != version);
                match other.and_then(decode) {
                    Some(m) => json(&m),
                    None => {
                        let mut m = decode(version)?;
                        m.version = m.version.wrapping_add(1);
                        json(&m)
                    }
                }
            }
            _ => None,
        }
    }
}

/// A listing whose roots are reversed (another, unheld root) and counts one too many.
fn lying_listing(objects: &dyn Objects) -> Option<Answer> {
    let mut l = Listing::decode(&objects.listing().ok()?).ok()?;
    for s in &mut l.snapshots {
        s.root = s.root.chars().rev().collect();
        s.chunk_count += 1;
    }
    let body = serde_json::to_vec(&l).ok()?;
    Some(Answer::Respond(Response::new(200, "application/json", "no-cache", body)))
}

/// A small tree of its own at `capacity`: 8 chunks' worth of keys no real state has.
fn other_tree(capacity: u32) -> Option<Snapshot> {
    let mut t = Tree::with_capacity(capacity).ok()?;
    for j in 0..u64::from(capacity) * 8 {
        t.insert(format!("other tree {j:08}").as_bytes(), b"not the state you want").ok()?;
    }
    Some(t.snapshot())
}

fn flip_byte(mut chunk: Vec<u8>, index: u64) -> Vec<u8> {
    if !chunk.is_empty() {
        let at = ((index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % chunk.len();
        chunk[at] ^= 0x20;
    }
    chunk
}

impl Raw {
    /// Plays the lie on `s`; the connection is closed afterwards.
    pub fn play(self, s: &mut TcpStream) -> io::Result<()> {
        match self {
            Raw::Stall => {
                // Never answers: holds the connection until the client hangs up.
                s.set_read_timeout(Some(Duration::from_secs(1)))?;
                let start = Instant::now();
                let mut buf = [0u8; 4096];
                while start.elapsed() < STALL_MAX {
                    match s.read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            Raw::Trickle(body) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                     Content-Length: {}\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes())?;
                for b in body {
                    std::thread::sleep(TRICKLE_INTERVAL);
                    s.write_all(&[b])?;
                }
                s.flush()
            }
            Raw::Endless => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";
                s.write_all(head.as_bytes())?;
                let mut frame = b"4000\r\n".to_vec();
                frame.extend_from_slice(&[0x5A; 0x4000]);
                frame.extend_from_slice(b"\r\n");
                // Until the client hangs up (the write fails).
                loop {
                    s.write_all(&frame)?;
                }
            }
            Raw::Garbage(seed) => {
                let mut x = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
                let mut bytes: Vec<u8> = (0..1024)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                bytes[0] = 0; // never "HTTP/"
                bytes.extend_from_slice(b"\r\n\r\n");
                s.write_all(&bytes)?;
                s.flush()
            }
        }
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
    }

    #[test]
    fn flipped_bytes_differ() {
        let c = vec![1u8; 100];
        assert_ne!(flip_byte(c.clone(), 3), c);
        assert!(flip_byte(Vec::new(), 3).is_empty());
    }
}
