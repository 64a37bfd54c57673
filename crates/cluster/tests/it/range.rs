//! The deterministic range state machine: fence keys, epochs, atomic batches, splits, the
//! directory's reports, and state moving as verified chunks.

use std::collections::BTreeSet;

use bavl_cluster::range::RangeState;
use bavl_cluster::simcheck::tiling;
use bavl_cluster::types::{BatchOp, Command, Epoch, RangeDesc, Response, DIRECTORY_GROUP};

fn filled(n: u32) -> RangeState {
    let mut s = RangeState::new(RangeDesc::whole(1, BTreeSet::from([1, 2, 3])), 4).unwrap();
    for i in 0..n {
        let cmd =
            Command::Put { epoch: Epoch::default(), key: key(i), value: i.to_be_bytes().to_vec() };
        assert_eq!(s.apply(&cmd).0, Response::Done);
    }
    s
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

#[test]
fn split_is_deterministic_and_moves_the_right_half() {
    let mut a = filled(100);
    let mut b = a.clone();
    let k = a.split_key().expect("a tree of many chunks has a split key");
    let cmd = Command::Split { epoch: Epoch::default(), key: k.clone(), new_id: 7 };
    let (ra, ca) = a.apply(&cmd);
    let (rb, cb) = b.apply(&cmd);
    assert_eq!(ra, rb);
    let (ca, cb) = (ca.unwrap(), cb.unwrap());
    assert_eq!(ca.data.root, cb.data.root);
    assert_eq!(a.tree.root_hash(), b.tree.root_hash());
    let mut child = RangeState::import(&ca.data).unwrap();
    assert_eq!(child.desc.start, k);
    assert_eq!(a.desc.end, k);
    assert_eq!(a.desc.epoch.version, 1);
    assert_eq!(child.desc.epoch.version, 1);
    assert_eq!(a.tree.len() + child.tree.len(), 100);
    assert!(a.tree.iter().unwrap().all(|(key, _)| key < k.as_slice()));
    assert!(child.tree.iter().unwrap().all(|(key, _)| key >= k.as_slice()));
    let (overlaps, gaps) = tiling(&[a.desc.clone(), child.desc.clone()]);
    assert!(overlaps.is_empty() && gaps.is_empty());
    let _ = child.tree.root_hash();
}

#[test]
fn stale_epochs_and_foreign_keys_are_refused_without_effect() {
    let mut s = filled(20);
    let k = s.split_key().unwrap();
    s.apply(&Command::Split { epoch: Epoch::default(), key: k.clone(), new_id: 2 });
    let before = s.tree.root_hash();
    // Old epoch, key still inside.
    let old = Command::Put { epoch: Epoch::default(), key: key(0), value: b"x".to_vec() };
    assert_eq!(s.apply(&old).0, Response::Stale(s.desc.clone()));
    // Current epoch, key now in the right half.
    let epoch = s.desc.epoch;
    let foreign = Command::Put { epoch, key: k, value: b"x".to_vec() };
    assert!(matches!(s.apply(&foreign).0, Response::Stale(_)));
    assert_eq!(s.tree.root_hash(), before);
}

#[test]
fn a_batch_applies_whole_or_not_at_all() {
    let mut s = filled(20);
    let epoch = s.desc.epoch;
    let before = s.tree.root_hash();
    let bad = vec![BatchOp::Put(key(900), b"v".to_vec()), BatchOp::Put(Vec::new(), b"v".to_vec())];
    assert!(matches!(s.apply(&Command::Batch { epoch, ops: bad }).0, Response::Refused(_)));
    assert_eq!(s.tree.root_hash(), before);
    let good = vec![BatchOp::Put(key(900), b"v".to_vec()), BatchOp::Delete(key(0))];
    assert_eq!(s.apply(&Command::Batch { epoch, ops: good }).0, Response::Done);
    assert_eq!(s.tree.get(&key(900)), Ok(Some(&b"v"[..])));
    assert_eq!(s.tree.get(&key(0)), Ok(None));
}

#[test]
fn state_moves_as_chunks_and_any_flipped_byte_is_rejected() {
    let mut s = filled(60);
    let data = s.export();
    assert!(data.chunks.len() > 4);
    let mut back = RangeState::import(&data).unwrap();
    assert_eq!(back.tree.root_hash(), s.tree.root_hash());
    for c in 0..data.chunks.len() {
        for i in (0..data.chunks[c].0.len()).step_by(7) {
            let mut bad = data.clone();
            bad.chunks[c].0[i] ^= 1;
            assert!(RangeState::import(&bad).is_err(), "flip at chunk {c} byte {i} accepted");
        }
    }
    let mut bad = data.clone();
    bad.root[0] ^= 1;
    assert!(RangeState::import(&bad).is_err());
}

#[test]
fn the_directory_keeps_the_newest_descriptor_and_finds_ranges() {
    let mut dir =
        RangeState::new(RangeDesc::whole(DIRECTORY_GROUP, BTreeSet::from([1])), 8).unwrap();
    let whole = RangeDesc::whole(1, BTreeSet::from([1]));
    dir.put_descriptor(&whole);
    let mut left = whole.clone();
    left.end = b"m".to_vec();
    left.epoch.version = 1;
    let right = RangeDesc {
        id: 2,
        start: b"m".to_vec(),
        end: Vec::new(),
        epoch: left.epoch,
        replicas: left.replicas.clone(),
        learners: BTreeSet::new(),
    };
    assert_eq!(
        dir.apply(&Command::Report { descs: vec![left.clone(), right.clone()] }).0,
        Response::Done
    );
    // An older report (a stale leader's heartbeat) does not go back.
    assert_eq!(dir.apply(&Command::Report { descs: vec![whole] }).0, Response::Done);
    assert_eq!(dir.lookup(b"a"), Some(left.clone()));
    assert_eq!(dir.lookup(b"z"), Some(right.clone()));
    assert_eq!(dir.descriptors(), vec![left, right]);
    assert_eq!(dir.apply(&Command::AllocGroupId).0, Response::GroupId(1));
    assert_eq!(dir.apply(&Command::AllocGroupId).0, Response::GroupId(2));
    let put = Command::Put { epoch: Epoch::default(), key: b"a".to_vec(), value: Vec::new() };
    assert!(matches!(dir.apply(&put).0, Response::Refused(_)));
}

#[test]
fn tiling_finds_overlaps_and_gaps() {
    let d = |id, s: &str, e: &str| RangeDesc {
        id,
        start: s.as_bytes().to_vec(),
        end: e.as_bytes().to_vec(),
        epoch: Epoch::default(),
        replicas: BTreeSet::new(),
        learners: BTreeSet::new(),
    };
    assert_eq!(tiling(&[d(1, "", "m"), d(2, "m", "")]), (vec![], vec![]));
    let (o, g) = tiling(&[d(1, "", "n"), d(2, "m", "")]);
    assert_eq!((o.len(), g.len()), (1, 0));
    let (o, g) = tiling(&[d(1, "", "l"), d(2, "m", "")]);
    assert_eq!((o.len(), g.len()), (0, 1));
    let (o, g) = tiling(&[d(1, "", "m")]);
    assert_eq!((o.len(), g.len()), (0, 1));
    let (o, g) = tiling(&[d(1, "", ""), d(2, "m", "")]);
    assert_eq!((o.len(), g.len()), (1, 0));
}

#[test]
fn proposals_together_answer_and_apply_as_each_alone() {
    let mut s = filled(20);
    let k = s.split_key().unwrap();
    s.apply(&Command::Split { epoch: Epoch::default(), key: k.clone(), new_id: 2 });
    let epoch = s.desc.epoch;
    let writes = vec![
        Command::Put { epoch, key: key(1), value: b"one".to_vec() },
        Command::Put { epoch: Epoch::default(), key: key(2), value: b"old epoch".to_vec() },
        Command::Put { epoch, key: k.clone(), value: b"foreign".to_vec() },
        Command::Delete { epoch, key: key(3) },
        Command::Batch {
            epoch,
            ops: vec![BatchOp::Put(key(4), b"b".to_vec()), BatchOp::Delete(k)],
        },
        Command::Batch { epoch, ops: vec![BatchOp::Put(key(5), b"b".to_vec())] },
        Command::Put { epoch, key: key(1), value: b"one again".to_vec() },
    ];
    let mut alone = s.clone();
    let answers: Vec<_> = writes.iter().map(|c| alone.apply(c).0).collect();
    assert!(
        answers.contains(&Response::Done) && answers.contains(&Response::Stale(s.desc.clone()))
    );
    let (together, child) = s.apply(&Command::Proposals(writes));
    assert!(child.is_none());
    assert_eq!(together, Response::Each(answers));
    assert_eq!(s.tree.root_hash(), alone.tree.root_hash());

    // Anything but a client write inside is refused on its own, without effect.
    let before = s.tree.root_hash();
    let desc = s.desc.clone();
    let split = s.split_key().unwrap();
    let odd = vec![
        Command::Split { epoch, key: split, new_id: 3 },
        Command::Proposals(vec![Command::Delete { epoch, key: key(1) }]),
        Command::AllocGroupId,
    ];
    let (r, child) = s.apply(&Command::Proposals(odd));
    assert!(child.is_none());
    let Response::Each(each) = r else { panic!("{r:?}") };
    assert!(each.iter().all(|r| matches!(r, Response::Refused(_))), "{each:?}");
    assert_eq!((s.tree.root_hash(), s.desc.clone()), (before, desc));
}
