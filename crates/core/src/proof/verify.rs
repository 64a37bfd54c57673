//! The one pass over a proof or chunk (`docs/design.md` §3, steps 2-8): every field checked
//! as it is read, every hash recomputed bottom-up, the root compared; and the verified
//! results' types. The kind rules that follow are in `kinds`.

use super::{kind, L_HASH, L_SUBJECT, L_VALUE, T_CHUNK, T_EMPTY, T_INNER, T_PRUNED};
use crate::chunk::{split_point, Chunk};
use crate::codec::Reader;
use crate::error::{DecodeError, ProofError};
use crate::hash::{
    chunk_hash, chunk_node_hash, inner_hash, leaf_hash, leaf_hash_of, root_hash, Digest, Hasher,
    Key, EMPTY_TOP, FORMAT_VERSION,
};
use crate::{MAX_CAPACITY, MAX_HEIGHT, MAX_KEY_LEN, MAX_VALUE_LEN, MIN_CAPACITY};

/// A verified membership proof.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedMembership {
    /// Position of the key among all keys.
    pub index: u64,
    /// Number of keys in the tree.
    pub key_count: u64,
}

/// A verified range: every entry of the tree within the bounds, in key order.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRange {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Number of keys in the tree.
    pub key_count: u64,
}

/// A verified absence proof.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedAbsence {
    /// Number of keys in the tree.
    pub key_count: u64,
}

/// A chunk verified against the root: its entries are exactly chunk `index` of the tree.
#[must_use]
#[derive(Clone)]
pub struct VerifiedChunk {
    pub index: u64,
    pub chunk_count: u64,
    /// Number of keys in the whole tree.
    pub key_count: u64,
    /// Number of keys in the chunks before this one.
    pub keys_before: u64,
    /// Height of the inner node whose separator is this chunk's first key (0 for chunk 0).
    pub key_height: u8,
    pub capacity: u32,
    /// The root this chunk was verified against.
    pub root: Digest,
    pub(crate) chunk: Chunk,
}

impl VerifiedChunk {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.chunk.len()
    }
    /// Never true: chunks are not empty.
    pub fn is_empty(&self) -> bool {
        self.chunk.len() == 0
    }
    /// The entries, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        (0..self.chunk.len()).map(|i| (self.chunk.key(i), self.chunk.value(i)))
    }
}

pub(super) struct Leaf<'a> {
    pub(super) index: u64,
    pub(super) key: Key<'a>,
    pub(super) value: Option<&'a [u8]>,
    pub(super) kind: u8,
}

struct Info {
    hash: Digest,
    kc: u64,
    cc: u64,
    expanded: bool,
    /// The subtree holds the expanded chunk and only left turns lead to it.
    pending: bool,
}

pub(super) struct ExpandedChunk {
    pub(super) index: u64,
    pub(super) keys_before: u64,
    pub(super) full: bool,
    pub(super) chunk: Option<Chunk>,
}

struct Walk<'a, H: Hasher> {
    r: Reader<'a>,
    capacity: u64,
    keys_before: u64,
    chunks_before: u64,
    leaves: Vec<Leaf<'a>>,
    subject: Option<(Key<'a>, &'a [u8])>,
    build: bool,
    chunks: Vec<ExpandedChunk>,
    key_height: Option<u8>,
    _h: std::marker::PhantomData<H>,
}

