//! Structure-aware: the input is a capacity (4..=8) and a sequence of insert / remove /
//! check operations on a `Tree`, mirrored on a `BTreeMap`. After every operation the
//! tree's invariants hold and it agrees with the model; at every check and at the end,
//! every exported chunk verifies at its index and together they are exactly the model,
//! proofs of membership, absence and a range verify, and restoring from all chunks (in
//! an input-dependent order) gives the same root, a valid tree and the same future.
#![no_main]

use std::ops::Bound;

use bavl_core::{
    verify_absence, verify_chunk, verify_membership, verify_range, Restore, Sha256, Tree,
};
use bavl_fuzz::{decode_roundtrip_input, op_key, Model, Op};
use libfuzzer_sys::fuzz_target;

fn agree(tree: &Tree, model: &Model) {
    tree.check().unwrap_or_else(|e| panic!("invariant broken: {e}"));
    assert_eq!(tree.len(), model.len() as u64);
    assert!(
        tree.iter().expect("resident").eq(model.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))),
        "tree and model differ"
    );
}

fn full_check(tree: &mut Tree, model: &Model, cap: u32, salt: u8) {
    agree(tree, model);
    let snap = tree.snapshot();
    let root = snap.root_hash();
    assert_eq!(tree.root_hash(), root);
    let n = snap.chunk_count();

    // Every chunk verifies at its index; together they are the model, in order.
    let mut all = Vec::with_capacity(model.len());
    let mut chunks = Vec::new();
    for i in 0..n {
        let bytes = snap.export_chunk(i).expect("chunk in range");
        let vc = verify_chunk::<Sha256>(&root, i, &bytes)
            .unwrap_or_else(|e| panic!("chunk {i} of {n}: {e}"));
        assert_eq!((vc.index, vc.chunk_count, vc.key_count), (i, n, model.len() as u64));
        assert_eq!(vc.keys_before, all.len() as u64);
        assert_eq!(vc.capacity, cap);
        assert!(vc.len() <= cap as usize);
        all.extend(vc.entries().map(|(k, v)| (k.to_vec(), v.to_vec())));
        if n > 1 && i == u64::from(salt) % n {
            assert!(
                verify_chunk::<Sha256>(&root, (i + 1) % n, &bytes).is_err(),
                "chunk {i} verified at another index"
            );
        }
        chunks.push(bytes);
    }
    assert!(snap.export_chunk(n).is_err());
    assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()), "chunks do not add up to the model");

    // Proofs: membership of a few keys, absence of keys never inserted, one range.
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    for (j, k) in
        [0, keys.len() / 2, keys.len().wrapping_sub(1), usize::from(salt) % keys.len().max(1)]
            .into_iter()
            .filter_map(|j| keys.get(j).map(|k| (j, *k)))
    {
        let v = &model[k];
        let p = snap.prove_membership(k).expect("present key has a proof");
        let m = verify_membership::<Sha256>(&root, k, v, &p)
            .unwrap_or_else(|e| panic!("membership: {e}"));
        assert_eq!((m.index, m.key_count), (j as u64, model.len() as u64));
        assert!(verify_membership::<Sha256>(&root, k, b"\xffnot the value", &p).is_err());
    }
    for absent in [vec![salt, 0], vec![0u8, 0], vec![0xff; 5], vec![0xbf, 0xbf]] {
        if model.contains_key(&absent) {
            continue;
        }
        let p = snap.prove_absence(&absent).expect("absent key has a proof");
        let a =
            verify_absence::<Sha256>(&root, &absent, &p).unwrap_or_else(|e| panic!("absence: {e}"));
        assert_eq!(a.key_count, model.len() as u64);
    }
    let (lo, hi) = (op_key(salt), op_key(salt.wrapping_mul(7).wrapping_add(40)));
    let (lo_b, hi_b) = (Bound::Included(lo.as_slice()), Bound::Excluded(hi.as_slice()));
    match snap.prove_range(lo_b, hi_b) {
        Ok(p) => {
            let r = verify_range::<Sha256>(&root, lo_b, hi_b, &p)
                .unwrap_or_else(|e| panic!("range: {e}"));
            let expect: Vec<(Vec<u8>, Vec<u8>)> =
                model.range::<[u8], _>((lo_b, hi_b)).map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(r.entries, expect);
        }
        Err(_) => assert!(lo > hi, "prove_range refused ordered bounds"),
    }

    // Restore from all chunks, in an order that depends on the input.
    let mut order: Vec<u64> = (0..n).collect();
    match salt % 3 {
        0 => order.reverse(),
        1 => order.sort_by_key(|i| (i % 2 == 0, *i)),
        _ => order.rotate_left(salt as usize % (n as usize).max(1)),
    }
    let mut restore = Restore::<Sha256>::new(root);
    for &i in &order {
        restore
            .add_chunk(i, &chunks[i as usize])
            .unwrap_or_else(|e| panic!("restore chunk {i}: {e}"));
    }
    if let Some(&i) = order.first() {
        assert!(restore.add_chunk(i, &chunks[i as usize]).is_err(), "duplicate chunk accepted");
    }
    assert!(n == 0 || restore.is_complete());
    let mut rebuilt = restore.finish(cap).unwrap_or_else(|e| panic!("restore finish: {e}"));
    assert_eq!(rebuilt.root_hash(), root, "restored root differs");
    agree(&rebuilt, model);
    assert_eq!(rebuilt.capacity(), cap);

    // Same future: the same edits on the original and the rebuilt tree give the same roots.
    let mut original = snap.to_tree();
    for (k, v) in [(op_key(salt), vec![1u8, 2, 3]), (op_key(salt ^ 0x55), vec![])] {
        original.insert(&k, &v).expect("valid entry");
        rebuilt.insert(&k, &v).expect("valid entry");
        assert_eq!(
            original.root_hash(),
            rebuilt.root_hash(),
            "restored tree diverges after an insert"
        );
    }
    for k in keys.iter().take(3) {
        original.remove(k);
        rebuilt.remove(k);
        assert_eq!(
            original.root_hash(),
            rebuilt.root_hash(),
            "restored tree diverges after a remove"
        );
    }
    rebuilt
        .check()
        .unwrap_or_else(|e| panic!("invariant broken after edits on the restored tree: {e}"));
}

