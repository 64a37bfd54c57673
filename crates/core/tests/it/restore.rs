//! Rebuilding from chunks: any arrival order gives the identical tree (same root, same
//! future); duplicate, missing, foreign and out-of-range chunks are clear errors that
//! leave the restore unchanged.

use bavl_core::{ChunkError, ProofError, Restore, RestoreError, Sha256, Snapshot, Tree};
use rand::{rngs::SmallRng, seq::SliceRandom, Rng, SeedableRng};

fn build(capacity: u32, n: u32, seed: u64) -> Tree {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tree: Tree = Tree::with_capacity(capacity).unwrap();
    for _ in 0..n {
        let k: [u8; 6] = rng.gen();
        tree.insert(&k, &k[..rng.gen_range(0..6)]).unwrap();
    }
    tree
}

fn restore_shuffled(snap: &Snapshot, seed: u64) -> Tree {
    let mut order: Vec<u64> = (0..snap.chunk_count()).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(seed));
    let mut r = Restore::<Sha256>::new(snap.root_hash());
    for (done, &i) in order.iter().enumerate() {
        let p = r.add_chunk(i, &snap.export_chunk(i).unwrap()).unwrap();
        assert_eq!(p.received, done as u64 + 1);
        assert_eq!(p.total, snap.chunk_count());
    }
    assert!(r.is_complete());
    r.finish(snap.capacity()).unwrap()
}

/// Applies the same random operations to both trees, comparing roots after each block.
fn assert_same_future(a: &mut Tree, b: &mut Tree, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..20 {
        for _ in 0..50 {
            let k: [u8; 6] = rng.gen();
            if rng.gen_bool(0.6) {
                a.insert(&k, b"next").unwrap();
                b.insert(&k, b"next").unwrap();
            } else {
                // Remove an existing key half the time.
                let existing = a
                    .iter()
                    .unwrap()
                    .nth(rng.gen_range(0..a.len().max(1)) as usize)
                    .map(|(k, _)| k.to_vec());
                let key = existing.filter(|_| rng.gen_bool(0.5)).unwrap_or(k.to_vec());
                assert_eq!(a.remove(&key).is_some(), b.remove(&key).is_some());
            }
        }
        assert_eq!(a.root_hash(), b.root_hash(), "futures diverged");
        b.check().unwrap();
    }
}

#[test]
fn any_order_gives_the_identical_tree_and_future() {
    for (cap, n) in [(4, 1), (4, 2), (4, 500), (5, 777), (7, 300), (64, 5000), (1024, 3000)] {
        let mut tree = build(cap, n, cap as u64 * 31 + n as u64);
        let snap = tree.snapshot();
        for seed in 0..3 {
            let mut rebuilt = restore_shuffled(&snap, seed);
            assert_eq!(rebuilt.root_hash(), snap.root_hash());
            rebuilt.check().unwrap();
            assert!(rebuilt.iter().unwrap().eq(snap.iter().unwrap()));
            if seed == 0 {
                assert_same_future(&mut tree.clone(), &mut rebuilt, n as u64);
            }
        }
    }
}

#[test]
fn empty_tree_restores_from_no_chunks() {
    let mut empty: Tree = Tree::with_capacity(8).unwrap();
    let r = Restore::<Sha256>::new(empty.root_hash());
    let mut t = r.finish(8).unwrap();
    assert_eq!(t.root_hash(), empty.root_hash());
    // With the wrong capacity, the empty root does not match.
    assert!(Restore::<Sha256>::new(empty.root_hash()).finish(9).is_err());
}

#[test]
fn bad_chunks_are_clear_errors_that_change_nothing() {
    let mut tree = build(4, 200, 1);
    let snap = tree.snapshot();
    let root = snap.root_hash();
    let m = snap.chunk_count();
    let mut r = Restore::<Sha256>::new(root);
    r.add_chunk(3, &snap.export_chunk(3).unwrap()).unwrap();

    // Duplicate.
    assert_eq!(r.add_chunk(3, &snap.export_chunk(3).unwrap()), Err(RestoreError::Duplicate(3)));
    // Valid chunk, wrong index.
    let e = r.add_chunk(4, &snap.export_chunk(5).unwrap()).unwrap_err();
    assert!(matches!(
        e,
        RestoreError::Invalid {
            index: 4,
            source: ProofError::WrongIndex { expected: 4, found: 5 }
        }
    ));
    // Out of range.
    assert!(matches!(
        r.add_chunk(m, &snap.export_chunk(0).unwrap()),
        Err(RestoreError::OutOfRange { .. })
    ));
    // Another version of the same tree.
    tree.insert(b"new key", b"v").unwrap();
    let next = tree.snapshot();
    let e = r.add_chunk(0, &next.export_chunk(0).unwrap()).unwrap_err();
    assert!(matches!(e, RestoreError::Invalid { source: ProofError::RootMismatch, .. }));
    // Another tree altogether, truncated bytes, garbage.
    let foreign = build(4, 200, 2).snapshot();
    assert!(r.add_chunk(1, &foreign.export_chunk(1).unwrap()).is_err());
    let good = snap.export_chunk(1).unwrap();
    assert!(r.add_chunk(1, &good[..good.len() - 1]).is_err());
    assert!(r.add_chunk(1, b"not a chunk").is_err());
    assert!(r.add_chunk(1, &[]).is_err());

    // A chunk verified against another root is refused by `add_verified`.
    let elsewhere = bavl_core::verify_chunk::<Sha256>(
        &foreign.root_hash(),
        1,
        &foreign.export_chunk(1).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        r.add_verified(elsewhere),
        Err(RestoreError::Invalid { source: ProofError::RootMismatch, .. })
    ));

    // None of that changed anything: one chunk held, the rest missing.
    assert_eq!(r.missing().count() as u64, m - 1);
    let mut partial = Restore::<Sha256>::new(root);
    partial.add_chunk(0, &snap.export_chunk(0).unwrap()).unwrap();
    assert!(
        matches!(partial.finish(4), Err(RestoreError::Missing { missing, first: 1, .. }) if missing == m - 1)
    );

    // Finish the original restore properly.
    for i in 0..m {
        if i != 3 {
            r.add_chunk(i, &snap.export_chunk(i).unwrap()).unwrap();
        }
    }
    let mut t = r.finish(4).unwrap();
    assert_eq!(t.root_hash(), root);
}

