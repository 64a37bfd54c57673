//! Paging against a model: a tree whose chunks are evicted after every operation (a cache
//! of zero bytes), loaded back from a simulated disk before each operation, must behave
//! exactly like a `BTreeMap` and keep the same root as a tree that never pages, across
//! "reopens" from its skeleton; retained versions read their absent chunks without
//! changing; a damaged body is refused.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bavl_core::{Body, PageError, PageRef, SkeletonEntry, Snapshot, Tree};

/// A disk of chunk bodies by location, and the next free location.
#[derive(Default)]
struct Disk {
    bodies: HashMap<u64, Vec<u8>>,
    next: u64,
}

impl Disk {
    /// An incremental checkpoint: writes the bodies that have no location yet and gives
    /// them one; returns the skeleton of the version.
    fn checkpoint(&mut self, snap: &Snapshot) -> Vec<SkeletonEntry> {
        let mut skel = Vec::new();
        snap.for_each_chunk(|c| {
            let loc = c.location().unwrap_or_else(|| {
                let mut body = Vec::new();
                assert!(c.encode_body(&mut body), "a chunk without location is resident");
                self.next += 1;
                self.bodies.insert(self.next, body);
                assert!(c.set_location(self.next));
                self.next
            });
            skel.push(SkeletonEntry {
                key_height: c.key_height,
                hash: c.hash(),
                len: c.len(),
                loc,
                first_key: c.first_key().into(),
            });
        });
        skel
    }

    fn body(&self, p: &PageRef) -> Body {
        Body::decode(&self.bodies[&p.loc]).expect("bodies on this disk are well formed")
    }

    fn load(&self, tree: &mut Tree, needs: Vec<PageRef>) -> usize {
        let n = needs.len();
        for p in needs {
            tree.page_in(p.index, self.body(&p)).expect("the body matches its page");
        }
        n
    }
}

/// Evicts every clean chunk; returns how many.
fn evict_all(tree: &mut Tree) -> u64 {
    let mut n = 0;
    for i in 0..tree.chunk_count() {
        n += u64::from(tree.page_out(i).is_some());
    }
    n
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{:06}", k % 3000).into_bytes()
}

#[test]
fn paged_tree_matches_the_model_and_an_unpaged_tree() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut disk, mut model) = (Disk::default(), BTreeMap::new());
    let mut paged = Tree::with_capacity(8).unwrap();
    let mut plain = Tree::with_capacity(8).unwrap();
    let (mut loads, mut evictions) = (0, 0);
    let mut retained: Vec<(Snapshot, Model)> = Vec::new();
    for round in 0..40 {
        for _ in 0..150 {
            let k = key(rng.next());
            let op = rng.next() % 10;
            if op < 6 {
                let v = rng.next().to_le_bytes().to_vec();
                loop {
                    match paged.insert(&k, &v) {
                        Ok(new) => {
                            assert_eq!(new, model.insert(k.clone(), v.clone()).is_none());
                            break;
                        }
                        Err(_) => {
                            let needs = paged.absent_for_insert(&k);
                            assert!(!needs.is_empty());
                            loads += disk.load(&mut paged, needs);
                            assert!(paged.absent_for_insert(&k).is_empty(), "one answer");
                        }
                    }
                }
                plain.insert(&k, &v).unwrap();
            } else if op < 9 {
                let needs = paged.absent_for_remove(&k);
                loads += disk.load(&mut paged, needs);
                assert!(paged.absent_for_remove(&k).is_empty(), "one answer covers a removal");
                assert_eq!(paged.try_remove(&k).unwrap(), model.remove(&k));
                plain.remove(&k);
            } else {
                let got = match paged.try_get(&k) {
                    Ok(v) => v.map(<[u8]>::to_vec),
                    Err(p) => disk.body_get(&p, &k, &mut paged),
                };
                assert_eq!(got.as_ref(), model.get(&k));
            }
            evictions += evict_all(&mut paged);
        }
        assert_eq!(paged.root_hash(), plain.root_hash(), "round {round}");
        paged.check().unwrap();
        let snap = paged.snapshot();
        let skel = disk.checkpoint(&snap);
        retained.push((snap, model.clone()));
        if round % 7 == 6 {
            // Reopen: only the skeleton comes back; every chunk is absent.
            let root = paged.root_hash();
            paged = Tree::from_skeleton(8, root, skel).unwrap();
            assert!(paged.skeleton_stats().resident_chunks == 0);
        }
    }
    assert!(loads > 1000 && evictions > 1000, "paging was exercised: {loads} / {evictions}");
    for (snap, m) in &retained[retained.len() - 5..] {
        check_retained(&disk, snap, m);
    }
}

