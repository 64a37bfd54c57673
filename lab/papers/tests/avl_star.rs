//! AVL*-specific properties: the algorithms' special cases really occur (splits before
//! rotations, emptied chunks renumbered), every chunk validates alone and in any order,
//! every single-byte mutation of a chunk is rejected, and the height-ordered rebuild gives
//! the same root; the baseline's chunks, in contrast, are only checked by a full import.

use bavl_papers::{AuthStructure, AvlPlus, AvlStar, VerifyError};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn build(cap: usize, n: u32, seed: u64) -> AvlStar {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = AvlStar::with_capacity(cap);
    for _ in 0..n {
        let k: u32 = rng.gen_range(0..n * 4);
        t.insert(&k.to_be_bytes(), &k.to_le_bytes());
    }
    t
}

#[test]
fn rotation_splits_and_renumbering_happen_and_keep_property_1() {
    let mut t = build(8, 3000, 7);
    t.check().unwrap();
    assert!(t.rotation_splits > 0, "splits before rotations occur");
    assert!(t.splits > t.rotation_splits);
    // Remove most keys: chunks empty out and the highest ids move into their places.
    let before = t.chunk_count();
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    for _ in 0..20_000 {
        let k: u32 = rng.gen_range(0..12_000);
        if t.remove(&k.to_be_bytes()).is_some() {
            t.check().unwrap();
        }
    }
    // AVL* never merges chunks: only emptied ones disappear (and are renumbered).
    assert!(t.chunk_count() < before, "{} of {before} chunks left", t.chunk_count());
    let root = t.root_hash();
    t.check().unwrap();
    let chunks = t.export_chunks();
    let back = AvlStar::restore(&root, 8, &chunks).unwrap();
    back.check().unwrap();
}

#[test]
fn chunks_validate_alone_in_any_order_and_rebuild_the_same_root() {
    for cap in [2, 5, 16, 64] {
        let mut t = build(cap, 2000, cap as u64);
        let root = t.root_hash();
        let chunks = t.export_chunks();
        let mut order: Vec<usize> = (0..chunks.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(1));
        for &i in &order {
            AvlStar::verify_chunk(&root, i as u64, &chunks[i]).unwrap();
            // A chunk offered under another index fails.
            let j = (i + 1) % chunks.len();
            if j != i {
                assert!(AvlStar::verify_chunk(&root, j as u64, &chunks[i]).is_err());
            }
        }
        let mut back = AvlStar::restore(&root, cap, &chunks).unwrap();
        assert_eq!(back.root_hash(), root);
        assert_eq!(back.chunk_count(), t.chunk_count());
    }
}

#[test]
fn every_byte_of_a_chunk_is_bound() {
    let mut t = build(6, 400, 3);
    let root = t.root_hash();
    let chunks = t.export_chunks();
    for i in [0, chunks.len() / 2, chunks.len() - 1] {
        let c = &chunks[i];
        for b in 0..c.len() {
            let mut bad = c.clone();
            bad[b] ^= 0x01;
            assert!(AvlStar::verify_chunk(&root, i as u64, &bad).is_err(), "chunk {i} byte {b}");
        }
        assert!(AvlStar::verify_chunk(&root, i as u64, &c[..c.len() - 1]).is_err());
    }
}

#[test]
fn baseline_chunks_are_checked_only_by_the_full_import() {
    let mut t = AvlPlus::with_capacity(16);
    for k in 0u32..1000 {
        t.insert(&k.to_be_bytes(), b"v");
    }
    let root = t.root_hash();
    let mut chunks = t.export_chunks();
    assert_eq!(chunks.len(), 63);
    assert_eq!(AvlPlus::verify_chunk(&root, 0, &chunks[0]), Err(VerifyError::Unverifiable));
    let mut back = AvlPlus::restore(&root, 16, &chunks).unwrap();
    assert_eq!(back.root_hash(), root);
    // One forged value in the last chunk: detected only after every chunk was imported.
    let last = chunks.len() - 1;
    let n = chunks[last].len();
    chunks[last][n - 1] ^= 1;
    assert!(AvlPlus::restore(&root, 16, &chunks).is_err());
}
