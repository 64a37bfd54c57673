//! The wire protocol, version 1: paths, documents and limits (`docs/sync-protocol.md`).
//!
//! Everything here is pure: it builds paths and documents and decodes untrusted ones.
//! Decoding checks every field against its bound and against what the syncer asked for;
//! a document that fails is an error value naming what was wrong, and its source is a
//! liar. Nothing here is trusted by the syncer beyond the root and version it was given:
//! a manifest only says where to look and how big a chunk should be, and the first
//! verified chunk tells the truth about the chunk count and capacity.

use std::io;
use std::sync::Arc;

use bavl_core::{
    ChunkError, Digest, Hasher, PageRef, Snapshot, MAX_CAPACITY, MAX_KEY_LEN, MAX_VALUE_LEN,
    MIN_CAPACITY,
};
use serde::{Deserialize, Serialize};

use crate::error::ManifestError;

/// The protocol version, the first segment of every path and the `format` of every
/// document.
pub const PROTOCOL_VERSION: u32 = 1;

/// Default limit on a manifest body: room for about 700k chunk sizes (45M keys at the
/// default capacity).
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 8 << 20;

/// Default limit on a snapshot listing body.
pub const DEFAULT_MAX_LISTING_BYTES: u64 = 1 << 20;

/// Smallest possible exported chunk (one entry, empty value, one-byte key, no proof
/// path): version, kind, capacity, chunk tag, n, p, q, leaf tag, key length, key, value
/// length.
pub const MIN_CHUNK_LEN: u64 = 11;

/// Upper bound on the chunks a manifest may list (a tree of 2^32 chunks holds more than
/// 10^11 keys; the bound keeps `chunk_count` from sizing anything absurd).
pub const MAX_CHUNK_COUNT: u64 = 1 << 32;

/// The largest valid exported chunk of a tree of this capacity, in bytes (section 3 of
/// `docs/design.md`): the header, a proof path of 96 levels (an expanded inner node of 2
/// bytes and a pruned sibling of at most 53 per level), the chunk header and `capacity`
/// leaves of the longest key and value. About 1 GiB at capacity 64: it is what the format
/// allows, not what real states hold; `Options::max_chunk_bytes` is the practical limit.
pub fn max_chunk_len(capacity: u32) -> u64 {
    let header = 2 + 3;
    let path = 96 * (2 + 1 + 10 + 10 + 32) + 1;
    let chunk_header = 3 * 3;
    let leaf = 1 + 2 + MAX_KEY_LEN as u64 + 4 + MAX_VALUE_LEN as u64;
    header + path + chunk_header + u64::from(capacity) * leaf
}

/// `GET` path of the listing of retained snapshots.
pub fn listing_path() -> String {
    format!("/v{PROTOCOL_VERSION}/snapshots/index.json")
}

/// `GET` path of a version's manifest.
pub fn manifest_path(version: u64) -> String {
    format!("/v{PROTOCOL_VERSION}/snapshots/{version}/manifest.json")
}

/// `GET` path of chunk `index` of the tree with this root: content-addressed, since a root
/// and an index determine the exported bytes exactly (the encoding is canonical).
pub fn chunk_path(root: &Digest, index: u64) -> String {
    format!("/v{PROTOCOL_VERSION}/chunks/{}/{index}", hex::encode(root))
}

/// A source's description of one retained version. Untrusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`PROTOCOL_VERSION`].
    pub format: u32,
    pub version: u64,
    /// Root hash, 64 lowercase hex digits.
    pub root: String,
    pub capacity: u32,
    pub chunk_count: u64,
    pub key_count: u64,
    /// Byte length of each exported chunk, `chunk_count` of them.
    pub chunk_sizes: Vec<u64>,
}

/// Reads absent chunks of a version back (a paged store's `bavl_store::PageLoader`):
/// `snap` with the chunks of `pages` resident, each verified; `snap` is unchanged.
pub type ChunkLoader = Arc<dyn Fn(&Snapshot, &[PageRef]) -> io::Result<Snapshot> + Send + Sync>;

