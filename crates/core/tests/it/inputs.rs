//! Caller inputs (`docs/design.md` §3, "Caller inputs"): a key, value or bound key outside
//! the limits is refused with `ProofError::Input` before the proof is read, even against
//! a root that commits a leaf with such a key (built here by hand, since no tree can hold
//! one), and whatever the proof bytes are.

use std::ops::Bound;

use bavl_core::hash::{chunk_hash, root_hash, tag, value_hash};
use bavl_core::{
    verify_absence, verify_membership, verify_range, Digest, Hasher, InputError, ProofError,
    Sha256, Tree, MAX_KEY_LEN,
};

/// The root of a one-chunk, one-entry tree of capacity 4 whose key is `key`, hashed by the
/// specification's leaf input with the key length written as two bytes (wrapping, as a
/// careless implementation would), and the membership proof of that entry.
fn forged_one_leaf(key: &[u8], value: &[u8]) -> (Digest, Vec<u8>) {
    let mut h = Sha256::default();
    h.update(&[tag::LEAF]);
    h.update(&(key.len() as u16).to_be_bytes());
    h.update(key);
    h.update(&value_hash::<Sha256>(value));
    let leaf = h.finalize();
    let root = root_hash::<Sha256>(4, &chunk_hash::<Sha256>(1, &leaf));
    // version, kind membership, capacity 4, expanded chunk: n 1, p 0, q 1, subject leaf.
    (root, vec![1, 1, 4, 0x02, 1, 0, 1, 0x02])
}

#[test]
fn the_forged_tree_is_built_as_the_verifier_reads_it() {
    // The same construction with a valid key verifies: the refusals below are the inputs'.
    let (root, proof) = forged_one_leaf(b"k", b"v");
    let m = verify_membership::<Sha256>(&root, b"k", b"v", &proof).unwrap();
    assert_eq!((m.index, m.key_count), (0, 1));
}

#[test]
fn membership_refuses_keys_outside_the_limits() {
    let too_long = vec![b'x'; MAX_KEY_LEN + 1];
    let wraps = vec![b'x'; 1 << 16]; // its u16 length wraps to 0
    for (key, want) in [
        (&b""[..], InputError::EmptyKey),
        (&too_long[..], InputError::KeyTooLong { len: MAX_KEY_LEN + 1, max: MAX_KEY_LEN }),
        (&wraps[..], InputError::KeyTooLong { len: 1 << 16, max: MAX_KEY_LEN }),
    ] {
        let (root, proof) = forged_one_leaf(key, b"v");
        let got = verify_membership::<Sha256>(&root, key, b"v", &proof);
        assert_eq!(got, Err(ProofError::Input(want)), "key of {} bytes", key.len());
        assert_eq!(got.unwrap_err().kind(), "Input");
    }
}

#[test]
fn membership_refuses_an_oversized_value_before_reading_the_proof() {
    let value = vec![0u8; bavl_core::MAX_VALUE_LEN + 1];
    let got = verify_membership::<Sha256>(&[0; 32], b"k", &value, b"garbage");
    assert!(matches!(got, Err(ProofError::Input(InputError::ValueTooLong { .. }))), "{got:?}");
}

fn input<T>(r: Result<T, ProofError>) -> bool {
    matches!(r, Err(ProofError::Input(_)))
}

#[test]
fn range_and_absence_refuse_bad_bound_keys_and_inverted_ranges() {
    let mut tree = Tree::with_capacity(4).unwrap();
    for i in 0u8..20 {
        tree.insert(&[b'a' + i], b"v").unwrap();
    }
    let snap = tree.snapshot();
    let root = snap.root_hash();
    let proof = snap.prove_range(Bound::Unbounded, Bound::Unbounded).unwrap();
    let long = vec![b'b'; MAX_KEY_LEN + 1];
    let un = Bound::Unbounded;
    assert!(input(verify_range::<Sha256>(&root, Bound::Included(b""), un, &proof)));
    assert!(input(verify_range::<Sha256>(&root, un, Bound::Excluded(b""), &proof)));
    assert!(input(verify_range::<Sha256>(&root, Bound::Included(&long), un, &proof)));
    assert!(input(verify_range::<Sha256>(&root, un, Bound::Included(&long), &proof)));
    assert_eq!(
        verify_range::<Sha256>(&root, Bound::Included(b"c"), Bound::Excluded(b"b"), &proof)
            .map(|r| r.entries),
        Err(ProofError::Input(InputError::InvertedRange))
    );
    assert!(input(verify_absence::<Sha256>(&root, b"", &proof)));
    assert!(input(verify_absence::<Sha256>(&root, &long, &proof)));
    // Unbounded on both sides stays valid, and 1024-byte bound keys are fine.
    let max = vec![b'z'; MAX_KEY_LEN];
    let all = verify_range::<Sha256>(&root, un, Bound::Included(&max), &proof).unwrap();
    assert_eq!(all.entries.len(), 20);
}

#[test]
fn error_kinds_are_the_documented_six() {
    assert_eq!(
        ProofError::KINDS,
        ["Input", "Decode", "WrongKind", "Structure", "RootMismatch", "WrongIndex"]
    );
    assert_eq!(ProofError::RootMismatch.kind(), "RootMismatch");
    assert_eq!(ProofError::Input(InputError::EmptyKey).kind(), "Input");
}
