//! Negative vectors for the rules an independent verifier is most likely to get wrong
//! (`docs/design.md` §3): the minimal boundary of range proofs, the caller's inputs, and
//! the decoder's numeric bounds, each with the error kind it must give.

use std::ops::Bound;

use anyhow::{Context, Result};
use bavl_core::codec::put_varint;
use bavl_core::{Digest, Snapshot};

use super::record::{query, reject_as, Entries};
use super::Negative;
use crate::verify::{Kind, OwnedBound, Query};

/// Proofs that cover a range but carry a boundary leaf too many (`docs/design.md` §3,
/// minimal boundary): both are the proof of `(Excluded(a), Included(a))`, the key `a` and
/// its successor, offered for ranges whose proof is `a` alone.
pub(super) fn boundary_negatives(snap: &Snapshot, entries: &Entries) -> Result<Vec<Negative>> {
    let (root, n) = (snap.root_hash(), entries.len());
    if n < 2 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (i, what) in [(n / 2, "a middle key"), (0, "the first key")] {
        let a = &entries[i].0;
        let proof = snap.prove_range(Bound::Excluded(a), Bound::Included(a))?;
        let q = Query {
            lo: OwnedBound::Excluded(a.clone()),
            hi: OwnedBound::Excluded(a.clone()),
            ..Query::new(Kind::Range)
        };
        let description = format!(
            "range (excluded {what}, excluded {what}) proved by the key and its successor \
             (not minimal: the key alone is the proof)"
        );
        out.push(reject_as("Structure", &root, description, q, proof)?);
    }
    let first = &entries[0].0;
    if first.as_slice() > [0u8].as_slice() {
        let proof = snap.prove_range(Bound::Excluded(first), Bound::Included(first))?;
        let q = Query {
            lo: OwnedBound::Included(vec![0]),
            hi: OwnedBound::Included(vec![0]),
            ..Query::new(Kind::Range)
        };
        let description = "range [00, 00] below every key proved by the first two keys \
                           (not minimal: the first key alone is the proof)"
            .into();
        out.push(reject_as("Structure", &root, description, q, proof)?);
    }
    Ok(out)
}

/// Caller inputs outside the limits, with otherwise valid proofs: kind Input.
pub(super) fn input_negatives(
    snap: &Snapshot,
    entries: &Entries,
    membership: &[u8],
) -> Result<Vec<Negative>> {
    let root = snap.root_hash();
    let long = vec![b'k'; bavl_core::MAX_KEY_LEN + 1];
    let (key, value) = &entries[entries.len() / 2];
    let all = snap.prove_range(Bound::Unbounded, Bound::Unbounded)?;
    let absent = [key.clone(), vec![0]].concat();
    let ap = snap.prove_absence(&absent).context("absent")?;
    let range = |lo, hi| Query { lo, hi, ..Query::new(Kind::Range) };
    let cases = [
        ("membership of the empty key", query(Kind::Membership, b"", value), membership.to_vec()),
        (
            "membership of a 1025-byte key",
            query(Kind::Membership, &long, value),
            membership.to_vec(),
        ),
        ("absence of the empty key", query(Kind::Absence, b"", b""), ap.clone()),
        ("absence of a 1025-byte key", query(Kind::Absence, &long, b""), ap),
        (
            "range with an empty lower bound key",
            range(OwnedBound::Included(Vec::new()), OwnedBound::Unbounded),
            all.clone(),
        ),
        (
            "range with a 1025-byte upper bound key",
            range(OwnedBound::Unbounded, OwnedBound::Excluded(long.clone())),
            all.clone(),
        ),
        (
            "inverted range (lower bound key above the upper)",
            range(OwnedBound::Included(vec![2]), OwnedBound::Included(vec![1])),
            all,
        ),
    ];
    cases
        .into_iter()
        .map(|(what, q, proof)| reject_as("Input", &root, what.into(), q, proof))
        .collect()
}

/// Hand-made range proofs at the decoder's numeric bounds: an inner node (height 1) over a
/// pruned subtree claiming `keys` keys in `chunks` chunks and a one-entry chunk. Within
/// the bounds they decode and fail only the root (`RootMismatch`); one past, `Decode`.
pub(super) fn decoder_bound_negatives(root: &Digest) -> Result<Vec<Negative>> {
    let proof = |keys: u64, chunks: u64| {
        let mut p = vec![1, 2, 4, 0x01, 1, 0x03];
        put_varint(&mut p, keys);
        put_varint(&mut p, chunks);
        p.extend_from_slice(&[0x5a; 32]);
        p.extend_from_slice(&[0x02, 1, 0, 1, 0x01, 1, b'a', 0]);
        p
    };
    let max = (1u64 << 48) - 1;
    let all = || Query::new(Kind::Range);
    Ok(vec![
        reject_as(
            "RootMismatch",
            root,
            "pruned subtree of 2^48 - 1 keys (the largest count the decoder takes)".into(),
            all(),
            proof(max, 2),
        )?,
        reject_as("Decode", root, "pruned subtree of 2^48 keys".into(), all(), proof(max + 1, 2))?,
        reject_as(
            "Decode",
            root,
            "pruned subtree of more chunks than keys".into(),
            all(),
            proof(3, 4),
        )?,
        reject_as(
            "Decode",
            root,
            "pruned single chunk of more keys than the capacity (4)".into(),
            all(),
            proof(5, 1),
        )?,
        reject_as(
            "RootMismatch",
            root,
            "pruned single chunk of exactly the capacity (4)".into(),
            all(),
            proof(4, 1),
        )?,
    ])
}
