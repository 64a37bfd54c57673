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
    assert_eq!(store.get(&5u32.to_be_bytes()), Some(&35u32.to_le_bytes()[..]));
    store.insert(b"new", b"v").unwrap();
    let (v, root) = store.commit().unwrap();
    assert_eq!(v, 43);
    store.close().unwrap();
    let store = Store::open(&dir, Options::default()).unwrap();
    assert_eq!((store.version(), store.root()), (43, root));
    drop(store);
    let report = bavl_store::check::check(&bavl_store::DirBackend::open(&dir).unwrap()).unwrap();
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
