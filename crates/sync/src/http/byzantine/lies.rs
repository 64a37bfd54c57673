//! What a liar answers to each request: honestly, a false but well-formed response, or a
//! raw lie played on the socket ([`super::raw`]). Manifests a lie builds from the true
//! one (`huge-manifest`, `gzip-manifest`) are built once per version and shared.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use bavl_core::{Digest, Snapshot, Tree};

use super::raw::Raw;
use super::Byzantine;
use crate::http::server::{Objects, Response, Target, CACHE_LISTING, CACHE_MANIFEST};
use crate::protocol::{Listing, Manifest, DEFAULT_MAX_MANIFEST_BYTES, MIN_CHUNK_LEN};

/// What the liar makes of a request.
pub(in crate::http) enum Answer {
    /// Answer it honestly.
    Honest,
    /// Send this response (a lie).
    Respond(Response),
    /// Do this on the socket, then close it.
    Raw(Raw),
}

/// A server's liar: its kind, for `other-version` on a server holding one tree the other
/// tree it serves chunks of (built once, on first use), the manifests built from the true
/// ones, and the chunk requests seen (`reset-truncate` cuts every other one).
pub(in crate::http) struct Liar {
    pub(super) kind: Byzantine,
    fallback: OnceLock<Option<Snapshot>>,
    built: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    pub(super) chunk_requests: AtomicU64,
}

impl Liar {
    pub fn new(kind: Byzantine) -> Liar {
        Liar {
            kind,
            fallback: OnceLock::new(),
            built: Mutex::default(),
            chunk_requests: AtomicU64::new(0),
        }
    }

    /// The answer to a `GET` of `path` (parsed as `target`).
    pub fn answer(&self, objects: &dyn Objects, target: Option<Target>, path: &str) -> Answer {
        let lie = match target {
            Some(Target::Chunk(root, index)) => self.chunk_lie(objects, &root, index, path),
            Some(Target::Manifest(v)) => self.manifest_lie(objects, v),
            Some(Target::Listing) if self.kind == Byzantine::LyingManifest => {
                lying_listing(objects)
            }
            _ => None,
        };
        lie.unwrap_or(Answer::Honest)
    }

    /// `None` (answer honestly) when the chunk is not held or cannot be read, or the kind
    /// does not lie on chunks.
    fn chunk_lie(
        &self,
        objects: &dyn Objects,
        root: &Digest,
        i: u64,
        path: &str,
    ) -> Option<Answer> {
        let not_held = || Some(Answer::Respond(Response::error(404, "not held")));
        match self.kind {
            // Whether the chunk is held or not: these never serve one.
            Byzantine::NoChunkZero if i == 0 => return Some(Answer::Raw(Raw::Stall)),
            Byzantine::NoChunkZero | Byzantine::HugeManifest => return not_held(),
            _ => {}
        }
        let chunk = objects.chunk(root, i).ok()??;
        let respond = |body| Some(Answer::Respond(Response::chunk(body)));
        let raw = |r| Some(Answer::Raw(r));
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
                c.extend_from_slice(&[0xA5; super::OVERLONG_EXTRA]);
                respond(c)
            }
            Byzantine::Endless => raw(Raw::Endless),
            Byzantine::Stall => raw(Raw::Stall),
            Byzantine::Trickle | Byzantine::DripBody => raw(Raw::Trickle(chunk)),
            Byzantine::EndlessTrailers => raw(Raw::EndlessTrailers(chunk)),
            Byzantine::Slow => raw(Raw::Slow(chunk)),
            Byzantine::HttpError => {
                Some(Answer::Respond(Response::error(500, "internal server error")))
            }
            Byzantine::Garbage => raw(Raw::Garbage(i)),
            Byzantine::RedirectLoop => {
                let mut r = Response::error(302, "found");
                r.location = Some(path.to_string());
                Some(Answer::Respond(r))
            }
            // `reset-truncate` acts before the request is read (`Liar::preempt`); the
            // others lie elsewhere, or only in how a response is written.
            _ => None,
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
            Some(Answer::Respond(Response::new(200, "application/json", CACHE_MANIFEST, body)))
        };
        let decode = |v| {
            let body = objects.manifest(v).ok()??;
            serde_json::from_slice::<Manifest>(&body).ok()
        };
        match self.kind {
            Byzantine::LyingManifest => {
                let mut m = decode(version)?;
                let last = m.chunk_sizes.last().copied().unwrap_or(MIN_CHUNK_LEN);
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
            Byzantine::HugeManifest => {
                let body = self.built(version, || Some(huge_manifest(&decode(version)?)))?;
                Some(Answer::Respond(manifest_response(body)))
            }
            Byzantine::GzipManifest => {
                let body = self.built(version, || gzip(&objects.manifest(version).ok()??))?;
                let mut r = manifest_response(body);
                r.encoding = Some("gzip");
                Some(Answer::Respond(r))
            }
            _ => None,
        }
    }

    /// The manifest body `make` builds for `version`, built once.
    fn built(&self, version: u64, make: impl FnOnce() -> Option<Vec<u8>>) -> Option<Arc<Vec<u8>>> {
        if let Some(b) = self.built.lock().unwrap_or_else(|e| e.into_inner()).get(&version) {
            return Some(b.clone());
        }
        let body = Arc::new(make()?);
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        Some(built.entry(version).or_insert(body).clone())
    }
}