/// Chunk `index` of `snap` in the export format (§3), reading it back with `load` first
/// if it is absent; `None` if the version has no such chunk. An absent chunk with no
/// loader is an error, never "no such chunk".
pub fn export_chunk(
    snap: &Snapshot,
    index: u64,
    load: Option<&ChunkLoader>,
) -> io::Result<Option<Vec<u8>>> {
    match snap.export_chunk(index) {
        Ok(chunk) => Ok(Some(chunk)),
        Err(ChunkError::OutOfRange { .. }) => Ok(None),
        Err(ChunkError::NotResident(page)) => {
            let Some(load) = load else {
                return Err(io::Error::other(ChunkError::NotResident(page)));
            };
            let loaded = load(snap, &[page])?;
            loaded.export_chunk(index).map(Some).map_err(io::Error::other)
        }
    }
}

impl Manifest {
    /// The manifest of `snap` at `version`. Exports every chunk once to measure it:
    /// O(state); a server computes it once per version and caches it. A chunk not in
    /// memory (a paged version) is an error naming it, never a size of 0: see
    /// [`Manifest::from_snapshot_loading`].
    pub fn from_snapshot<H: Hasher>(
        version: u64,
        snap: &Snapshot<H>,
    ) -> Result<Manifest, ChunkError> {
        let count = snap.chunk_count();
        let mut chunk_sizes = Vec::with_capacity(count as usize);
        for i in 0..count {
            chunk_sizes.push(snap.export_chunk(i)?.len() as u64);
        }
        Ok(Self::with_sizes(version, snap, chunk_sizes))
    }

    /// [`Manifest::from_snapshot`] of a version whose absent chunks `load` reads back,
    /// one at a time (each is measured and dropped: the version is not loaded whole).
    pub fn from_snapshot_loading(
        version: u64,
        snap: &Snapshot,
        load: Option<&ChunkLoader>,
    ) -> io::Result<Manifest> {
        let count = snap.chunk_count();
        let mut chunk_sizes = Vec::with_capacity(count as usize);
        for i in 0..count {
            let chunk = export_chunk(snap, i, load)?
                .ok_or_else(|| io::Error::other(ChunkError::OutOfRange { index: i, count }))?;
            chunk_sizes.push(chunk.len() as u64);
        }
        Ok(Self::with_sizes(version, snap, chunk_sizes))
    }

    fn with_sizes<H: Hasher>(version: u64, snap: &Snapshot<H>, chunk_sizes: Vec<u64>) -> Self {
        Manifest {
            format: PROTOCOL_VERSION,
            version,
            root: hex::encode(snap.root_hash()),
            capacity: snap.capacity(),
            chunk_count: snap.chunk_count(),
            key_count: snap.len(),
            chunk_sizes,
        }
    }

    /// The JSON body served at [`manifest_path`].
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes a manifest and checks it is well formed and describes `root` at `version`.
    /// Whether its counts and sizes are true is only known once chunks verify.
    pub fn decode(body: &[u8], version: u64, root: &Digest) -> Result<Manifest, ManifestError> {
        let m: Manifest =
            serde_json::from_slice(body).map_err(|e| ManifestError::Json(e.to_string()))?;
        if m.format != PROTOCOL_VERSION {
            return Err(ManifestError::Format(m.format));
        }
        if m.version != version {
            return Err(ManifestError::WrongVersion { asked: version, answered: m.version });
        }
        if parse_root(&m.root)? != *root {
            return Err(ManifestError::WrongRoot);
        }
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&m.capacity) {
            return Err(ManifestError::Field("capacity"));
        }
        if m.chunk_count > MAX_CHUNK_COUNT || m.chunk_sizes.len() as u64 != m.chunk_count {
            return Err(ManifestError::Field("chunk_count"));
        }
        // Every chunk holds 1..=capacity keys.
        let max_keys = m.chunk_count.saturating_mul(u64::from(m.capacity));
        if m.key_count < m.chunk_count || m.key_count > max_keys {
            return Err(ManifestError::Field("key_count"));
        }
        let max = max_chunk_len(m.capacity);
        if m.chunk_sizes.iter().any(|&s| !(MIN_CHUNK_LEN..=max).contains(&s)) {
            return Err(ManifestError::Field("chunk_sizes"));
        }
        Ok(m)
    }
}

/// One entry of the snapshot listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedSnapshot {
    pub version: u64,
    /// Root hash, 64 lowercase hex digits.
    pub root: String,
    pub chunk_count: u64,
}

