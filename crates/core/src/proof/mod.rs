//! Proofs and chunk encodings: one format, one verifier.
//!
//! Every proof is the tree with everything irrelevant pruned: a pre-order walk of the AVL
//! nodes in which a subtree is either expanded or replaced by its hash and metadata, and in
//! each expanded chunk a contiguous run of leaves is expanded inside the RFC 6962 shape,
//! the rest replaced by hashes. Membership, absence and range proofs and exported chunks
//! are this encoding with different runs expanded; `docs/design.md` gives the byte layout.
//!
//! This module writes proofs from a snapshot; `verify` reads them and `kinds` applies the
//! kind rules. The verifier takes only the trusted root and the bytes. It checks every
//! length against the bytes left before using it, bounds recursion, allocates only in
//! proportion to the input, and returns a `#[must_use]` value or a typed error — never
//! panics.

mod kinds;
mod verify;

pub use kinds::{
    verify_absence, verify_chunk, verify_chunk_unindexed, verify_membership, verify_range,
};
pub use verify::{VerifiedAbsence, VerifiedChunk, VerifiedMembership, VerifiedRange};

use std::ops::Bound;

use crate::chunk::{split_point, Chunk};
use crate::codec::{put_bytes, put_varint};
use crate::error::{ChunkError, InputError, ProveError};
use crate::hash::{value_hash, Hasher, FORMAT_VERSION};
use crate::node::{Leaf, Node};
use crate::page::PageRef;
use crate::snapshot::{Snapshot, View};

/// Proof kinds (second byte of every proof).
pub mod kind {
    pub const MEMBERSHIP: u8 = 1;
    pub const RANGE: u8 = 2;
    pub const CHUNK: u8 = 3;
}

pub(crate) const T_EMPTY: u8 = 0;
pub(crate) const T_INNER: u8 = 1;
pub(crate) const T_CHUNK: u8 = 2;
pub(crate) const T_PRUNED: u8 = 3;
pub(crate) const L_HASH: u8 = 0;
pub(crate) const L_VALUE: u8 = 1;
pub(crate) const L_SUBJECT: u8 = 2;

#[derive(Clone, Copy, PartialEq, Eq)]
enum LeafKind {
    Hash,
    Value,
    Subject,
}

struct Emitter<'a, H: Hasher, F: Fn(u64) -> LeafKind> {
    out: &'a mut Vec<u8>,
    lo: u64,
    hi: u64,
    kind: F,
    _v: std::marker::PhantomData<H>,
}

impl<H: Hasher, F: Fn(u64) -> LeafKind> Emitter<'_, H, F> {
    fn node(&mut self, node: &Node, offset: u64) {
        let kc = node.key_count();
        // An absent chunk can only be pruned: its callers make the range resident first,
        // and a proof with a body missing fails verification rather than lie.
        if offset + kc <= self.lo || offset >= self.hi || matches!(node, Node::Paged(_)) {
            self.out.push(T_PRUNED);
            put_varint(self.out, kc);
            put_varint(self.out, node.chunk_count());
            self.out.extend_from_slice(&node.cached_hash().unwrap_or_default());
            return;
        }
        match node {
            Node::Inner(x) => {
                self.out.extend_from_slice(&[T_INNER, x.height]);
                self.node(&x.left, offset);
                self.node(&x.right, offset + x.left.key_count());
            }
            Node::Chunk(c) => {
                self.out.push(T_CHUNK);
                let p = self.lo.saturating_sub(offset) as usize;
                let e = (self.hi - offset).min(kc) as usize;
                put_varint(self.out, kc);
                put_varint(self.out, p as u64);
                put_varint(self.out, (e - p) as u64);
                self.in_chunk(c, 0, c.len(), p, e, offset);
            }
            Node::Paged(_) => {}
        }
    }

    fn in_chunk(&mut self, c: &Chunk, a: usize, b: usize, p: usize, e: usize, offset: u64) {
        if b <= p || a >= e {
            let h = c.node_hash::<H>(a, b);
            self.out.extend_from_slice(&h);
        } else if b - a == 1 {
            match (self.kind)(offset + a as u64) {
                LeafKind::Subject => self.out.push(L_SUBJECT),
                LeafKind::Hash => {
                    self.out.push(L_HASH);
                    put_bytes(self.out, c.key(a));
                    self.out.extend_from_slice(&value_hash::<H>(c.value(a)));
                }
                LeafKind::Value => {
                    self.out.push(L_VALUE);
                    put_bytes(self.out, c.key(a));
                    put_bytes(self.out, c.value(a));
                }
            }
        } else {
            let k = split_point(b - a);
            self.in_chunk(c, a, a + k, p, e, offset);
            self.in_chunk(c, a + k, b, p, e, offset);
        }
    }
}

fn emit<H: Hasher>(
    view: View<'_>,
    proof_kind: u8,
    lo: u64,
    hi: u64,
    kind: impl Fn(u64) -> LeafKind,
) -> Vec<u8> {
    let mut out = Vec::new();
    emit_into::<H>(view, proof_kind, lo, hi, kind, &mut out);
    out
}

