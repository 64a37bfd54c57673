//! Chunk bodies crossing the disk boundary (`docs/design.md` §8.5.1): [`Body`], decoded
//! defensively from a chunk file and verified against the page it is meant for, and
//! [`ChunkRef`], one chunk of a version as a store's writer sees it (its hash, location,
//! identity and encoding).
//!
//! A body on disk is `varint n`, then `n` times a length-prefixed key and value
//! ([`ChunkRef::encode_body`]); [`Body::decode`] reads it defensively.

use std::sync::atomic::Ordering;

use crate::chunk::Chunk;
use crate::codec::{put_bytes, put_varint, Reader};
use crate::error::DecodeError;
use crate::hash::{check_key, Digest, Hasher};
use crate::node::{Leaf, Page};
use crate::page::PageError;
use crate::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// A chunk body decoded from untrusted bytes, not yet verified:
/// [`Tree::page_in`](crate::Tree::page_in) and
/// [`Snapshot::with_bodies`](crate::Snapshot::with_bodies) verify it against the page it
/// is meant for.
pub struct Body {
    chunk: Chunk,
    /// The hasher whose chunk hash [`Body::prehash`] computed and the chunk caches.
    hashed_with: Option<&'static str>,
}

impl Body {
    /// Decodes a body (see the module documentation). Lengths are checked against the
    /// bytes before anything is allocated; keys must be valid and strictly increasing.
    pub fn decode(bytes: &[u8]) -> Result<Body, DecodeError> {
        let mut r = Reader::new(bytes);
        let n = r.varint()?;
        // Every entry takes at least three bytes (two lengths and a one-byte key).
        if n == 0 || n > (r.remaining() / 3) as u64 {
            return Err(DecodeError::OutOfRange { what: "entry count", value: n, at: 0 });
        }
        // Entries are checked first and the buffers then allocated once, at their sizes
        // plus an eighth: growing them by doubling left a body up to twice its bytes and a
        // trail of freed buffers on every prefetch thread.
        let mut entries: Vec<(&[u8], &[u8])> = Vec::with_capacity(n as usize);
        let (mut key_bytes, mut value_bytes) = (0, 0);
        for _ in 0..n {
            let at = r.position();
            let key = r.bytes(MAX_KEY_LEN, "key length")?;
            let value = r.bytes(MAX_VALUE_LEN, "value length")?;
            if check_key(key).is_err() || entries.last().is_some_and(|(p, _)| *p >= key) {
                return Err(DecodeError::OutOfRange { what: "key", value: key.len() as u64, at });
            }
            key_bytes += key.len();
            value_bytes += value.len();
            entries.push((key, value));
        }
        r.finish()?;
        let mut chunk = Chunk::new();
        // An eighth more, as `insert_bytes` grows: a few inserts fit without a copy.
        chunk.reserve(entries.len(), key_bytes + key_bytes / 8, value_bytes + value_bytes / 8);
        for (key, value) in entries {
            chunk.push(key, value, None);
        }
        Ok(Body { chunk, hashed_with: None })
    }

    /// Computes the chunk hash with `H` now, on whatever thread decoded the body (a
    /// store's prefetch threads), so that verifying it
    /// ([`Tree::page_in`](crate::Tree::page_in)) on the
    /// writer's thread only compares. A body prehashed with another hasher than the
    /// tree's is refused there ([`PageError::Mismatch`]), never compared.
    pub fn prehash<H: Hasher>(&mut self) {
        self.chunk.rehash::<H>();
        self.hashed_with = Some(H::NAME);
    }

    /// The chunk hash of this body with `H` (computed once, then cached): what a store
    /// that builds chunks itself (a bulk import) records in its skeleton.
    pub fn chunk_hash<H: Hasher>(&mut self) -> Digest {
        self.prehash::<H>();
        self.chunk.rehash::<H>()
    }

    /// The first key.
    pub fn first_key(&self) -> &[u8] {
        self.chunk.first_key()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.chunk.len()
    }

    /// Never true for a decoded body (a chunk holds at least one entry).
    pub fn is_empty(&self) -> bool {
        self.chunk.len() == 0
    }

