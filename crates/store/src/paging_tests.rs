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