/// Appends the proof to `out`.
fn emit_into<H: Hasher>(
    view: View<'_>,
    proof_kind: u8,
    lo: u64,
    hi: u64,
    kind: impl Fn(u64) -> LeafKind,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&[FORMAT_VERSION, proof_kind]);
    put_varint(out, u64::from(view.capacity));
    let mut em = Emitter::<H, _> { out, lo, hi, kind, _v: Default::default() };
    match view.root {
        None => em.out.push(T_EMPTY),
        Some(root) => em.node(root, 0),
    }
}

pub(crate) fn below(k: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Unbounded => false,
        Bound::Included(a) => k < a,
        Bound::Excluded(a) => k <= a,
    }
}

pub(crate) fn above(k: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Unbounded => false,
        Bound::Included(b) => k > b,
        Bound::Excluded(b) => k >= b,
    }
}

pub(crate) fn inverted(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a > b,
        _ => false,
    }
}

impl<H: Hasher> Snapshot<H> {
    /// A proof that `key` is present with its current value. On a version with absent
    /// chunks, a key whose chunk is absent is [`ProveError::NotResident`], never
    /// "absent" (the other chunks a proof names are pruned subtrees: count and hash).
    pub fn prove_membership(&self, key: &[u8]) -> Result<Vec<u8>, ProveError> {
        let view = self.view();
        let root = view.root.ok_or(ProveError::KeyAbsent)?;
        let (c, before) = match root.find(key) {
            (Leaf::Body(c), _, before) => (c, before),
            (Leaf::Absent(p), index, _) => return Err(PageRef::new(p, index).into()),
        };
        let i = before + c.search(key).map_err(|_| ProveError::KeyAbsent)? as u64;
        Ok(emit::<H>(view, kind::MEMBERSHIP, i, i + 1, |_| LeafKind::Subject))
    }

    /// A proof that `key` is absent; [`ProveError::KeyPresent`] if it is present, and
    /// [`ProveError::NotResident`] if a chunk the proof needs is absent.
    pub fn prove_absence(&self, key: &[u8]) -> Result<Vec<u8>, ProveError> {
        if self.get(key)?.is_some() {
            return Err(ProveError::KeyPresent);
        }
        Ok(self.range_proof(Bound::Included(key), Bound::Included(key))?)
    }

    /// A proof of every entry with a key within the bounds, nothing omitted.
    pub fn prove_range(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<Vec<u8>, InputError> {
        if inverted(lo, hi) {
            return Err(InputError::InvertedRange);
        }
        Ok(self.range_proof(lo, hi)?)
    }

    /// The range proof of `lo..hi` (not inverted), or the first absent chunk it needs.
    fn range_proof(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<Vec<u8>, PageRef> {
        let (plo, phi, s, e) = self.range_span(lo, hi)?;
        if let Some(p) = self.view().absent_between(plo, phi) {
            return Err(p);
        }
        Ok(emit::<H>(self.view(), kind::RANGE, plo, phi, |i| {
            if i >= s && i < e {
                LeafKind::Value
            } else {
                LeafKind::Hash
            }
        }))
    }

    /// The key indices a range proof covers (`plo..phi`) and those it discloses (`s..e`).
    pub(crate) fn range_span(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<(u64, u64, u64, u64), PageRef> {
        let view = self.view();
        let n = self.len();
        let s = view.try_lower_index(lo)?;
        let e = match hi {
            Bound::Unbounded => n,
            Bound::Included(b) => view.try_lower_index(Bound::Excluded(b))?,
            Bound::Excluded(b) => view.try_lower_index(Bound::Included(b))?,
        };
        // With `(Excluded(a), Excluded(a))` and `a` present, `a` lies below and above the
        // empty range at once (`e < s`): `a` alone is the whole (canonical) proof.
        let (plo, phi) =
            if e < s { (s - 1, s) } else { (s.saturating_sub(1), if e < n { e + 1 } else { n }) };
        Ok((plo, phi, s, e))
    }

    /// Chunk `i` with all its entries and the proof binding it to index `i`, the chunk
    /// count and the root. An absent chunk (a paged version) is
    /// [`ChunkError::NotResident`].
    pub fn export_chunk(&self, i: u64) -> Result<Vec<u8>, ChunkError> {
        let mut out = Vec::new();
        self.export_chunk_into(i, &mut out)?;
        Ok(out)
    }

    /// [`Snapshot::export_chunk`] appended to `out`, for writers that frame many chunks in
    /// one buffer (a checkpoint file, a response): no allocation or copy per chunk. On an
    /// error `out` is unchanged.
    pub fn export_chunk_into(&self, i: u64, out: &mut Vec<u8>) -> Result<(), ChunkError> {
        let view = self.view();
        let count = view.chunk_count();
        let root = view.root.filter(|_| i < count);
        let Some(root) = root else { return Err(ChunkError::OutOfRange { index: i, count }) };
        let (c, before) = match root.chunk_at(i) {
            (Leaf::Body(c), before) => (c, before),
            (Leaf::Absent(p), _) => return Err(PageRef::new(p, i).into()),
        };
        let (lo, hi) = (before, before + c.len() as u64);
        emit_into::<H>(view, kind::CHUNK, lo, hi, |_| LeafKind::Value, out);
        Ok(())
    }
}
