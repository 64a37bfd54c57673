//! A file of an existing store deleted, emptied or cut in half is damage
//! (`StoreError::Corrupted` naming a file of the store), never an I/O error and never a
//! new store: for every file of an in-memory store and of a paged one, opened read-only
//! and writable (`docs/design.md` §8.4).

use std::path::Path;

use crate::common::TempDir;
use bavl_store::{CheckpointPolicy, Options, Store, StoreError};

fn build(dir: &Path, opts: &Options) {
    let mut store = Store::open(dir, opts.clone()).unwrap();
    for v in 1..=12u32 {
        for i in 0..300u32 {
            let key = format!("k{:05}", (i * 37 + v * 11) % 2000);
            store.insert(key.as_bytes(), format!("{v}-{i}").as_bytes()).unwrap();
        }
        store.commit().unwrap();
        if v == 8 {
            store.checkpoint().unwrap();
            store.wait_checkpoint().unwrap().unwrap();
        }
    }
    store.close().unwrap();
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Deleted,
    Emptied,
    Halved,
}

fn damage(path: &Path, how: Damage) {
    match how {
        Damage::Deleted => std::fs::remove_file(path).unwrap(),
        Damage::Emptied => std::fs::write(path, b"").unwrap(),
        Damage::Halved => {
            let bytes = std::fs::read(path).unwrap();
            std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap();
        }
    }
}

#[test]
fn a_missing_or_cut_file_of_a_store_is_damage_naming_a_file() {
    let manual = CheckpointPolicy::Manual;
    let configs = [
        ("in-memory", Options { capacity: Some(8), checkpoint: manual, ..Options::in_memory() }),
        ("paged", Options { capacity: Some(8), checkpoint: manual, ..Options::paged(0) }),
    ];
    for (what, opts) in configs {
        let original = TempDir::new(&format!("missing-{what}"));
        build(original.path(), &opts);
        let mut names: Vec<String> = std::fs::read_dir(original.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert!(names.iter().any(|n| n.starts_with("wal-")), "{what}: {names:?}");
        for name in &names {
            for how in [Damage::Deleted, Damage::Emptied, Damage::Halved] {
                for read_only in [true, false] {
                    let dir = TempDir::new(&format!("missing-{what}-copy"));
                    copy(original.path(), dir.path());
                    damage(&dir.path().join(name), how);
                    let o = Options { read_only, ..opts.clone() };
                    let case = format!("{what}, {name} {how:?}, read-only {read_only}");
                    match Store::open(dir.path(), o) {
                        Ok(_) => assert!(
                            name != "bavl.meta"
                                && !name.starts_with("ckpt-")
                                && !name.starts_with("skel-"),
                            "{case}: opened"
                        ),
                        Err(StoreError::Corrupted { file, .. }) => {
                            // The file damaged, or the one the damage shows as missing
                            // (a deleted skeleton is a checkpoint missing before the log).
                            let kinds = ["bavl.meta", "HEAD", "wal-", "ckpt-", "skel-", "chunks-"];
                            assert!(kinds.iter().any(|k| file.starts_with(k)), "{case}: {file}");
                            if name == "bavl.meta" {
                                assert_eq!(file, "bavl.meta", "{case}");
                            }
                        }
                        Err(e) => panic!("{case}: not reported as damage: {e}"),
                    }
                }
            }
        }
    }
}
