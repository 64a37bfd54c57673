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

/// Chooses the bundling of a snapshot: `per_bundle` so that a bundle of chunks as large
/// as the largest of up to 16 evenly spaced sampled chunks is about `target` bytes
/// (by default [`TARGET_BUNDLE_BYTES`]), and the snapshot has at most [`MAX_BUNDLES`] bundles. Costs 16
/// chunk exports, whatever the state's size. `None` for an empty state (nothing to sync).
pub fn plan(snap: &Snapshot, target: u64) -> Option<Metadata> {
    let n = snap.chunk_count();
    if n == 0 {
        return None;
    }
    let mut buf = Vec::new();
    let mut largest = 1u64;
    for s in 0..SAMPLES.min(n) {
        buf.clear();
        // A sample that cannot be read (a paged chunk) only leaves the estimate to the rest.
        let _ = snap.export_chunk_into(s * n / SAMPLES.min(n), &mut buf);
        largest = largest.max(buf.len() as u64 + 4);
    }
    let by_size = (target / largest).clamp(1, u64::from(u32::MAX));
    let by_count = n.div_ceil(MAX_BUNDLES);
    let per_bundle = by_size.max(by_count).min(u64::from(u32::MAX)) as u32;
    let capacity = snap.capacity();
    Some(Metadata { root: snap.root_hash(), chunk_count: n, per_bundle, capacity })
}

/// Encodes bundle `i` of `snap` (whose metadata is `meta`); `Ok(None)` past the end, an
/// error if a chunk of it cannot be read (never a short bundle).
pub fn encode_bundle(
    snap: &Snapshot,
    meta: &Metadata,
    i: u64,
) -> Result<Option<Vec<u8>>, ChunkError> {
    let range = meta.bundle_range(i);
    if range.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for j in range {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        snap.export_chunk_into(j, &mut out)?;
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    Ok(Some(out))
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

    fn state(keys: u32) -> Snapshot {
        let mut t = Tree::with_capacity(8).unwrap();
        for i in 0..keys {
            t.insert(format!("key{i:06}").as_bytes(), &[i as u8; 100]).unwrap();
        }
        t.snapshot()
    }

    #[test]
    fn metadata_round_trips_and_refuses_damage() {
        let snap = state(1000);
        let m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap();
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
        let mut m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap();
        m.per_bundle = 7; // several bundles, the last one short
        let mut seen = 0;
        for i in 0..m.bundles() {
            let bytes = encode_bundle(&snap, &m, i).unwrap().unwrap();
            let r = m.bundle_range(i);
            let parts = split_bundle(&bytes, r.end - r.start).unwrap();
            for (j, part) in m.bundle_range(i).zip(parts) {
                assert_eq!(part, &snap.export_chunk(j).unwrap()[..]);
                seen += 1;
            }
            assert!(split_bundle(&bytes[..bytes.len() - 1], r.end - r.start).is_err());
            assert!(split_bundle(&bytes, r.end - r.start + 1).is_err());
        }
        assert_eq!(seen, snap.chunk_count());
        assert_eq!(encode_bundle(&snap, &m, m.bundles()), Ok(None));
    }

    #[test]
    fn plan_aims_at_the_target_size() {
        let snap = state(20_000);
        let m = plan(&snap, TARGET_BUNDLE_BYTES).unwrap();
        let size = encode_bundle(&snap, &m, 0).unwrap().unwrap().len() as u64;
        assert!(size <= TARGET_BUNDLE_BYTES && size > TARGET_BUNDLE_BYTES / 4, "{size}");
        assert!(plan(&Tree::new().snapshot(), TARGET_BUNDLE_BYTES).is_none());
    }
}