fuzz_target!(|data: &[u8]| {
    let Some((cap, ops)) = decode_roundtrip_input(data) else { return };
    let mut tree = Tree::with_capacity(cap).expect("capacity 4..=8");
    let mut model = Model::new();
    let mut salt = 0u8;
    let mut checks = 0;
    for (j, op) in ops.into_iter().enumerate() {
        match op {
            Op::Insert(k, v) => {
                salt = salt.wrapping_add(k[0]);
                let new = tree.insert(&k, &v).expect("valid entry");
                assert_eq!(tree.get(&k), Ok(Some(v.as_slice())));
                let was = model.insert(k, v);
                assert_eq!(new, was.is_none(), "insert misreported whether the key was new");
            }
            Op::Remove(k) => {
                salt = salt.wrapping_add(k[0] ^ 0x5a);
                let old = tree.remove(&k);
                assert_eq!(tree.get(&k), Ok(None));
                let was = model.remove(&k);
                assert_eq!(old.as_deref(), was.as_deref(), "remove returned the wrong value");
            }
            // At most 8 full checks per input: each costs a restore.
            Op::Check if checks < 8 => {
                checks += 1;
                full_check(&mut tree, &model, cap, salt);
            }
            Op::Check => {}
        }
        assert_eq!(tree.len(), model.len() as u64);
        // The full invariant check rehashes every chunk: after every op while the tree is
        // small, then after every 32nd op (and at every check op and at the end).
        if model.len() <= 16 || j % 32 == 31 {
            agree(&tree, &model);
        }
    }
    full_check(&mut tree, &model, cap, salt);
});
