//! Tests of the pager: damaged page files, chunk file numbers.
use std::os::unix::fs::FileExt;

use super::*;

#[test]
fn a_damaged_page_file_is_corrupted_never_an_answer() {
    let mut tree = Tree::with_capacity(8).unwrap();
    for i in 0u32..100 {
        tree.insert(&i.to_be_bytes(), b"value").unwrap();
    }
    tree.root_hash();
    let mut pager = Pager::new(&std::env::temp_dir(), 0).unwrap();
    pager.evict(&mut tree).unwrap();
    let key = 0u32.to_be_bytes();
    let page = tree.try_get(&key).expect_err("evicted");
    let at = split_loc(page.loc).1;
    let mut record = vec![0; 4];
    pager.current().scratch().read_exact_at(&mut record, at).unwrap();
    let len = u32::from_le_bytes(record[..4].try_into().unwrap()) as usize;
    record.resize(4 + len, 0);
    pager.current().scratch().read_exact_at(&mut record, at).unwrap();
    for i in 0..record.len() {
        let mut bad = record.clone();
        bad[i] ^= 0x01;
        pager.current().scratch().write_all_at(&bad, at).unwrap();
        match pager.load(&mut tree, vec![page.clone()]) {
            Err(StoreError::Corrupted { offset, .. }) => assert_eq!(offset, at),
            other => panic!("byte {i} flipped: {other:?}"),
        }
        assert!(tree.try_get(&key).is_err(), "nothing became resident");
    }
    pager.current().scratch().write_all_at(&record, at).unwrap();
    pager.load(&mut tree, vec![page]).unwrap();
    assert_eq!(tree.get(&key), Ok(Some(&b"value"[..])));
}

