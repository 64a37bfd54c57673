//! Model-based tests: random operation sequences against `BTreeMap`, with the structure's
//! invariants, proofs of sampled keys and iteration checked after every commit.

use std::collections::BTreeMap;
use std::ops::Bound;

use bavl_core::{verify_absence, verify_membership, verify_range, ProveError, Sha256, Tree};
use rand::{rngs::SmallRng, Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn random_key(rng: &mut SmallRng, space: u32) -> Vec<u8> {
    let k = rng.gen_range(0..space);
    // Mixed lengths so the packed key buffer and varints see variety.
    let mut key = k.to_be_bytes().to_vec();
    key.truncate(1 + (k % 4) as usize);
    key.push((k % 251) as u8);
    key
}

fn check_against_model(tree: &mut Tree, model: &Model, rng: &mut SmallRng) {
    tree.check().unwrap();
    assert_eq!(tree.len(), model.len() as u64);
    let snap = tree.snapshot();
    tree.check().unwrap();
    let root = snap.root_hash();
    let items: Vec<_> = snap.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    let expect: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(items, expect, "iteration differs from the model");
    for _ in 0..8 {
        let key = random_key(rng, 3000);
        match model.get(&key) {
            Some(v) => {
                assert_eq!(snap.get(&key), Ok(Some(&v[..])));
                let p = snap.prove_membership(&key).unwrap();
                let ok = verify_membership::<Sha256>(&root, &key, v, &p).unwrap();
                assert_eq!(ok.index, model.range(..key.clone()).count() as u64);
                assert!(verify_membership::<Sha256>(&root, &key, b"other", &p).is_err());
                assert_eq!(snap.prove_absence(&key), Err(ProveError::KeyPresent));
            }
            None => {
                assert_eq!(snap.get(&key), Ok(None));
                let p = snap.prove_absence(&key).unwrap();
                let ok = verify_absence::<Sha256>(&root, &key, &p).unwrap();
                assert_eq!(ok.key_count, model.len() as u64);
            }
        }
        let a = random_key(rng, 3000);
        let b = random_key(rng, 3000);
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        let bounds = [
            (Bound::Included(&a[..]), Bound::Excluded(&b[..])),
            (Bound::Excluded(&a[..]), Bound::Included(&b[..])),
            (Bound::Unbounded, Bound::Excluded(&b[..])),
            (Bound::Included(&a[..]), Bound::Unbounded),
        ];
        let (lo, hi) = bounds[rng.gen_range(0..bounds.len())];
        let p = snap.prove_range(lo, hi).unwrap();
        let got = verify_range::<Sha256>(&root, lo, hi, &p).unwrap().entries;
        let want: Vec<_> =
            model.range::<[u8], _>((lo, hi)).map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(got, want, "range {lo:?}..{hi:?}");
        let direct: Vec<_> =
            snap.range(lo, hi).unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(direct, want);
    }
}

fn run(capacity: u32, seed: u64, steps: usize, space: u32) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tree: Tree = Tree::with_capacity(capacity).unwrap();
    let mut model = Model::new();
    for step in 0..steps {
        // Phases: grow, churn, shrink — so splits, borrows and merges all happen.
        let phase = (step * 3) / steps;
        let p_insert = [0.8, 0.5, 0.2][phase];
        let key = random_key(&mut rng, space);
        if rng.gen_bool(p_insert) {
            let value: Vec<u8> = (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect();
            let new = tree.insert(&key, &value).unwrap();
            assert_eq!(new, model.insert(key, value).is_none());
        } else {
            let old = tree.remove(&key);
            assert_eq!(old.as_deref(), model.remove(&key).as_deref());
        }
        if step % 97 == 0 || step + 1 == steps {
            check_against_model(&mut tree, &model, &mut rng);
        }
    }
    // Drain to empty: every key removed, tree back to no chunks.
    let keys: Vec<_> = model.keys().cloned().collect();
    for (i, k) in keys.iter().enumerate() {
        assert!(tree.remove(k).is_some());
        if i % 53 == 0 {
            tree.check().unwrap();
        }
    }
    assert!(tree.is_empty());
    assert_eq!(tree.chunk_count(), 0);
    assert_eq!(tree.root_hash(), Tree::<Sha256>::with_capacity(capacity).unwrap().root_hash());
}

#[test]
fn model_tiny_capacities() {
    for cap in [4, 5, 7] {
        for seed in 0..3 {
            run(cap, seed, 3000, 800);
        }
    }
}

#[test]
fn model_medium_capacities() {
    for cap in [8, 16, 33, 64] {
        run(cap, 11 + cap as u64, 6000, 3000);
    }
}

#[test]
fn model_large_capacity() {
    run(1024, 5, 8000, 3000);
}

#[test]
fn refused_input_changes_nothing() {
    let mut tree: Tree = Tree::with_capacity(4).unwrap();
    tree.insert(b"a", b"1").unwrap();
    let before = tree.root_hash();
    assert!(tree.insert(b"", b"x").is_err());
    assert!(tree.insert(&vec![1u8; bavl_core::MAX_KEY_LEN + 1], b"x").is_err());
    assert!(tree.insert(b"b", &vec![0u8; bavl_core::MAX_VALUE_LEN + 1]).is_err());
    assert_eq!(tree.root_hash(), before);
    assert_eq!(tree.len(), 1);
    assert!(Tree::<Sha256>::with_capacity(3).is_err());
    assert!(Tree::<Sha256>::with_capacity(65_537).is_err());
}

#[test]
fn snapshots_are_unaffected_by_later_writes() {
    let mut tree: Tree = Tree::with_capacity(4).unwrap();
    for i in 0u32..200 {
        tree.insert(&i.to_be_bytes(), b"v1").unwrap();
    }
    let snap = tree.snapshot();
    let root = snap.root_hash();
    for i in 0u32..200 {
        if i % 3 == 0 {
            tree.remove(&i.to_be_bytes());
        } else {
            tree.insert(&i.to_be_bytes(), b"v2").unwrap();
        }
    }
    assert_ne!(tree.root_hash(), root);
    assert_eq!(snap.root_hash(), root);
    assert_eq!(snap.len(), 200);
    assert!(snap.iter().unwrap().all(|(_, v)| v == b"v1"));
    let mut again = snap.to_tree();
    assert_eq!(again.root_hash(), root);
    again.check().unwrap();
}

/// Every combination of bound kinds with equal endpoints, on present and absent keys
/// (found by the `forge` fuzz target: `(Excluded(a), Excluded(a))` with `a` present).
#[test]
fn degenerate_ranges_prove_and_verify() {
    let mut tree: Tree = Tree::with_capacity(4).unwrap();
    for i in (0u32..100).step_by(2) {
        tree.insert(&i.to_be_bytes(), b"v").unwrap();
    }
    let snap = tree.snapshot();
    let root = snap.root_hash();
    for probe in [0u32, 1, 10, 11, 97, 98, 99, 200] {
        let k = probe.to_be_bytes();
        let kinds = [Bound::Included(&k[..]), Bound::Excluded(&k[..])];
        for lo in kinds {
            for hi in kinds {
                let p = snap.prove_range(lo, hi).unwrap();
                let got = verify_range::<Sha256>(&root, lo, hi, &p)
                    .unwrap_or_else(|e| panic!("{probe} {lo:?}..{hi:?}: {e}"))
                    .entries;
                let want: Vec<_> =
                    snap.range(lo, hi).unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                assert_eq!(got, want, "{probe} {lo:?}..{hi:?}");
            }
        }
    }
}
