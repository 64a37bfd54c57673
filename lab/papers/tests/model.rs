//! Model-based tests of every structure against a `BTreeMap`: random inserts, updates and
//! removals compared step by step; invariants (`check`) after every step; membership
//! proofs that verify and fail when tampered with; chunks that verify one by one (or, for
//! the baseline, cannot) and rebuild the identical structure, which then evolves
//! identically.

use std::collections::BTreeMap;

use bavl_papers::{AuthStructure, AvlPlus, AvlStar, Bavl, MerkleBTree, VerifyError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(rng: &mut ChaCha8Rng, space: u32) -> Vec<u8> {
    rng.gen_range(0..space).to_be_bytes().to_vec()
}

fn value(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let n = rng.gen_range(0..40);
    (0..n).map(|_| rng.gen()).collect()
}

/// One random operation applied to both; panics on any divergence.
fn step<S: AuthStructure>(s: &mut S, m: &mut Model, rng: &mut ChaCha8Rng, space: u32, del: f64) {
    let k = key(rng, space);
    if rng.gen_bool(del) {
        assert_eq!(s.remove(&k), m.remove(&k), "{}: remove {k:?}", S::NAME);
    } else {
        let v = value(rng);
        assert_eq!(s.insert(&k, &v), m.insert(k.clone(), v).is_none(), "{}: insert", S::NAME);
    }
    assert_eq!(s.len(), m.len() as u64, "{}: len", S::NAME);
    let probe = key(rng, space);
    assert_eq!(s.get(&probe), m.get(&probe).map(|v| &v[..]), "{}: get", S::NAME);
}

fn same_contents<S: AuthStructure>(s: &S, m: &Model) {
    for (k, v) in m {
        assert_eq!(s.get(k), Some(&v[..]), "{}: get {k:?}", S::NAME);
    }
    assert_eq!(s.len(), m.len() as u64);
}

/// Proofs of a few keys verify; a wrong value, a flipped byte or a foreign root fail.
fn proofs<S: AuthStructure>(s: &mut S, m: &Model, rng: &mut ChaCha8Rng) {
    let root = s.root_hash();
    let keys: Vec<&Vec<u8>> = m.keys().collect();
    for _ in 0..4.min(keys.len()) {
        let k = keys[rng.gen_range(0..keys.len())];
        let v = &m[k];
        let p = s.prove(k).expect("present key has a proof");
        S::verify(&root, k, v, &p.bytes).unwrap_or_else(|e| panic!("{}: {e}", S::NAME));
        let mut wrong = v.clone();
        wrong.push(1);
        assert!(S::verify(&root, k, &wrong, &p.bytes).is_err(), "{}: wrong value", S::NAME);
        let mut bad = p.bytes.clone();
        let i = rng.gen_range(0..bad.len());
        bad[i] ^= 1 << rng.gen_range(0..8);
        assert!(S::verify(&root, k, v, &bad).is_err(), "{}: flipped byte {i}", S::NAME);
        let mut other = root;
        other[0] ^= 1;
        assert!(S::verify(&other, k, v, &p.bytes).is_err(), "{}: other root", S::NAME);
    }
}

/// Export, verify each chunk (or learn it cannot be), rebuild, compare, evolve both.
fn transfer<S: AuthStructure + Clone>(s: &mut S, cap: usize, m: &Model, rng: &mut ChaCha8Rng) {
    let root = s.root_hash();
    let chunks = s.export_chunks();
    assert_eq!(chunks.len() as u64, if m.is_empty() { 0 } else { s.space().chunks });
    for (i, c) in chunks.iter().enumerate() {
        let r = S::verify_chunk(&root, i as u64, c);
        if S::SELF_VERIFIABLE_CHUNKS {
            r.unwrap_or_else(|e| panic!("{}: chunk {i}: {e}", S::NAME));
            let mut bad = c.clone();
            let j = rng.gen_range(0..bad.len());
            bad[j] ^= 1 << rng.gen_range(0..8);
            assert!(S::verify_chunk(&root, i as u64, &bad).is_err(), "{}: chunk byte", S::NAME);
        } else {
            assert_eq!(r, Err(VerifyError::Unverifiable));
        }
    }
    let mut back = S::restore(&root, cap, &chunks).unwrap_or_else(|e| panic!("{}: {e}", S::NAME));
    back.check().unwrap();
    assert_eq!(back.root_hash(), root, "{}: rebuilt root", S::NAME);
    same_contents(&back, m);
    if !chunks.is_empty() {
        // A tampered chunk fails the rebuild (for the baseline: only there).
        let mut bad = chunks.clone();
        let i = rng.gen_range(0..bad.len());
        let j = rng.gen_range(0..bad[i].len());
        bad[i][j] ^= 1 << rng.gen_range(0..8);
        assert!(S::restore(&root, cap, &bad).is_err(), "{}: tampered rebuild", S::NAME);
    }
    // The rebuilt structure has the same future.
    let (mut a, mut ma) = (s.clone(), m.clone());
    let mut seed = ChaCha8Rng::seed_from_u64(rng.gen());
    let mut seed2 = seed.clone();
    let mut mb = m.clone();
    for _ in 0..50 {
        step(&mut a, &mut ma, &mut seed, 300, 0.3);
        step(&mut back, &mut mb, &mut seed2, 300, 0.3);
        assert_eq!(a.root_hash(), back.root_hash(), "{}: same future", S::NAME);
    }
}

fn model<S: AuthStructure + Clone>(cap: usize, seed: u64, ops: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = S::with_capacity(cap);
    let mut m = Model::new();
    for i in 0..ops {
        // Phases: grow, churn, shrink — so splits, rotations and emptied chunks all occur.
        let del = match i * 3 / ops {
            0 => 0.1,
            1 => 0.45,
            _ => 0.8,
        };
        step(&mut s, &mut m, &mut rng, 300, del);
        s.check().unwrap_or_else(|e| panic!("{} step {i}: {e}", S::NAME));
        if i % 97 == 0 {
            proofs(&mut s, &m, &mut rng);
        }
        if i % 331 == 0 {
            transfer(&mut s, cap, &m, &mut rng);
        }
        if i % 53 == 0 {
            s.root_hash();
            s.check().unwrap_or_else(|e| panic!("{} hashes at step {i}: {e}", S::NAME));
        }
    }
    same_contents(&s, &m);
    transfer(&mut s, cap, &m, &mut rng);
}

#[test]
fn avl_star_against_btreemap() {
    for (cap, seed) in [(2, 1), (4, 2), (8, 3), (16, 4)] {
        model::<AvlStar>(cap, seed, 3000);
    }
}

#[test]
fn merkle_btree_against_btreemap() {
    for (cap, seed) in [(4, 1), (5, 2), (8, 3), (16, 4)] {
        model::<MerkleBTree>(cap, seed, 3000);
    }
}

#[test]
fn avl_plus_against_btreemap() {
    for (cap, seed) in [(1, 1), (4, 2), (16, 3)] {
        model::<AvlPlus>(cap, seed, 3000);
    }
}

#[test]
fn bavl_against_btreemap() {
    for (cap, seed) in [(4, 1), (16, 2)] {
        model::<Bavl>(cap, seed, 3000);
    }
}