impl Disk {
    fn body_get(&self, p: &PageRef, k: &[u8], tree: &mut Tree) -> Option<Vec<u8>> {
        tree.page_in(p.index, self.body(p)).unwrap();
        tree.try_get(k).expect("resident now").map(<[u8]>::to_vec)
    }
}

/// A retained version answers reads and range proofs through `with_bodies`, and is
/// itself unchanged.
fn check_retained(disk: &Disk, snap: &Snapshot, model: &Model) {
    let mut bodies = Vec::new();
    for i in 0..snap.chunk_count() {
        if let Some(p) = snap.absent_chunk(i) {
            bodies.push((i, disk.body(&p)));
        }
    }
    assert!(!bodies.is_empty(), "the retained version shares evicted chunks");
    let absent_before = bodies.len();
    let full = snap.with_bodies(bodies).unwrap();
    let k = model.keys().nth(model.len() / 2).unwrap();
    assert_eq!(full.get(k), Ok(model.get(k).map(Vec::as_slice)));
    assert_whole(snap, &full, model, k);
    let still_absent = (0..snap.chunk_count()).filter(|&i| snap.absent_chunk(i).is_some());
    assert_eq!(still_absent.count(), absent_before, "the shared version was not written");
}

#[test]
fn a_damaged_body_is_refused_and_changes_nothing() {
    let mut tree = Tree::with_capacity(8).unwrap();
    for i in 0u32..200 {
        tree.insert(&i.to_be_bytes(), b"value").unwrap();
    }
    let mut disk = Disk::default();
    let snap = tree.snapshot();
    disk.checkpoint(&snap);
    drop(snap);
    evict_all(&mut tree);
    let root = tree.root_hash();
    let key = 100u32.to_be_bytes();
    let p = tree.try_get(&key).unwrap_err();
    let good = disk.bodies[&p.loc].clone();
    let mut refused = 0;
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        match Body::decode(&bad) {
            Err(_) => refused += 1,
            Ok(body) => {
                let e = tree.page_in(p.index, body).unwrap_err();
                assert!(matches!(e, PageError::Mismatch { .. }), "{e}");
                refused += 1;
            }
        }
        assert!(tree.try_get(&key).is_err(), "a damaged body never becomes resident");
    }
    assert_eq!(refused, good.len());
    // A body of another chunk is refused too.
    let other = tree.try_get(&3u32.to_be_bytes()).unwrap_err();
    assert_ne!(other.index, p.index);
    assert!(tree.page_in(p.index, disk.body(&other)).is_err());
    assert_eq!(tree.root_hash(), root);
    disk.load(&mut tree, vec![p]);
    assert_eq!(tree.get(&key), Ok(Some(&b"value"[..])));
}

#[test]
fn operations_on_absent_chunks_are_refused_before_any_change() {
    let mut tree = Tree::with_capacity(4).unwrap();
    let mut rng = Rng(7);
    for _ in 0..400 {
        let even = (rng.next() % 1000 * 2) as u32;
        tree.insert(&even.to_be_bytes(), b"v").unwrap();
    }
    let mut disk = Disk::default();
    disk.checkpoint(&tree.snapshot());
    evict_all(&mut tree);
    let root = tree.root_hash();
    assert!(tree.insert(&7u32.to_be_bytes(), b"w").is_err());
    assert!(tree.try_remove(&7u32.to_be_bytes()).is_err());
    assert_eq!(tree.remove(&7u32.to_be_bytes()), None);
    assert_eq!(tree.root_hash(), root);
    tree.check().unwrap();
    // A new key in a full chunk whose neighbours are absent: the insert names them, and
    // is refused until they are loaded.
    let mut tested = 0;
    for i in 0u32..1000 {
        let extra = (i * 2 + 1).to_be_bytes();
        let needs = tree.absent_for_insert(&extra);
        if needs.len() < 2 {
            continue;
        }
        disk.load(&mut tree, needs[..1].to_vec());
        let root = tree.root_hash();
        assert!(tree.insert(&extra, b"x").is_err());
        assert_eq!(tree.root_hash(), root);
        assert_eq!(tree.absent_for_insert(&extra), needs[1..].to_vec());
        disk.load(&mut tree, needs[1..].to_vec());
        assert!(tree.insert(&extra, b"x").unwrap());
        tree.check().unwrap();
        evict_all(&mut tree);
        tested += 1;
    }
    assert!(tested > 3, "full chunks with absent neighbours were met: {tested}");
}