#[test]
fn verified_chunks_report_their_place() {
    let mut tree = build(5, 300, 9);
    let snap = tree.snapshot();
    let mut keys_before = 0;
    for i in 0..snap.chunk_count() {
        let c =
            bavl_core::verify_chunk::<Sha256>(&snap.root_hash(), i, &snap.export_chunk(i).unwrap())
                .unwrap();
        assert_eq!((c.index, c.chunk_count, c.key_count), (i, snap.chunk_count(), snap.len()));
        assert_eq!(c.keys_before, keys_before);
        assert_eq!(c.key_height == 0, i == 0);
        assert_eq!(c.capacity, 5);
        keys_before += c.len() as u64;
    }
    assert_eq!(keys_before, snap.len());
}

#[test]
fn unindexed_chunks_say_which_they_are_and_restore_in_any_order() {
    let mut tree = build(6, 400, 11);
    let snap = tree.snapshot();
    let root = snap.root_hash();
    let mut order: Vec<u64> = (0..snap.chunk_count()).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(3));
    let mut r = Restore::<Sha256>::new(root);
    for &i in &order {
        let bytes = snap.export_chunk(i).unwrap();
        let c = bavl_core::verify_chunk_unindexed::<Sha256>(&root, &bytes).unwrap();
        assert_eq!(c.index, i);
        // The same as verifying it at its index; any other index is refused.
        let at = bavl_core::verify_chunk::<Sha256>(&root, i, &bytes).unwrap();
        assert_eq!((at.index, at.keys_before), (c.index, c.keys_before));
        let other = (i + 1) % snap.chunk_count();
        assert!(matches!(
            bavl_core::verify_chunk::<Sha256>(&root, other, &bytes),
            Err(ProofError::WrongIndex { .. })
        ));
        // A flipped byte anywhere is refused.
        let mut bad = bytes.clone();
        let at = (i as usize * 7) % bad.len();
        bad[at] ^= 0x20;
        assert!(bavl_core::verify_chunk_unindexed::<Sha256>(&root, &bad).is_err());
        r.add_verified(c.clone()).unwrap();
        assert!(matches!(r.add_verified(c), Err(RestoreError::Duplicate(d)) if d == i));
    }
    assert_eq!(r.finish(6).unwrap().root_hash(), root);
}

#[cfg(feature = "blake3")]
#[test]
fn blake3_trees_prove_and_restore() {
    use bavl_core::{verify_membership, Blake3};
    let mut tree = Tree::<Blake3>::with_capacity_and_hasher(8).unwrap();
    for i in 0u32..500 {
        tree.insert(&i.to_be_bytes(), b"v").unwrap();
    }
    let snap = tree.snapshot();
    let mut sha = build(8, 0, 0);
    assert_ne!(snap.root_hash(), sha.root_hash());
    let p = snap.prove_membership(&7u32.to_be_bytes()).unwrap();
    let _ = verify_membership::<Blake3>(&snap.root_hash(), &7u32.to_be_bytes(), b"v", &p).unwrap();
    assert!(verify_membership::<Sha256>(&snap.root_hash(), &7u32.to_be_bytes(), b"v", &p).is_err());
    let mut r = Restore::<Blake3>::new(snap.root_hash());
    for i in 0..snap.chunk_count() {
        r.add_chunk(i, &snap.export_chunk(i).unwrap()).unwrap();
    }
    assert_eq!(r.finish(8).unwrap().root_hash(), snap.root_hash());
}

#[test]
fn chunks_exported_into_one_buffer_are_the_chunks_exported_alone() {
    let mut tree = build(16, 2_000, 5);
    let snap = tree.snapshot();
    let mut buf = b"prefix".to_vec();
    let mut ends = Vec::new();
    for i in 0..snap.chunk_count() {
        snap.export_chunk_into(i, &mut buf).unwrap();
        ends.push(buf.len());
    }
    let mut start = b"prefix".len();
    for (i, end) in ends.into_iter().enumerate() {
        assert_eq!(buf[start..end], snap.export_chunk(i as u64).unwrap()[..], "chunk {i}");
        start = end;
    }
    // No chunk past the end, nor of an empty tree: the buffer is left as it was.
    let len = buf.len();
    let n = snap.chunk_count();
    let out_of_range = Err(ChunkError::OutOfRange { index: n, count: n });
    assert_eq!(snap.export_chunk_into(n, &mut buf), out_of_range);
    let out_of_range = Err(ChunkError::OutOfRange { index: 0, count: 0 });
    assert_eq!(Tree::new().snapshot().export_chunk_into(0, &mut buf), out_of_range);
    assert_eq!(buf.len(), len);
}
