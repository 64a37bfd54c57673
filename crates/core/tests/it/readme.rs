//! The README's library example, kept compiling and passing.

use std::ops::Bound;

use bavl_core::{verify_membership, verify_range, Restore, Sha256, Tree};

#[test]
fn readme_example() -> Result<(), bavl_core::Error> {
    let mut tree = Tree::new();
    tree.insert(b"alice", b"10")?;
    tree.insert(b"bob", b"20")?;
    tree.remove(b"alice");
    let snap = tree.snapshot();
    let root = snap.root_hash();

    let proof = snap.prove_membership(b"bob")?;
    let verified = verify_membership::<Sha256>(&root, b"bob", b"20", &proof)?;
    assert_eq!((verified.index, verified.key_count), (0, 1));
    let proof = snap.prove_range(Bound::Included(&b"a"[..]), Bound::Excluded(&b"c"[..]))?;
    let entries = verify_range::<Sha256>(
        &root,
        Bound::Included(&b"a"[..]),
        Bound::Excluded(&b"c"[..]),
        &proof,
    )?
    .entries;
    assert_eq!(entries, vec![(b"bob".to_vec(), b"20".to_vec())]);

    let mut restore = Restore::<Sha256>::new(root);
    for i in (0..snap.chunk_count()).rev() {
        restore.add_chunk(i, &snap.export_chunk(i)?)?;
    }
    let mut rebuilt = restore.finish(snap.capacity())?;
    assert_eq!(rebuilt.root_hash(), root);
    Ok(())
}
