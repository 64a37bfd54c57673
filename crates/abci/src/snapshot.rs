//! Snapshot format 1: a retained bavl version cut into ABCI chunks that each verify alone.
//!
//! A snapshot of height `H` is the store's version `H` (its root is the app hash that
//! header `H + 1` carries). It is never exported ahead of time: an ABCI chunk ("bundle")
//! is encoded from the retained [`Snapshot`] when a peer asks for it.
//!
//! ```text
//! metadata (56 bytes) = "BAVLSNP1" root[32] chunk_count:u64le per_bundle:u32le capacity:u32le
//! hash                = SHA-256("bavl-abci snapshot v1" || height:u64le || metadata)
//! chunks              = ceil(chunk_count / per_bundle)
//! bundle i            = for j in i*per_bundle .. min((i+1)*per_bundle, chunk_count):
//!                           len:u32le || bavl chunk j (its export, docs/design.md)
//! ```
//!
//! The metadata and hash are untrusted: [`Metadata::decode`] checks only their shape, the
//! restorer checks the root against the light-client-verified app hash, and every bavl
//! chunk against the root. `per_bundle` is a deterministic function of the state (the
//! largest of up to 16 sampled chunks, [`plan`]), so every honest node advertises the
//! same snapshot and CometBFT may fetch each bundle from any of them.

use bavl_core::codec::Reader;
use bavl_core::{ChunkError, DecodeError, Digest, Snapshot};
use bavl_store::{PageLoader, StoreError};
use sha2::{Digest as _, Sha256};

/// The format number in `Snapshot.format`.
pub const FORMAT: u32 = 1;
const MAGIC: &[u8; 8] = b"BAVLSNP1";
const HASH_TAG: &[u8] = b"bavl-abci snapshot v1";
/// The encoded metadata's length.
pub const METADATA_LEN: usize = 56;
/// The size a bundle aims at.
pub const TARGET_BUNDLE_BYTES: u64 = 2 << 20;
/// CometBFT's limits: one ABCI chunk at most 16 MiB, a snapshot at most 100,000 chunks.
pub const MAX_BUNDLE_BYTES: usize = 16 << 20;
pub const MAX_BUNDLES: u64 = 100_000;
const SAMPLES: u64 = 16;

/// A snapshot's description, as carried in `Snapshot.metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    pub root: Digest,
    pub chunk_count: u64,
    pub per_bundle: u32,
    pub capacity: u32,
}

impl Metadata {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(METADATA_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.root);
        out.extend_from_slice(&self.chunk_count.to_le_bytes());
        out.extend_from_slice(&self.per_bundle.to_le_bytes());
        out.extend_from_slice(&self.capacity.to_le_bytes());
        out
    }

    /// Decodes untrusted metadata; checks its shape (not its truth).
    pub fn decode(bytes: &[u8]) -> Result<Metadata, DecodeError> {
        let mut r = Reader::new(bytes);
        if r.take(8)? != MAGIC {
            return Err(DecodeError::BadTag {
                what: "snapshot metadata magic",
                tag: bytes[0],
                at: 0,
            });
        }
        let root = r.digest()?;
        let chunk_count = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        let at = r.position();
        let per_bundle = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
        let capacity = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
        r.finish()?;
        let m = Metadata { root, chunk_count, per_bundle, capacity };
        if per_bundle == 0 || chunk_count == 0 || m.bundles() > MAX_BUNDLES {
            let what = "snapshot chunks per bundle";
            return Err(DecodeError::OutOfRange { what, value: per_bundle.into(), at });
        }
        Ok(m)
    }

    /// The number of ABCI chunks.
    pub fn bundles(&self) -> u64 {
        self.chunk_count.div_ceil(u64::from(self.per_bundle.max(1)))
    }

    /// The bavl chunks in bundle `i`.
    pub fn bundle_range(&self, i: u64) -> std::ops::Range<u64> {
        let k = u64::from(self.per_bundle);
        let start = i.saturating_mul(k).min(self.chunk_count);
        start..start.saturating_add(k).min(self.chunk_count)
    }

    /// The snapshot hash of format 1 at `height`.
    pub fn hash(&self, height: u64) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(HASH_TAG);
        h.update(height.to_le_bytes());
        h.update(self.encode());
        h.finalize().into()
    }
}