/// Every read of a tree or version with absent chunks either answers from memory exactly
/// as an unpaged tree would, or names an absent chunk it needs: never "absent", "present",
/// "no such chunk" or an iteration cut short because a body was not in memory.
#[test]
fn reads_never_answer_from_what_happens_to_be_resident() {
    use bavl_core::{ChunkError, ProveError};
    let mut full = Tree::with_capacity(4).unwrap();
    for k in (0..600u64).map(|k| k * 5) {
        full.insert(&key(k), format!("v{k}").as_bytes()).unwrap();
    }
    let reference = full.snapshot();
    let mut disk = Disk::default();
    disk.checkpoint(&reference);
    let mut paged = reference.to_tree();
    // Every other chunk absent.
    for i in (0..paged.chunk_count()).step_by(2) {
        assert!(paged.page_out(i).is_some());
    }
    let snap = paged.snapshot();
    let mut rng = Rng(11);
    for _ in 0..400 {
        let k = key(rng.next());
        let want = reference.get(&k).unwrap();
        match snap.get(&k) {
            Ok(got) => assert_eq!(got, want),
            Err(p) => assert!(!paged.is_resident(p.index), "an error names an absent chunk"),
        }
        assert_eq!(paged.get(&k).ok(), snap.get(&k).ok());
        match (snap.prove_membership(&k), want) {
            (Ok(p), Some(_)) => assert_eq!(Ok(p), reference.prove_membership(&k)),
            (Err(ProveError::KeyAbsent), None) => {}
            (Err(ProveError::NotResident(p)), _) => assert!(!paged.is_resident(p.index)),
            (other, want) => panic!("membership of {k:?} (value {want:?}): {other:?}"),
        }
        match (snap.prove_absence(&k), want) {
            (Ok(p), None) => assert_eq!(Ok(p), reference.prove_absence(&k)),
            (Err(ProveError::KeyPresent), Some(_)) => {}
            (Err(ProveError::NotResident(p)), _) => assert!(!paged.is_resident(p.index)),
            (other, want) => panic!("absence of {k:?} (value {want:?}): {other:?}"),
        }
        // A range: all of it, or the absent chunk it needs; never a prefix.
        let lo = key(rng.next());
        let hi = key(rng.next());
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        let bounds = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
        let want: Vec<_> = reference.range(bounds.0, bounds.1).unwrap().collect();
        match snap.range(bounds.0, bounds.1) {
            Ok(it) => assert_eq!(it.collect::<Vec<_>>(), want),
            Err(p) => assert!(!paged.is_resident(p.index)),
        }
    }
    assert!(snap.iter().is_err(), "a whole iteration needs every chunk");
    for i in 0..snap.chunk_count() {
        match snap.export_chunk(i) {
            Ok(c) => assert_eq!(Ok(c), reference.export_chunk(i)),
            Err(e) => {
                assert!(matches!(e, ChunkError::NotResident(ref p) if p.index == i && i % 2 == 0))
            }
        }
    }
    let n = snap.chunk_count();
    assert_eq!(snap.export_chunk(n), Err(ChunkError::OutOfRange { index: n, count: n }));
    // Loaded back, every read answers as the unpaged tree's.
    let needs: Vec<PageRef> = (0..n).filter_map(|i| snap.absent_chunk(i)).collect();
    let loaded = snap.with_bodies(needs.iter().map(|p| (p.index, disk.body(p)))).unwrap();
    assert!(loaded.iter().unwrap().eq(reference.iter().unwrap()));
}

