//! The kind rules (`docs/design.md` §3): what a proof of each kind must show once it has
//! decoded and its recomputed root equals the trusted one, and the caller's inputs, which
//! are checked before the proof is read (error kind `Input`). The public verifiers.

use std::ops::Bound;

use super::verify::{walk, VerifiedAbsence, VerifiedChunk, VerifiedMembership, VerifiedRange};
use super::{above, below, inverted, kind, L_HASH, L_VALUE};
use crate::error::{InputError, ProofError};
use crate::hash::{check_key, Digest, Hasher, Key};
use crate::MAX_VALUE_LEN;

/// Verifies that `key` maps to `value` in the tree with root `root`.
pub fn verify_membership<H: Hasher>(
    root: &Digest,
    key: &[u8],
    value: &[u8],
    proof: &[u8],
) -> Result<VerifiedMembership, ProofError> {
    let key = Key::new(key)?;
    if value.len() > MAX_VALUE_LEN {
        return Err(InputError::ValueTooLong { len: value.len(), max: MAX_VALUE_LEN }.into());
    }
    let w = walk::<H>(root, kind::MEMBERSHIP, proof, Some((key, value)), false)?;
    if w.leaves.len() != 1 || !w.subject_used {
        return Err(ProofError::Structure("a membership proof expands exactly its subject"));
    }
    Ok(VerifiedMembership { index: w.leaves[0].index, key_count: w.key_count })
}

/// Verifies a range proof and returns every entry within `lo..hi` (bounds as given).
pub fn verify_range<H: Hasher>(
    root: &Digest,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    proof: &[u8],
) -> Result<VerifiedRange, ProofError> {
    check_bounds(lo, hi)?;
    let w = walk::<H>(root, kind::RANGE, proof, None, false)?;
    let leaves = &w.leaves;
    let n = w.key_count;
    if n == 0 {
        return Ok(VerifiedRange { entries: Vec::new(), key_count: 0 });
    }
    let (Some(first), Some(last)) = (leaves.first(), leaves.last()) else {
        return Err(ProofError::Structure("no leaves"));
    };
    for pair in leaves.windows(2) {
        if pair[1].index != pair[0].index + 1 {
            return Err(ProofError::Structure("leaves are not contiguous"));
        }
        if pair[0].key >= pair[1].key {
            return Err(ProofError::Structure("keys out of order"));
        }
    }
    if !(first.index == 0 || below(first.key.as_bytes(), lo))
        || !(last.index == n - 1 || above(last.key.as_bytes(), hi))
    {
        return Err(ProofError::Structure("range not covered to its bounds"));
    }
    let len = leaves.len();
    if len > 1 && (below(leaves[1].key.as_bytes(), lo) || above(leaves[len - 2].key.as_bytes(), hi))
    {
        return Err(ProofError::Structure("more boundary leaves than needed"));
    }
    let mut entries = Vec::new();
    for leaf in leaves {
        let key = leaf.key.as_bytes();
        let inside = !below(key, lo) && !above(key, hi);
        match (inside, leaf.kind, leaf.value) {
            (true, L_VALUE, Some(v)) => entries.push((key.to_vec(), v.to_vec())),
            (false, L_HASH, None) => {}
            _ => return Err(ProofError::Structure("leaf carries the wrong content for its place")),
        }
    }
    Ok(VerifiedRange { entries, key_count: n })
}

/// The caller's bounds: keys of 1..=1024 bytes, not inverted.
fn check_bounds(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<(), InputError> {
    for b in [lo, hi] {
        if let Bound::Included(k) | Bound::Excluded(k) = b {
            check_key(k)?;
        }
    }
    if inverted(lo, hi) {
        return Err(InputError::InvertedRange);
    }
    Ok(())
}

/// Verifies that `key` is absent from the tree with root `root`.
pub fn verify_absence<H: Hasher>(
    root: &Digest,
    key: &[u8],
    proof: &[u8],
) -> Result<VerifiedAbsence, ProofError> {
    let r = verify_range::<H>(root, Bound::Included(key), Bound::Included(key), proof)?;
    if !r.entries.is_empty() {
        return Err(ProofError::Structure("the key is present"));
    }
    Ok(VerifiedAbsence { key_count: r.key_count })
}

/// Verifies exported chunk bytes as chunk `index` of the tree with root `root`.
pub fn verify_chunk<H: Hasher>(
    root: &Digest,
    index: u64,
    bytes: &[u8],
) -> Result<VerifiedChunk, ProofError> {
    let c = verify_chunk_unindexed::<H>(root, bytes)?;
    if c.index != index {
        return Err(ProofError::WrongIndex { expected: index, found: c.index });
    }
    Ok(c)
}

/// Verifies exported chunk bytes as *some* chunk of the tree with root `root`, and says
/// which: the index is derived from the proof (the keys and chunks of the subtrees to its
/// left), so it is as trustworthy as the rest. For files that hold chunks in any order.
pub fn verify_chunk_unindexed<H: Hasher>(
    root: &Digest,
    bytes: &[u8],
) -> Result<VerifiedChunk, ProofError> {
    let w = walk::<H>(root, kind::CHUNK, bytes, None, true)?;
    let mut chunks = w.chunks;
    let (Some(c), true) = (chunks.pop(), chunks.is_empty()) else {
        return Err(ProofError::Structure("a chunk proof expands exactly one chunk"));
    };
    let (true, Some(chunk), Some(key_height)) = (c.full, c.chunk, w.key_height) else {
        return Err(ProofError::Structure("a chunk proof expands every entry of its chunk"));
    };
    Ok(VerifiedChunk {
        index: c.index,
        chunk_count: w.chunk_count,
        key_count: w.key_count,
        keys_before: c.keys_before,
        key_height,
        capacity: w.capacity,
        root: *root,
        chunk,
    })
}