/// A version to snapshot, and how to read its chunks: a paged store's version has chunks
/// that are absent from memory, read back (verified) through the store's
/// [`PageLoader`] one at a time and dropped after their export, so exporting a version
/// never holds more than it already held plus one chunk.
#[derive(Clone)]
pub struct Source {
    snap: Snapshot,
    loader: Option<PageLoader>,
}

/// Why a chunk of a [`Source`] cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("chunk {index}: {source}")]
    Chunk { index: u64, source: ChunkError },
    #[error("reading chunk {index} back: {source}")]
    Load { index: u64, source: StoreError },
}

impl Source {
    /// `snap`, with `loader` to read its absent chunks (`None`: every chunk must be in
    /// memory, or its export fails naming it).
    pub fn new(snap: Snapshot, loader: Option<PageLoader>) -> Source {
        Source { snap, loader }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The same version holding in memory only the bodies that are in no chunk file
    /// (with a loader; without one, unchanged): an export then pins no body the store
    /// could read back. One walk of the version's chunks.
    pub fn without_located_bodies(self) -> Source {
        if self.loader.is_none() {
            return self;
        }
        let (snap, _) = self.snap.without_bodies(|_| true);
        Source { snap, loader: self.loader }
    }

    /// Appends chunk `index`'s export (`docs/design.md` §3) to `out`; on error `out` is
    /// as it was.
    pub fn export_into(&self, index: u64, out: &mut Vec<u8>) -> Result<(), SourceError> {
        let at = out.len();
        let page = match self.snap.export_chunk_into(index, out) {
            Ok(()) => return Ok(()),
            Err(ChunkError::NotResident(page)) if self.loader.is_some() => page,
            Err(source) => {
                out.truncate(at);
                return Err(SourceError::Chunk { index, source });
            }
        };
        out.truncate(at);
        let loader = self.loader.as_ref().expect("checked above");
        let loaded = loader
            .load(&self.snap, &[page])
            .map_err(|source| SourceError::Load { index, source })?;
        loaded.export_chunk_into(index, out).map_err(|source| {
            out.truncate(at);
            SourceError::Chunk { index, source }
        })
    }
}

/// Chooses the bundling of a snapshot: `per_bundle` so that a bundle of chunks as large
/// as the largest of up to 16 evenly spaced sampled chunks is about `target` bytes
/// (by default [`TARGET_BUNDLE_BYTES`]), and the snapshot has at most [`MAX_BUNDLES`]
/// bundles. Costs 16 chunk exports (absent ones read back: a sample is never skipped, so
/// the plan depends on the state only, whatever is in memory), whatever the state's
/// size. `None` for an empty state (nothing to sync).
pub fn plan(src: &Source, target: u64) -> Result<Option<Metadata>, SourceError> {
    let snap = src.snapshot();
    let n = snap.chunk_count();
    if n == 0 {
        return Ok(None);
    }
    let mut buf = Vec::new();
    let mut largest = 1u64;
    for s in 0..SAMPLES.min(n) {
        buf.clear();
        src.export_into(s * n / SAMPLES.min(n), &mut buf)?;
        largest = largest.max(buf.len() as u64 + 4);
    }
    let by_size = (target / largest).clamp(1, u64::from(u32::MAX));
    let by_count = n.div_ceil(MAX_BUNDLES);
    let per_bundle = by_size.max(by_count).min(u64::from(u32::MAX)) as u32;
    let capacity = snap.capacity();
    Ok(Some(Metadata { root: snap.root_hash(), chunk_count: n, per_bundle, capacity }))
}

/// Appends bundle `i` of `src` (whose metadata is `meta`) to `out`; `Ok(false)` past the
/// end, an error if a chunk of it cannot be read (never a short bundle; `out` is then as
/// it was).
pub fn encode_bundle_into(
    src: &Source,
    meta: &Metadata,
    i: u64,
    out: &mut Vec<u8>,
) -> Result<bool, SourceError> {
    let range = meta.bundle_range(i);
    if range.is_empty() {
        return Ok(false);
    }
    let start = out.len();
    for j in range {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        if let Err(e) = src.export_into(j, out) {
            out.truncate(start);
            return Err(e);
        }
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    Ok(true)
}

/// Bundle `i` of `src`; `Ok(None)` past the end (see [`encode_bundle_into`]).
pub fn encode_bundle(
    src: &Source,
    meta: &Metadata,
    i: u64,
) -> Result<Option<Vec<u8>>, SourceError> {
    let mut out = Vec::new();
    Ok(encode_bundle_into(src, meta, i, &mut out)?.then_some(out))
}

/// Splits an untrusted bundle into its `expected` chunk encodings (not verified here).
pub fn split_bundle(bytes: &[u8], expected: u64) -> Result<Vec<&[u8]>, DecodeError> {
    let mut r = Reader::new(bytes);
    // Each entry takes at least 4 bytes: no allocation beyond the input's size.
    let mut out = Vec::with_capacity((expected as usize).min(bytes.len() / 4));
    for _ in 0..expected {
        let len = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
        out.push(r.take(len as usize)?);
    }
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bavl_core::Tree;

    fn state(keys: u32) -> Source {
        let mut t = Tree::with_capacity(8).unwrap();
        for i in 0..keys {
            t.insert(format!("key{i:06}").as_bytes(), &[i as u8; 100]).unwrap();
        }
        Source::new(t.snapshot(), None)
    }

    #[test]
    fn metadata_round_trips_and_refuses_damage() {
        let snap = state(1000);
        let m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap().unwrap();
        let bytes = m.encode();
        assert_eq!(bytes.len(), METADATA_LEN);
        assert_eq!(Metadata::decode(&bytes).unwrap(), m);
        for len in 0..bytes.len() {
            assert!(Metadata::decode(&bytes[..len]).is_err());
        }
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(Metadata::decode(&bad).is_err());
        let zero = Metadata { per_bundle: 0, ..m };
        assert!(Metadata::decode(&zero.encode()).is_err());
        assert_ne!(m.hash(5), m.hash(6));
    }

    #[test]
    fn bundles_cover_every_chunk_once_and_split_back() {
        let snap = state(5000);
        let mut m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap().unwrap();
        m.per_bundle = 7; // several bundles, the last one short
        let mut seen = 0;
        for i in 0..m.bundles() {
            let bytes = encode_bundle(&snap, &m, i).unwrap().unwrap();
            let r = m.bundle_range(i);
            let parts = split_bundle(&bytes, r.end - r.start).unwrap();
            for (j, part) in m.bundle_range(i).zip(parts) {
                assert_eq!(part, &snap.snapshot().export_chunk(j).unwrap()[..]);
                seen += 1;
            }
            assert!(split_bundle(&bytes[..bytes.len() - 1], r.end - r.start).is_err());
            assert!(split_bundle(&bytes, r.end - r.start + 1).is_err());
        }
        assert_eq!(seen, snap.snapshot().chunk_count());
        assert!(encode_bundle(&snap, &m, m.bundles()).unwrap().is_none());
    }

    #[test]
    fn plan_aims_at_the_target_size() {
        let snap = state(20_000);
        let m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap().unwrap();
        let size = encode_bundle(&snap, &m, 0).unwrap().unwrap().len() as u64;
        assert!(size <= TARGET_BUNDLE_BYTES && size > TARGET_BUNDLE_BYTES / 4, "{size}");
        assert!(plan(&Source::new(Tree::new().snapshot(), None), TARGET_BUNDLE_BYTES)
            .unwrap()
            .is_none());
    }
}