/// `Snapshot::sharing`: a retained version that takes the head's nodes wherever they are
/// equal by hash still reads, proves and hashes as itself (against the model of its own
/// state), whatever the head changed, evicted or grew since; after it, every equal
/// subtree at the same place is the head's own node (a second call takes none).
#[test]
fn a_version_sharing_the_heads_nodes_stays_itself() {
    let (mut taken_total, mut pinned_seen) = (0, 0);
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut disk, mut model) = (Disk::default(), BTreeMap::new());
        let mut tree = Tree::with_capacity(8).unwrap();
        let mut retained: Vec<(Snapshot, Model)> = Vec::new();
        for round in 0..8 {
            // A round of few changes, or (round 4) many inserts: the tree grows a level.
            let ops = if round == 4 { 2500 } else { 1 + rng.next() % 120 };
            for _ in 0..ops {
                let k = format!("k{:06}", rng.next() % 6000).into_bytes();
                if rng.next().is_multiple_of(4) {
                    let needs = tree.absent_for_remove(&k);
                    disk.load(&mut tree, needs);
                    assert_eq!(tree.try_remove(&k).unwrap(), model.remove(&k));
                } else {
                    let v = rng.next().to_le_bytes().to_vec();
                    let needs = tree.absent_for_insert(&k);
                    disk.load(&mut tree, needs);
                    tree.insert(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            let snap = tree.snapshot();
            // Every other round is not written: the versions retained then keep bodies
            // with no location once the head changes them (they cannot be dropped).
            if round % 2 == 0 {
                disk.checkpoint(&snap);
            }
            // The head evicts some chunks (path copies of its own).
            for i in 0..tree.chunk_count() {
                if rng.next().is_multiple_of(2) {
                    tree.page_out(i);
                }
            }
            let head = tree.snapshot();
            let mut live = std::collections::HashSet::new();
            head.for_each_chunk(|c| live.extend(c.body_id()));
            for (old, m) in retained.iter_mut() {
                // The store's unpinning in one descent equals stripping, then sharing, then
                // counting what is left alone: chunk by chunk, and in the bodies counted.
                let mut pinned = BTreeMap::new();
                // The head answers for its bodies in one descent, as the set of them does.
                old.for_each_chunk(|c| {
                    if let Some(id) = c.body_id() {
                        let holds = head.holds_body(id, c.first_key());
                        assert_eq!(holds, live.contains(&id), "seed {seed} round {round}");
                    }
                });
                let one = old.unpinned_beside(
                    Some(&head),
                    |id, first| head.holds_body(id, first),
                    |id, bytes| {
                        pinned.insert(id, bytes);
                    },
                );
                let (stripped, _) = old.without_bodies(|c| !live.contains(&c.body_id().unwrap()));
                let (three, _) = stripped.sharing(&head);
                let mut alone = BTreeMap::new();
                three.for_each_chunk(|c| {
                    if let Some(id) = c.body_id().filter(|id| !live.contains(id)) {
                        alone.insert(id, c.heap_bytes());
                    }
                });
                assert_eq!(pinned, alone, "seed {seed} round {round}");
                pinned_seen += pinned.len();
                let absent = |s: &Snapshot| -> Vec<bool> {
                    (0..s.chunk_count()).map(|i| s.absent_chunk(i).is_some()).collect()
                };
                assert_eq!(absent(&one), absent(&three), "seed {seed} round {round}");
                assert_eq!(one.root_hash(), old.root_hash());
                assert_reads_as(&disk, &one, m);
                let (stripped, _) = old.without_bodies(|_| rng.next().is_multiple_of(2));
                let (shared, taken) = stripped.sharing(&head);
                taken_total += taken;
                assert_eq!(shared.root_hash(), old.root_hash());
                assert_eq!(shared.sharing(&head).1, 0, "seed {seed} round {round}");
                assert_reads_as(&disk, &shared, m);
                assert_reads_as(&disk, &stripped, m);
                *old = shared;
            }
            // A version never paged (its own tree, all resident) taking the head's nodes
            // takes absent chunks with them, and must then know it may have some.
            let mut fresh = Tree::with_capacity(8).unwrap();
            for (k, v) in &model {
                fresh.insert(k, v).unwrap();
            }
            let (shared, taken) = fresh.snapshot().sharing(&head);
            taken_total += taken;
            assert_reads_as(&disk, &shared, &model);
            retained.push((head, model.clone()));
        }
    }
    assert!(taken_total > 1000, "versions shared subtrees with the head: {taken_total}");
    assert!(pinned_seen > 100, "versions held bodies never written: {pinned_seen}");
}

/// `snap`, with its absent chunks read back, is exactly `model`, and its proofs verify
/// against its own root.
fn assert_reads_as(disk: &Disk, snap: &Snapshot, model: &Model) {
    // Before any load: a key is read right or its absent chunk is named, never misread.
    for (k, v) in model.iter().step_by(7) {
        if let Ok(got) = snap.get(k) {
            assert_eq!(got, Some(v.as_slice()));
        }
    }
    if let Ok(it) = snap.iter() {
        assert!(it.map(|(k, v)| (k.to_vec(), v.to_vec())).eq(model.clone()), "iterated whole");
    }
    let bodies: Vec<_> = (0..snap.chunk_count())
        .filter_map(|i| snap.absent_chunk(i).map(|p| (i, disk.body(&p))))
        .collect();
    let full = snap.with_bodies(bodies).unwrap();
    full.to_tree().check().unwrap();
    assert_whole(snap, &full, model, model.keys().nth(model.len() / 3).unwrap());
}

/// `full` (`snap` with every body resident) iterates as `model`, and a range proof from `k`
/// verifies against `snap`'s root with the model's entries.
fn assert_whole(snap: &Snapshot, full: &Snapshot, model: &Model, k: &[u8]) {
    let all: Vec<_> = full.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert_eq!(all, model.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>());
    let proof = full.prove_range(Bound::Included(k), Bound::Unbounded).unwrap();
    let verified = bavl_core::verify_range::<bavl_core::Sha256>(
        &snap.root_hash(),
        Bound::Included(k),
        Bound::Unbounded,
        &proof,
    )
    .unwrap();
    assert_eq!(verified.entries.len(), model.range(k.to_vec()..).count());
}