impl<'a, H: Hasher> Walk<'a, H> {
    fn node(&mut self, depth: usize) -> Result<Info, ProofError> {
        let at = self.r.position();
        if depth > MAX_HEIGHT as usize {
            return Err(DecodeError::TooDeep { at }.into());
        }
        match self.r.u8()? {
            T_PRUNED => self.pruned(),
            T_CHUNK => self.chunk(),
            T_INNER => {
                let hat = self.r.position();
                let height = self.r.u8()?;
                if height == 0 || height > MAX_HEIGHT {
                    let value = height.into();
                    return Err(DecodeError::OutOfRange { what: "height", value, at: hat }.into());
                }
                let l = self.node(depth + 1)?;
                let r = self.node(depth + 1)?;
                if !l.expanded && !r.expanded {
                    return Err(ProofError::Structure("expanded node over two pruned subtrees"));
                }
                let (Some(kc), Some(cc)) = (l.kc.checked_add(r.kc), l.cc.checked_add(r.cc)) else {
                    return Err(
                        DecodeError::OutOfRange { what: "key count", value: u64::MAX, at }.into()
                    );
                };
                if r.pending {
                    self.key_height = Some(height);
                }
                Ok(Info {
                    hash: inner_hash::<H>(height, kc, cc, &l.hash, &r.hash),
                    kc,
                    cc,
                    expanded: true,
                    pending: l.pending,
                })
            }
            tag => Err(DecodeError::BadTag { what: "node", tag, at }.into()),
        }
    }

    fn pruned(&mut self) -> Result<Info, ProofError> {
        let at = self.r.position();
        let kc = self.r.varint_in(1, u64::MAX >> 16, "key count")?;
        let cc = self.r.varint_in(1, kc, "chunk count")?;
        if cc == 1 && kc > self.capacity {
            return Err(DecodeError::OutOfRange { what: "key count", value: kc, at }.into());
        }
        let hash = self.r.digest()?;
        self.keys_before = self.keys_before.saturating_add(kc);
        self.chunks_before = self.chunks_before.saturating_add(cc);
        Ok(Info { hash, kc, cc, expanded: false, pending: false })
    }

    fn chunk(&mut self) -> Result<Info, ProofError> {
        let m = self.r.varint_in(1, self.capacity, "chunk key count")? as usize;
        let p = self.r.varint_in(0, m as u64 - 1, "first expanded leaf")? as usize;
        let q = self.r.varint_in(1, (m - p) as u64, "expanded leaf count")? as usize;
        let full = p == 0 && q == m;
        let offset = self.keys_before;
        let mut built = None;
        let root = if full && self.build {
            let mut c = Chunk::new();
            c.reserve(m, 0, self.r.remaining());
            for i in 0..m {
                let (key, value) = match self.leaf_tag()? {
                    L_VALUE => (self.key()?, self.value()?),
                    _ => return Err(ProofError::Structure("chunk entries must carry values")),
                };
                if i > 0 && c.key(i - 1) >= key.as_bytes() {
                    return Err(ProofError::Structure("keys out of order"));
                }
                c.push(key.as_bytes(), value, Some(leaf_hash_of::<H>(key, value)));
            }
            let h = c.rehash::<H>();
            built = Some(c);
            h
        } else {
            chunk_hash::<H>(m as u32, &self.in_chunk(0, m, p, p + q, offset)?)
        };
        self.chunks.push(ExpandedChunk {
            index: self.chunks_before,
            keys_before: offset,
            full,
            chunk: built,
        });
        // Saturating, like the pruned counts: a sum beyond 2^64 - 1 is refused when the
        // enclosing inner node adds its children's counts.
        self.keys_before = self.keys_before.saturating_add(m as u64);
        self.chunks_before = self.chunks_before.saturating_add(1);
        Ok(Info { hash: root, kc: m as u64, cc: 1, expanded: true, pending: true })
    }

    fn in_chunk(
        &mut self,
        a: usize,
        b: usize,
        p: usize,
        e: usize,
        offset: u64,
    ) -> Result<Digest, ProofError> {
        if b <= p || a >= e {
            return Ok(self.r.digest()?);
        }
        if b - a == 1 {
            return self.leaf(offset + a as u64);
        }
        let k = split_point(b - a);
        let l = self.in_chunk(a, a + k, p, e, offset)?;
        let r = self.in_chunk(a + k, b, p, e, offset)?;
        Ok(chunk_node_hash::<H>(&l, &r))
    }