/// The body served at [`listing_path`]: the retained versions, oldest first. Untrusted;
/// for operators choosing a version, never an input to verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub format: u32,
    pub snapshots: Vec<ListedSnapshot>,
}

impl Listing {
    /// Decodes a listing and checks its roots are well formed and its versions increase.
    pub fn decode(body: &[u8]) -> Result<Listing, ManifestError> {
        let l: Listing =
            serde_json::from_slice(body).map_err(|e| ManifestError::Json(e.to_string()))?;
        if l.format != PROTOCOL_VERSION {
            return Err(ManifestError::Format(l.format));
        }
        for s in &l.snapshots {
            parse_root(&s.root)?;
        }
        if l.snapshots.windows(2).any(|w| w[0].version >= w[1].version) {
            return Err(ManifestError::Field("snapshots (versions must increase)"));
        }
        Ok(l)
    }
}

/// Parses 64 lowercase hex digits (the only spelling the protocol uses, so every root has
/// one URL).
pub fn parse_root(s: &str) -> Result<Digest, ManifestError> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ManifestError::Field("root (64 lowercase hex digits)"));
    }
    let mut root = [0u8; 32];
    hex::decode_to_slice(s, &mut root).map_err(|_| ManifestError::Field("root"))?;
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bavl_core::{Sha256, Tree};

    fn snap(keys: u32) -> Snapshot<Sha256> {
        let mut t = Tree::<Sha256>::with_capacity(8).unwrap();
        for i in 0..keys {
            t.insert(&i.to_be_bytes(), b"v").unwrap();
        }
        t.snapshot()
    }

    #[test]
    fn manifest_roundtrip_and_checks() {
        let s = snap(100);
        let root = s.root_hash();
        let m = Manifest::from_snapshot(3, &s).unwrap();
        assert_eq!(Manifest::decode(&m.to_json(), 3, &root).unwrap(), m);
        assert!(matches!(
            Manifest::decode(&m.to_json(), 4, &root),
            Err(ManifestError::WrongVersion { asked: 4, answered: 3 })
        ));
        assert_eq!(Manifest::decode(&m.to_json(), 3, &[1; 32]), Err(ManifestError::WrongRoot));
        let mut bad = m.clone();
        bad.chunk_sizes.pop();
        assert!(Manifest::decode(&bad.to_json(), 3, &root).is_err());
        let mut bad = m.clone();
        bad.root = bad.root.to_uppercase();
        assert!(Manifest::decode(&bad.to_json(), 3, &root).is_err());
        let mut bad = m.clone();
        bad.capacity = 2;
        assert!(Manifest::decode(&bad.to_json(), 3, &root).is_err());
        let mut bad = m;
        bad.key_count = 0;
        assert!(Manifest::decode(&bad.to_json(), 3, &root).is_err());
        assert!(Manifest::decode(b"\x00garbage", 3, &root).is_err());
    }

    #[test]
    fn sizes_are_within_bounds() {
        let s = snap(200);
        let m = Manifest::from_snapshot(1, &s).unwrap();
        assert!(m.chunk_sizes.iter().all(|&c| c >= MIN_CHUNK_LEN && c <= max_chunk_len(8)));
        let mut t = Tree::<Sha256>::with_capacity(4).unwrap();
        t.insert(b"k", b"").unwrap();
        let one = t.snapshot().export_chunk(0).unwrap();
        assert_eq!(one.len() as u64, MIN_CHUNK_LEN);
    }

    #[test]
    fn paths() {
        assert_eq!(manifest_path(7), "/v1/snapshots/7/manifest.json");
        assert_eq!(chunk_path(&[0xab; 32], 12), format!("/v1/chunks/{}/12", "ab".repeat(32)));
        assert_eq!(listing_path(), "/v1/snapshots/index.json");
    }

    #[test]
    fn listing_roundtrip() {
        let l = Listing {
            format: 1,
            snapshots: vec![ListedSnapshot { version: 1, root: "00".repeat(32), chunk_count: 0 }],
        };
        let body = serde_json::to_vec(&l).unwrap();
        assert_eq!(Listing::decode(&body).unwrap(), l);
    }
}
