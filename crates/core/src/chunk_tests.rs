//! Tests of the chunk: incremental rehash against RFC 6962, search, copies.
use super::*;
use crate::hash::{chunk_hash, chunk_node_hash, leaf_hash_of, Key, Sha256};

/// Reference: the RFC 6962 tree hash computed from scratch.
fn reference(leaves: &[Digest]) -> Digest {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let k = split_point(leaves.len());
    chunk_node_hash::<Sha256>(&reference(&leaves[..k]), &reference(&leaves[k..]))
}

fn fresh_root(c: &Chunk) -> Digest {
    let leaves: Vec<_> =
        (0..c.len()).map(|i| leaf_hash_of::<Sha256>(Key::in_tree(c.key(i)), c.value(i))).collect();
    chunk_hash::<Sha256>(c.len() as u32, &reference(&leaves))
}

#[test]
fn incremental_rehash_equals_reference_under_random_edits() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut c = Chunk::new();
    c.insert_at(0, b"m", b"0");
    for step in 0..3000 {
        let n = c.len();
        let op = rng.gen_range(0..3);
        if op == 0 || n < 2 {
            let k: [u8; 4] = rng.gen();
            if let Err(i) = c.search(&k) {
                c.insert_at(i, &k, &k);
            }
        } else if op == 1 {
            let i = rng.gen_range(0..n);
            c.set_value(i, &[step as u8; 3][..(step % 4) as usize]);
        } else if n > 1 {
            c.remove_at(rng.gen_range(0..n));
        }
        if rng.gen_bool(0.3) {
            assert_eq!(c.rehash::<Sha256>(), fresh_root(&c), "step {step}");
        }
        if c.len() > 70 {
            c.remove_at(0);
        }
    }
    assert_eq!(c.rehash::<Sha256>(), fresh_root(&c));
    c.check::<Sha256>().unwrap();
}

#[test]
fn search_finds_keys_and_gaps() {
    let mut c = Chunk::new();
    for (i, k) in [b"b", b"d", b"f"].iter().enumerate() {
        c.insert_at(i, *k, b"");
    }
    assert_eq!(c.search(b"d"), Ok(1));
    assert_eq!(c.search(b"a"), Err(0));
    assert_eq!(c.search(b"e"), Err(2));
    assert_eq!(c.search(b"z"), Err(3));
}

#[test]
fn size_classes_bound_the_waste() {
    let mut prev = 0;
    for bytes in 1..70_000 {
        let c = size_class(bytes);
        assert!(c >= bytes && c >= prev, "{bytes} -> {c}");
        assert!(c <= bytes + bytes / 4 + 8, "{bytes} -> {c}: over 25% waste");
        prev = c;
    }
    // Few distinct sizes: four per power of two above 64 bytes.
    let classes: std::collections::BTreeSet<_> = (1025..=2048).map(size_class).collect();
    assert_eq!(classes.len(), 4);
}

#[test]
fn a_copy_is_equal_and_has_room_for_an_insert() {
    let mut c = Chunk::new();
    for i in 0..50u32 {
        c.insert_at(i as usize, &i.to_be_bytes(), &[i as u8; 100]);
    }
    let root = c.rehash::<Sha256>();
    // Mid-edit state (stale hashes, touched leaves) must be copied too.
    c.set_value(3, b"x");
    let mut d = c.clone();
    assert_eq!(d.rehash::<Sha256>(), c.rehash::<Sha256>());
    assert_ne!(d.rehash::<Sha256>(), root);
    for i in 0..c.len() {
        assert_eq!((c.key(i), c.value(i)), (d.key(i), d.value(i)));
    }
    let caps = (d.kbuf.as_ptr(), d.vbuf.as_ptr(), d.entries.as_ptr());
    d.insert_at(10, b"\0\0\0\x09x", &[7; 100]);
    assert_eq!(caps, (d.kbuf.as_ptr(), d.vbuf.as_ptr(), d.entries.as_ptr()), "reallocated");
    assert_eq!(d.rehash::<Sha256>(), fresh_root(&d));
    d.check::<Sha256>().unwrap();
}
