//! Mutation tests: every single-byte change, truncation or extension of a valid proof or
//! chunk must be rejected.

use std::ops::Bound;

use bavl_core::{
    verify_absence, verify_chunk, verify_membership, verify_range, Sha256, Snapshot, Tree,
};

fn snapshot(capacity: u32, keys: u32) -> Snapshot {
    let mut tree: Tree = Tree::with_capacity(capacity).unwrap();
    for i in 0..keys {
        let k = (i * 7 + 3).to_be_bytes();
        tree.insert(&k, format!("value-{i}").as_bytes()).unwrap();
    }
    tree.snapshot()
}

/// Calls `accept` on every single-byte variant of `bytes` (all 255 other values at every
/// position), every truncation and one extension; each must be rejected.
fn assert_all_mutations_rejected(bytes: &[u8], accept: impl Fn(&[u8]) -> bool, what: &str) {
    assert!(accept(bytes), "{what}: the unmodified bytes must verify");
    let mut m = bytes.to_vec();
    for pos in 0..bytes.len() {
        for delta in 1..=255u8 {
            m[pos] = bytes[pos].wrapping_add(delta);
            assert!(!accept(&m), "{what}: accepted with byte {pos} changed to {:#04x}", m[pos]);
        }
        m[pos] = bytes[pos];
    }
    for len in 0..bytes.len() {
        assert!(!accept(&bytes[..len]), "{what}: accepted truncated to {len} bytes");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(!accept(&longer), "{what}: accepted with a byte appended");
}

#[test]
fn membership_proofs_reject_every_mutation() {
    for (cap, n) in [(4, 1), (4, 37), (5, 90), (16, 300)] {
        let snap = snapshot(cap, n);
        let root = snap.root_hash();
        for i in [0, n / 2, n - 1] {
            let key = (i * 7 + 3).to_be_bytes();
            let value = format!("value-{i}");
            let proof = snap.prove_membership(&key).unwrap();
            assert_all_mutations_rejected(
                &proof,
                |p| verify_membership::<Sha256>(&root, &key, value.as_bytes(), p).is_ok(),
                &format!("membership cap {cap} n {n} key {i}"),
            );
        }
    }
}

#[test]
fn absence_proofs_reject_every_mutation() {
    for (cap, n) in [(4, 0), (4, 1), (4, 37), (7, 120)] {
        let snap = snapshot(cap, n);
        let root = snap.root_hash();
        // Below the first key, between keys, above the last key.
        for probe in [0u32, 5, 7 * n + 10] {
            let key = probe.to_be_bytes();
            let proof = snap.prove_absence(&key).unwrap();
            assert_all_mutations_rejected(
                &proof,
                |p| verify_absence::<Sha256>(&root, &key, p).is_ok(),
                &format!("absence cap {cap} n {n} probe {probe}"),
            );
        }
    }
}

#[test]
fn range_proofs_reject_every_mutation() {
    let snap = snapshot(4, 60);
    let root = snap.root_hash();
    let (a, b) = (40u32.to_be_bytes(), 150u32.to_be_bytes());
    for (lo, hi) in [
        (Bound::Included(&a[..]), Bound::Excluded(&b[..])),
        (Bound::Unbounded, Bound::Included(&a[..])),
        (Bound::Excluded(&b[..]), Bound::Unbounded),
    ] {
        let proof = snap.prove_range(lo, hi).unwrap();
        let expect = verify_range::<Sha256>(&root, lo, hi, &proof).unwrap();
        assert!(!expect.entries.is_empty());
        assert_all_mutations_rejected(
            &proof,
            |p| verify_range::<Sha256>(&root, lo, hi, p).is_ok(),
            &format!("range {lo:?}..{hi:?}"),
        );
    }
}

#[test]
fn chunks_reject_every_mutation() {
    for (cap, n) in [(4, 1), (4, 30), (6, 80)] {
        let snap = snapshot(cap, n);
        let root = snap.root_hash();
        for i in 0..snap.chunk_count() {
            let bytes = snap.export_chunk(i).unwrap();
            assert_all_mutations_rejected(
                &bytes,
                |b| verify_chunk::<Sha256>(&root, i, b).is_ok(),
                &format!("chunk {i} cap {cap} n {n}"),
            );
        }
    }
}

#[test]
fn proofs_of_one_kind_are_not_accepted_as_another() {
    let snap = snapshot(4, 40);
    let root = snap.root_hash();
    let key = 11u32.to_be_bytes();
    let member = snap.prove_membership(&(3u32).to_be_bytes()).unwrap();
    let absent = snap.prove_absence(&key).unwrap();
    let chunk = snap.export_chunk(0).unwrap();
    assert!(verify_absence::<Sha256>(&root, &key, &member).is_err());
    assert!(verify_chunk::<Sha256>(&root, 0, &absent).is_err());
    assert!(verify_membership::<Sha256>(&root, &key, b"x", &chunk).is_err());
    // A valid chunk checked against another index, or another version's root.
    assert!(matches!(
        verify_chunk::<Sha256>(&root, 1, &chunk),
        Err(bavl_core::ProofError::WrongIndex { expected: 1, found: 0 })
    ));
    let other = snapshot(4, 41).root_hash();
    assert_eq!(
        verify_chunk::<Sha256>(&other, 0, &chunk).err(),
        Some(bavl_core::ProofError::RootMismatch)
    );
}