fn manifest_response(body: Arc<Vec<u8>>) -> Response {
    let mut r = Response::new(200, "application/json", CACHE_MANIFEST, Vec::new());
    r.body = body;
    r
}

/// The gzip of `body` (`None` only if compressing into memory failed).
pub(super) fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(body).ok()?;
    enc.finish().ok()
}

/// A manifest of `honest`'s format, version, root and capacity claiming a tree of as many
/// smallest chunks as fit in [`DEFAULT_MAX_MANIFEST_BYTES`], with a key count within the
/// bounds a decoder checks: well formed, and false.
pub(super) fn huge_manifest(honest: &Manifest) -> Vec<u8> {
    let render = |count: u64| {
        let keys = count.saturating_mul(u64::from(honest.capacity) / 2).max(count);
        let head = format!(
            "{{\"format\":{},\"version\":{},\"root\":\"{}\",\"capacity\":{},\
             \"chunk_count\":{count},\"key_count\":{keys},\"chunk_sizes\":[",
            honest.format, honest.version, honest.root, honest.capacity
        );
        let size = MIN_CHUNK_LEN.to_string();
        let mut body = Vec::with_capacity(head.len() + (size.len() + 1) * count as usize + 2);
        body.extend_from_slice(head.as_bytes());
        for j in 0..count {
            if j > 0 {
                body.push(b',');
            }
            body.extend_from_slice(size.as_bytes());
        }
        body.extend_from_slice(b"]}");
        body
    };
    // Each size takes 3 bytes ("11,"); the head about 200: a first guess, then filled
    // up to the limit.
    let limit = DEFAULT_MAX_MANIFEST_BYTES;
    let guess = (limit - 256) / 3;
    let len = render(guess).len() as u64;
    let mut count = guess + limit.saturating_sub(len) / 3;
    loop {
        let body = render(count);
        if body.len() as u64 <= limit || count == 0 {
            return body;
        }
        count -= (body.len() as u64 - limit).div_ceil(3);
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
    Some(Answer::Respond(Response::new(200, "application/json", CACHE_LISTING, body)))
}

/// A small tree of its own at `capacity`: 8 chunks' worth of keys no real state has.
fn other_tree(capacity: u32) -> Option<Snapshot> {
    let mut t = Tree::with_capacity(capacity).ok()?;
    for j in 0..u64::from(capacity) * 8 {
        t.insert(format!("other tree {j:08}").as_bytes(), b"not the state you want").ok()?;
    }
    Some(t.snapshot())
}

pub(super) fn flip_byte(mut chunk: Vec<u8>, index: u64) -> Vec<u8> {
    if !chunk.is_empty() {
        let at = ((index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % chunk.len();
        chunk[at] ^= 0x20;
    }
    chunk
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::http::server::Catalog;

    fn catalog() -> (Arc<Catalog>, Snapshot) {
        let mut t = Tree::with_capacity(16).unwrap();
        for i in 0u32..500 {
            t.insert(&i.to_be_bytes(), b"value").unwrap();
        }
        let snap = t.snapshot();
        let c = Catalog::new();
        c.publish(3, snap.clone());
        (c, snap)
    }

    fn respond(a: Answer) -> Response {
        match a {
            Answer::Respond(r) => r,
            Answer::Honest => panic!("honest"),
            Answer::Raw(_) => panic!("raw"),
        }
    }

    #[test]
    fn flipped_bytes_differ() {
        let c = vec![1u8; 100];
        assert_ne!(flip_byte(c.clone(), 3), c);
        assert!(flip_byte(Vec::new(), 3).is_empty());
    }

    #[test]
    fn huge_manifest_decodes_within_the_limit_and_lies() {
        let (c, snap) = catalog();
        let liar = Liar::new(Byzantine::HugeManifest);
        let r = respond(liar.answer(&*c, Some(Target::Manifest(3)), ""));
        assert_eq!(r.status, 200);
        assert!(r.body.len() as u64 <= DEFAULT_MAX_MANIFEST_BYTES, "{}", r.body.len());
        assert!(r.body.len() as u64 > DEFAULT_MAX_MANIFEST_BYTES - 16, "{}", r.body.len());
        let m = Manifest::decode(&r.body, 3, &snap.root_hash()).expect("well formed");
        assert!(m.chunk_count > 2_700_000, "{}", m.chunk_count);
        assert_ne!(m.chunk_count, snap.chunk_count());
        // Built once: the same body again.
        let again = respond(liar.answer(&*c, Some(Target::Manifest(3)), ""));
        assert!(Arc::ptr_eq(&r.body, &again.body));
        let chunk = respond(liar.answer(&*c, Some(Target::Chunk(snap.root_hash(), 0)), ""));
        assert_eq!(chunk.status, 404);
    }

    #[test]
    fn gzip_manifest_is_the_true_manifest_compressed() {
        let (c, _) = catalog();
        let r =
            respond(Liar::new(Byzantine::GzipManifest).answer(&*c, Some(Target::Manifest(3)), ""));
        assert_eq!(r.encoding, Some("gzip"));
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..]).read_to_end(&mut plain).unwrap();
        assert_eq!(plain, *c.manifest_json(3).unwrap().unwrap());
        assert!(matches!(
            Liar::new(Byzantine::GzipManifest).answer(&*c, Some(Target::Listing), ""),
            Answer::Honest
        ));
    }

    #[test]
    fn no_chunk_zero_holds_chunk_0_and_has_no_other() {
        let (c, snap) = catalog();
        let liar = Liar::new(Byzantine::NoChunkZero);
        let root = snap.root_hash();
        assert!(matches!(
            liar.answer(&*c, Some(Target::Chunk(root, 0)), ""),
            Answer::Raw(Raw::Stall)
        ));
        assert_eq!(respond(liar.answer(&*c, Some(Target::Chunk(root, 1)), "")).status, 404);
        assert!(matches!(liar.answer(&*c, Some(Target::Manifest(3)), ""), Answer::Honest));
    }

    #[test]
    fn delaying_kinds_send_the_true_chunk() {
        let (c, snap) = catalog();
        let root = snap.root_hash();
        let truth = snap.export_chunk(2).unwrap();
        for kind in
            [Byzantine::DripBody, Byzantine::Trickle, Byzantine::Slow, Byzantine::EndlessTrailers]
        {
            match Liar::new(kind).answer(&*c, Some(Target::Chunk(root, 2)), "") {
                Answer::Raw(Raw::Trickle(b) | Raw::Slow(b) | Raw::EndlessTrailers(b)) => {
                    assert_eq!(b, truth, "{kind}")
                }
                _ => panic!("{kind}: not a raw answer with the chunk"),
            }
        }
        for kind in [Byzantine::DripHead, Byzantine::EarlyHints, Byzantine::ResetTruncate] {
            let a = Liar::new(kind).answer(&*c, Some(Target::Chunk(root, 2)), "");
            assert!(matches!(a, Answer::Honest), "{kind}");
        }
    }
}