#[test]
fn chunk_file_numbers_past_what_a_location_names_are_refused() {
    let dir = std::env::temp_dir().join(format!("bavl-exhausted-{}", std::process::id()));
    let backend: Arc<dyn Backend> = Arc::new(crate::DirBackend::open(&dir).unwrap());
    for (id, ok) in [(DURABLE_KEY as u64 - 1, true), (DURABLE_KEY as u64, false)] {
        // A tree of its own: the locations set by one pager are shared by clones.
        let mut tree = Tree::with_capacity(8).unwrap();
        for i in 0u32..100 {
            tree.insert(&i.to_be_bytes(), b"value").unwrap();
        }
        tree.root_hash();
        let mut pager = Pager::new(&std::env::temp_dir(), 0).unwrap();
        pager.use_chunk_files(&backend, id);
        match pager.evict(&mut tree) {
            Ok(()) => assert!(ok, "file {id} was created"),
            Err(StoreError::Exhausted(_)) => assert!(!ok, "file {id} was refused"),
            Err(e) => panic!("{e}"),
        }
    }
    drop(backend);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Appends to a chunk file are gathered in memory and written a MiB at a time: every
/// record reads back as appended at any moment (all in memory, straddling a flush, all
/// in the file), after the seal, and from the file alone once reopened.
#[test]
fn gathered_appends_read_back_before_and_after_they_reach_the_file() {
    let dir = std::env::temp_dir().join(format!("bavl-gathered-{}", std::process::id()));
    let backend: Arc<dyn Backend> = Arc::new(crate::DirBackend::open(&dir).unwrap());
    let file = PageFile::create_durable(&backend, 7).unwrap();
    let body = |i: usize| vec![(i % 251) as u8; 1 + (i * 7919) % 20_000];
    let mut recs = Vec::new();
    let on_disk = || std::fs::metadata(dir.join(crate::meta::chunk_file_name(7))).unwrap().len();
    for i in 0..300 {
        recs.push(file.append(&body(i)).unwrap());
        // The newest, the first and a few between: from memory, the file, or both.
        for j in [0, i / 2, i.saturating_sub(1), i] {
            assert_eq!(file.read_raw(recs[j]).unwrap(), body(j), "record {j} after {i}");
        }
    }
    assert!(on_disk() > 0 && on_disk() < file.len(), "some written, some gathered");
    file.seal().unwrap();
    assert_eq!(on_disk(), file.len(), "sealed: everything in the file");
    let reopened = PageFile::open_durable(&backend, 7, file.len());
    for (i, &at) in recs.iter().enumerate() {
        assert_eq!(reopened.read_raw(at).unwrap(), body(i));
    }
    drop(backend);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A write of gathered appends that fails (torn: half of it reaches the file) ends the
/// file for appending: every later append is refused, never written at a wrong offset,
/// and every record appended before still reads back as it was.
#[test]
fn a_failed_gathered_write_refuses_later_appends_and_keeps_earlier_records() {
    let dir = std::env::temp_dir().join(format!("bavl-gathered-fail-{}", std::process::id()));
    let inner: Arc<dyn Backend> = Arc::new(crate::DirBackend::open(&dir).unwrap());
    // One operation allowed: the file's creation; its first write fails.
    let backend: Arc<dyn Backend> = Arc::new(crate::FaultyBackend::new(inner, 1));
    let file = PageFile::create_durable(&backend, 3).unwrap();
    let body = |i: usize| vec![i as u8; 9_000 + i];
    let mut recs = Vec::new();
    let failed = loop {
        let i = recs.len();
        match file.append(&body(i)) {
            Ok(at) => recs.push(at),
            Err(e) => break e,
        }
        assert!(i < 1_000, "a MiB gathered must have been written");
    };
    assert!(matches!(failed, StoreError::Io { .. }), "{failed:?}");
    assert!(matches!(file.append(b"x"), Err(StoreError::Poisoned(_))));
    assert!(file.seal().is_err(), "a failed file is not sealed as if whole");
    for (i, &at) in recs.iter().enumerate() {
        assert_eq!(file.read_raw(at).unwrap(), body(i), "record {i}");
    }
    drop(backend);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the allocator's slack counted, eviction aims at the budget divided by the memory
/// gained per byte counted; off (or with no slack), at the budget itself.
#[test]
fn counted_slack_shrinks_what_eviction_keeps() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    // The "process memory" the gauge reads: set by the test before each eviction.
    static MEMORY: AtomicU64 = AtomicU64::new(0);
    let budget = 64 << 10;
    let resident_after = |slack: Option<u64>| {
        let mut tree = Tree::with_capacity(8).unwrap();
        for i in 0u32..4000 {
            tree.insert(&i.to_be_bytes(), &[7; 40]).unwrap();
        }
        tree.root_hash();
        MEMORY.store(0, SeqCst);
        let mut pager = Pager::new(&std::env::temp_dir(), budget).unwrap();
        pager.slack =
            crate::slack::SlackGauge::reading(slack.is_some(), || Some(MEMORY.load(SeqCst)));
        // Two blocks: the process holds `slack` times what the pager counts.
        for _ in 0..2 {
            let s = tree.skeleton_stats();
            let counted = s.resident_bytes + s.skeleton_bytes;
            MEMORY.store(slack.unwrap_or(1) * counted, SeqCst);
            pager.evict(&mut tree).unwrap();
        }
        (pager.stats.resident_bytes, pager.stats.slack_permille)
    };
    let (off, f_off) = resident_after(None);
    let (none, f_none) = resident_after(Some(1));
    let (twice, f_twice) = resident_after(Some(3));
    assert_eq!((f_off, f_none), (1000, 1000));
    assert!(off <= budget && off > budget * 3 / 4, "off: fills the budget ({off})");
    assert!(none <= budget && none > budget * 3 / 4, "no slack: the same ({none})");
    // Samples clamped to 2, taken at once (a rising sample is not averaged).
    assert_eq!(f_twice, 2000);
    let limit = budget / 2;
    assert!(twice <= limit && twice > limit * 3 / 4, "slack: budget / 2 ({twice})");
}