    fn leaf_tag(&mut self) -> Result<u8, ProofError> {
        let at = self.r.position();
        match self.r.u8()? {
            t @ (L_HASH | L_VALUE | L_SUBJECT) => Ok(t),
            tag => Err(DecodeError::BadTag { what: "leaf", tag, at }.into()),
        }
    }

    fn key(&mut self) -> Result<Key<'a>, ProofError> {
        let at = self.r.position();
        let k = self.r.bytes(MAX_KEY_LEN, "key length")?;
        Key::new(k).map_err(|_| DecodeError::OutOfRange { what: "key length", value: 0, at }.into())
    }

    fn value(&mut self) -> Result<&'a [u8], ProofError> {
        Ok(self.r.bytes(MAX_VALUE_LEN, "value length")?)
    }

    fn leaf(&mut self, index: u64) -> Result<Digest, ProofError> {
        let kind = self.leaf_tag()?;
        let (key, value, hash) = match kind {
            L_HASH => {
                let key = self.key()?;
                let vh = self.r.digest()?;
                (key, None, leaf_hash::<H>(key, &vh))
            }
            L_VALUE => {
                let key = self.key()?;
                let value = self.value()?;
                (key, Some(value), leaf_hash_of::<H>(key, value))
            }
            _ => {
                let Some((key, value)) = self.subject.take() else {
                    return Err(ProofError::Structure("unexpected subject leaf"));
                };
                (key, Some(value), leaf_hash_of::<H>(key, value))
            }
        };
        self.leaves.push(Leaf { index, key, value, kind });
        Ok(hash)
    }
}

/// The result of walking a proof: what every kind-specific check starts from.
pub(super) struct Walked<'a> {
    pub(super) key_count: u64,
    pub(super) chunk_count: u64,
    pub(super) leaves: Vec<Leaf<'a>>,
    pub(super) chunks: Vec<ExpandedChunk>,
    pub(super) key_height: Option<u8>,
    pub(super) capacity: u32,
    pub(super) subject_used: bool,
}

pub(super) fn walk<'a, H: Hasher>(
    root: &Digest,
    expected_kind: u8,
    bytes: &'a [u8],
    subject: Option<(Key<'a>, &'a [u8])>,
    build: bool,
) -> Result<Walked<'a>, ProofError> {
    let mut r = Reader::new(bytes);
    let version = r.u8()?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::Version { found: version, expected: FORMAT_VERSION }.into());
    }
    let found = r.u8()?;
    if found != expected_kind {
        let expected = match expected_kind {
            kind::MEMBERSHIP => "membership",
            kind::RANGE => "range",
            _ => "chunk",
        };
        return Err(ProofError::WrongKind { expected, found });
    }
    let capacity = r.varint_in(MIN_CAPACITY.into(), MAX_CAPACITY.into(), "capacity")? as u32;
    let mut w = Walk::<H> {
        r,
        capacity: capacity.into(),
        keys_before: 0,
        chunks_before: 0,
        leaves: Vec::new(),
        subject,
        build,
        chunks: Vec::new(),
        key_height: None,
        _h: Default::default(),
    };
    let at = w.r.position();
    let (top, kc, cc, pending) = if w.r.remaining() > 0 && bytes[at] == T_EMPTY {
        w.r.u8()?;
        (EMPTY_TOP, 0, 0, false)
    } else {
        let info = w.node(0)?;
        if !info.expanded {
            return Err(ProofError::Structure("nothing expanded"));
        }
        (info.hash, info.kc, info.cc, info.pending)
    };
    w.r.finish()?;
    if root_hash::<H>(capacity, &top) != *root {
        return Err(ProofError::RootMismatch);
    }
    let key_height = if pending { Some(0) } else { w.key_height };
    Ok(Walked {
        key_count: kc,
        chunk_count: cc,
        leaves: w.leaves,
        chunks: w.chunks,
        key_height,
        capacity,
        subject_used: w.subject.is_none(),
    })
}