    /// Checks this body against `page` and returns it as a chunk carrying the page's
    /// location (it is the body stored there).
    pub(crate) fn verify<H: Hasher>(mut self, page: &Page, index: u64) -> Result<Chunk, PageError> {
        let what = if self.hashed_with.is_some_and(|n| n != H::NAME) {
            // Its cached hashes are another function's: refused, never compared.
            Some("hasher (prehashed with another)")
        } else if self.chunk.len() != page.len as usize {
            Some("entry count")
        } else if self.chunk.first_key() != &*page.first {
            Some("first key")
        } else if self.chunk.rehash::<H>() != page.hash {
            Some("chunk hash")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(PageError::Mismatch { index, what });
        }
        self.chunk.loc.store(page.loc, Ordering::Release);
        Ok(self.chunk)
    }
}

/// One chunk of a version, resident or absent, as the store's checkpoint writer sees it.
pub struct ChunkRef<'a> {
    pub(crate) leaf: Leaf<'a>,
    /// The chunk's index.
    pub index: u64,
    /// The height of the inner node whose separator is this chunk's first key (0 for the
    /// first chunk): with the chunks in order, it rebuilds the tree's shape. Only a
    /// whole-version walk
    /// ([`Snapshot::for_each_chunk`](crate::Snapshot::for_each_chunk)) gives it; 0
    /// from [`Tree::chunk_ref`](crate::Tree::chunk_ref).
    pub key_height: u8,
}

impl ChunkRef<'_> {
    /// The chunk hash (the version is fully hashed).
    pub fn hash(&self) -> Digest {
        match self.leaf {
            Leaf::Body(c) => c.hash.unwrap_or_default(),
            Leaf::Absent(p) => p.hash,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> u32 {
        match self.leaf {
            Leaf::Body(c) => c.len() as u32,
            Leaf::Absent(p) => p.len,
        }
    }

    /// Never true: a chunk holds at least one entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first key.
    pub fn first_key(&self) -> &[u8] {
        match self.leaf {
            Leaf::Body(c) => c.first_key(),
            Leaf::Absent(p) => &p.first,
        }
    }

    /// The chunk's skeleton record with its body at `loc` (`docs/design.md` §8.5.1).
    pub fn skeleton_entry(&self, loc: u64) -> crate::SkeletonEntry {
        crate::SkeletonEntry {
            key_height: self.key_height,
            hash: self.hash(),
            len: self.len(),
            loc,
            first_key: self.first_key().into(),
        }
    }

    /// Where the body is on disk, if anywhere (always for an absent chunk).
    pub fn location(&self) -> Option<u64> {
        match self.leaf {
            Leaf::Body(c) => c.location(),
            Leaf::Absent(p) => Some(p.loc),
        }
    }

    /// An identity of the resident body (its address), equal in every version that shares
    /// it and different between bodies alive at the same time; `None` when absent.
    pub fn body_id(&self) -> Option<usize> {
        match self.leaf {
            Leaf::Body(c) => Some(c as *const Chunk as usize),
            Leaf::Absent(_) => None,
        }
    }

    /// Heap bytes of the resident body (0 when absent).
    pub fn heap_bytes(&self) -> usize {
        match self.leaf {
            Leaf::Body(c) => c.heap_bytes(),
            Leaf::Absent(_) => 0,
        }
    }

    /// Whether [`Tree::page_out`](crate::Tree::page_out) would evict it: resident,
    /// hashed and with a disk location.
    pub fn is_evictable(&self) -> bool {
        matches!(self.leaf, Leaf::Body(c) if c.hash.is_some() && c.location().is_some())
    }

    /// Records that the body is now durable at `loc` (nonzero), which makes the chunk
    /// evictable in every version that shares it. False for an absent chunk.
    pub fn set_location(&self, loc: u64) -> bool {
        match self.leaf {
            Leaf::Body(c) if loc != 0 => {
                c.loc.store(loc, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// Appends the body's encoding to `out`; false, with `out` unchanged, if absent.
    pub fn encode_body(&self, out: &mut Vec<u8>) -> bool {
        let Leaf::Body(c) = self.leaf else { return false };
        put_varint(out, c.len() as u64);
        for i in 0..c.len() {
            put_bytes(out, c.key(i));
            put_bytes(out, c.value(i));
        }
        true
    }
}
