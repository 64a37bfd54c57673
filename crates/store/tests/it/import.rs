//! `Store::create_from_tree`: a tree written as a new store opens at its version and root,
//! commits continue after it, and an existing store is never overwritten.

use bavl_core::Tree;
use bavl_store::{Options, Store, StoreError};

fn temp(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("bavl-import-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn tree(keys: u32) -> Tree {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0..keys {
        t.insert(&i.to_be_bytes(), &(i * 7).to_le_bytes()).unwrap();
    }
    t
}

#[test]
fn imported_tree_opens_at_its_version_and_root() {
    let dir = temp("open");
    let mut t = tree(3000);
    Store::create_from_tree(&dir, &mut t, 42).unwrap();
    let mut store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!(store.version(), 42);
    assert_eq!(store.root(), t.root_hash());
    assert_eq!(store.capacity(), 16);
    assert_eq!(store.snapshot(42).unwrap().len(), 3000);
    assert_eq!(store.get(&5u32.to_be_bytes()).unwrap(), Some(&35u32.to_le_bytes()[..]));
    store.insert(b"new", b"v").unwrap();
    let (v, root) = store.commit().unwrap();
    assert_eq!(v, 43);
    store.close().unwrap();
    let store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!((store.version(), store.root()), (43, root));
    drop(store);
    let report = bavl_store::check::check(
        &(std::sync::Arc::new(bavl_store::DirBackend::open(&dir).unwrap())
            as std::sync::Arc<dyn bavl_store::Backend>),
    )
    .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_existing_store_is_not_overwritten() {
    let dir = temp("exists");
    let mut store = Store::open(&dir, Options::default()).unwrap();
    store.insert(b"k", b"v").unwrap();
    let (_, root) = store.commit().unwrap();
    store.close().unwrap();
    let err = Store::create_from_tree(&dir, &mut tree(10), 9).unwrap_err();
    assert!(matches!(err, StoreError::InvalidOption(_)), "{err}");
    let store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!((store.version(), store.root()), (1, root), "unchanged by the failed call");
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn empty_tree_imports() {
    let dir = temp("empty");
    let mut t = Tree::with_capacity(8).unwrap();
    Store::create_from_tree(&dir, &mut t, 5).unwrap();
    let store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!((store.version(), store.root()), (5, t.root_hash()));
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

/// A checkpoint file filled in any order (as `bavl sync` fills one) and sealed.
fn shuffled_checkpoint(path: &std::path::Path, t: &mut Tree, version: u64, dup: bool) {
    use bavl_store::checkpoint::{encode_header, encode_trailer, record_prefix};
    let snap = t.snapshot();
    let n = snap.chunk_count();
    let mut order: Vec<u64> = (0..n).collect();
    // A fixed permutation: odd indices descending, then even ones ascending.
    order.sort_by_key(|i| if i % 2 == 1 { (0, u64::MAX - i) } else { (1, *i) });
    if dup {
        order[1] = order[0];
    }
    let mut file = encode_header(version, &snap.root_hash(), 0, 0, 0);
    for i in order {
        let c = snap.export_chunk(i).unwrap();
        file.extend(record_prefix(&c));
        file.extend(c);
    }
    file.extend(encode_trailer(n));
    let head = encode_header(version, &snap.root_hash(), snap.capacity(), snap.len(), n);
    file[..head.len()].copy_from_slice(&head);
    std::fs::write(path, file).unwrap();
}

#[test]
fn an_adopted_checkpoint_in_arrival_order_opens_at_its_version_and_root() {
    let dir = temp("adopt");
    let file = temp("adopt-file");
    let mut t = tree(3000);
    shuffled_checkpoint(&file, &mut t, 9, false);
    Store::adopt_checkpoint(&dir, &file, 9).unwrap();
    assert!(!file.exists(), "the file is moved into the store, not copied");
    let mut store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!((store.version(), store.root(), store.capacity()), (9, t.root_hash(), 16));
    assert_eq!(store.get(&5u32.to_be_bytes()).unwrap(), Some(&35u32.to_le_bytes()[..]));
    drop(store);
    let report = bavl_store::check::check(
        &(std::sync::Arc::new(bavl_store::DirBackend::open(&dir).unwrap())
            as std::sync::Arc<dyn bavl_store::Backend>),
    )
    .unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    // A second adoption into the same directory is refused.
    shuffled_checkpoint(&file, &mut t, 9, false);
    assert!(matches!(Store::adopt_checkpoint(&dir, &file, 9), Err(StoreError::InvalidOption(_))));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn adoption_refuses_a_wrong_version_or_unfinished_header_and_open_catches_a_repeat() {
    let file = temp("adopt-bad-file");
    let mut t = tree(2000);
    shuffled_checkpoint(&file, &mut t, 5, false);
    let dir = temp("adopt-bad-version");
    assert!(matches!(Store::adopt_checkpoint(&dir, &file, 6), Err(StoreError::Corrupted { .. })));
    // A header still at its zero counts: the file was never sealed.
    let mut bytes = std::fs::read(&file).unwrap();
    let snap = t.snapshot();
    let open = bavl_store::checkpoint::encode_header(5, &snap.root_hash(), 0, 0, 0);
    bytes[..open.len()].copy_from_slice(&open);
    std::fs::write(&file, &bytes).unwrap();
    let dir2 = temp("adopt-unsealed");
    assert!(matches!(Store::adopt_checkpoint(&dir2, &file, 5), Err(StoreError::Corrupted { .. })));
    // One chunk twice (and so one missing): adopted (only the header is read), but the
    // store refuses to open.
    shuffled_checkpoint(&file, &mut t, 5, true);
    let dir3 = temp("adopt-dup");
    Store::adopt_checkpoint(&dir3, &file, 5).unwrap();
    match Store::open(&dir3, Options::default()) {
        Err(StoreError::Corrupted { what, .. }) => assert!(what.contains("chunk record"), "{what}"),
        other => panic!("expected Corrupted, got {:?}", other.map(|s| s.version())),
    }
    for d in [dir, dir2, dir3] {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_file(&file);
}
