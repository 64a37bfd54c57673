//! Bulk import (`bavl_store::import`, `docs/design.md` §8.9): the store made from sorted
//! pairs is exactly the tree that inserting them in increasing key order makes (same
//! root, same future), from any input order through the external sort, in both input
//! formats; every class of bad input is an error naming its record and byte, and leaves
//! no file behind; an import killed midway never opens as a store.

use std::collections::BTreeMap;
use std::sync::Arc;

use bavl_core::Tree;
use bavl_store::import::{
    import, Format, Import, ImportError, ImportOptions, ImportProgress, InputProblem,
};
use bavl_store::{Backend, Ingest, IngestOptions, MemBackend, Options, Store, StoreError};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::TempDir;

/// `n` distinct pairs, keys of varying length, in no order.
fn pairs(n: usize, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut m = BTreeMap::new();
    while m.len() < n {
        let klen = rng.gen_range(1..24);
        let k: Vec<u8> = (0..klen).map(|_| rng.gen()).collect();
        let vlen = rng.gen_range(0..40);
        m.insert(k, (0..vlen).map(|_| rng.gen()).collect::<Vec<u8>>());
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.shuffle(&mut rng);
    v
}

/// The tree that inserting `pairs` in increasing key order makes.
fn ascending(pairs: &[(Vec<u8>, Vec<u8>)], capacity: u32) -> Tree {
    let mut sorted = pairs.to_vec();
    sorted.sort();
    let mut t = Tree::with_capacity(capacity).unwrap();
    for (k, v) in &sorted {
        t.insert(k, v).unwrap();
    }
    t
}

fn bin(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_lines(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    pairs.iter().map(|(k, v)| format!("{}\t{}\n", hex(k), hex(v))).collect::<String>().into()
}

fn paged() -> Options {
    Options { cache_bytes: Some(64 << 10), ..Options::default() }
}

#[test]
fn sorted_pairs_give_exactly_the_tree_of_ascending_inserts() {
    for capacity in [4, 5, 7, 16, 64] {
        let all = pairs(3000, capacity as u64);
        let mut sorted = all.clone();
        sorted.sort();
        // Every size up to a few chunks, then sizes where the spine rotates often.
        let sizes = (0..3 * capacity as usize + 3).chain([97, 500, 1021, 3000]);
        for n in sizes {
            let mut t = ascending(&sorted[..n], capacity);
            let mem = MemBackend::new();
            let b: Arc<dyn Backend> = Arc::new(mem.clone());
            let mut im = Import::create_backend(b.clone(), capacity, 7).unwrap();
            for (k, v) in &sorted[..n] {
                im.push(k, v).unwrap();
            }
            let done = im.finish().unwrap();
            assert_eq!(done.root, t.root_hash(), "capacity {capacity}, {n} keys");
            assert_eq!((done.keys, done.chunks), (n as u64, t.chunk_count()));
            let store = Store::open_backend(b, paged()).unwrap();
            assert_eq!((store.version(), store.root()), (7, t.root_hash()));
        }
    }
}

#[test]
fn an_imported_store_reads_every_pair_passes_check_and_has_the_trees_future() {
    let dir = TempDir::new("bulk-future");
    let all = pairs(5000, 1);
    let mut t = ascending(&all, 16);
    let opts = ImportOptions { capacity: 16, version: 3, ..ImportOptions::default() };
    let done = import(dir.path(), &bin(&all)[..], &opts, &mut |_| {}).unwrap();
    assert_eq!(done.root, t.root_hash());
    let b: Arc<dyn Backend> = Arc::new(bavl_store::DirBackend::open_read_only(dir.path()).unwrap());
    let report = bavl_store::check::check(&b).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    drop(b);
    // Unpaged, the whole tree's invariants hold.
    let store = Store::open(dir.path(), Options::default()).unwrap();
    store.working().check().unwrap();
    drop(store);
    let mut store = Store::open(dir.path(), paged()).unwrap();
    for (k, v) in &all {
        assert_eq!(store.get(k).unwrap(), Some(&v[..]));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for round in 0..5 {
        for _ in 0..300 {
            let (k, _) = &all[rng.gen_range(0..all.len())];
            if rng.gen_bool(0.4) {
                assert_eq!(store.remove(k).unwrap(), t.remove(k));
            } else {
                let v = vec![round as u8; rng.gen_range(0..30)];
                assert_eq!(store.insert(k, &v).unwrap(), t.insert(k, &v).unwrap());
                let fresh = [k.as_slice(), b"+"].concat();
                assert_eq!(store.insert(&fresh, &v).unwrap(), t.insert(&fresh, &v).unwrap());
            }
        }
        let (v, root) = store.commit().unwrap();
        assert_eq!((v, root), (4 + round, t.root_hash()));
    }
}

#[test]
fn unsorted_input_is_sorted_externally_in_both_formats() {
    let all = pairs(40_000, 3);
    let mut t = ascending(&all, 64);
    for (format, input) in [(Format::Bin, bin(&all)), (Format::Hex, hex_lines(&all))] {
        let dir = TempDir::new("bulk-unsorted");
        let tmp = TempDir::new("bulk-unsorted-tmp");
        std::fs::create_dir_all(tmp.path()).unwrap();
        // 64 KiB runs: about 90 of them, so the merge takes two passes.
        let opts = ImportOptions {
            format,
            sort_bytes: 64 << 10,
            tmp_dir: Some(tmp.path().to_path_buf()),
            ..ImportOptions::default()
        };
        let mut last = ImportProgress::default();
        let done = import(dir.path(), &input[..], &opts, &mut |p| last = *p).unwrap();
        assert_eq!(done.root, t.root_hash(), "{format:?}");
        assert!(last.runs > 64, "{} runs", last.runs);
        assert_eq!((last.keys, last.chunks), (done.keys, done.chunks));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the runs are deleted");
        let store = Store::open(dir.path(), paged()).unwrap();
        assert_eq!(store.root(), t.root_hash());
        // Sorted input in memory (one run) gives the same.
        let dir = TempDir::new("bulk-unsorted-mem");
        let opts = ImportOptions { format, ..ImportOptions::default() };
        assert_eq!(import(dir.path(), &input[..], &opts, &mut |_| {}).unwrap(), done);
    }
}

/// Imports `input` and expects a bad record `record` at `offset` with `problem`; the
/// directory must be left without a file.
fn refused(input: &[u8], opts: &ImportOptions, record: u64, offset: u64, problem: InputProblem) {
    let dir = TempDir::new("bulk-bad");
    match import(dir.path(), input, opts, &mut |_| {}) {
        Err(ImportError::Input { record: r, offset: o, problem: p }) => {
            assert_eq!((r, o, &p), (record, offset, &problem), "{opts:?}");
        }
        other => panic!("{opts:?}: {other:?}"),
    }
    assert!(!dir.path().exists(), "the directory the import made is removed");
}

#[test]
fn every_class_of_bad_input_names_its_record_and_byte_and_leaves_nothing() {
    let good: Vec<(Vec<u8>, Vec<u8>)> =
        (0..50u32).map(|i| (format!("k{i:04}").into_bytes(), vec![i as u8; 3])).collect();
    let rec = 4 + 5 + 4 + 3; // one binary record
    for sorted in [true, false] {
        let o = ImportOptions { sorted, ..ImportOptions::default() };
        // A key repeated: record 31 repeats record 10.
        let mut dup = good.clone();
        dup.insert(30, good[9].clone());
        refused(
            &bin(&dup),
            &o,
            31,
            30 * rec,
            match sorted {
                true => InputProblem::Unsorted,
                false => InputProblem::Duplicate { first: 10 },
            },
        );
        // A key of 0 and of 1025 bytes, a value of 16 MiB + 1 (refused from its length).
        for (k, problem) in [
            (vec![], InputProblem::KeyLength(0)),
            (vec![b'k'; 1025], InputProblem::KeyLength(1025)),
        ] {
            let mut bad = bin(&good[..7]);
            bad.extend_from_slice(&(k.len() as u32).to_le_bytes());
            bad.extend_from_slice(&k);
            refused(&bad, &o, 8, 7 * rec, problem);
        }
        let mut bad = bin(&good[..7]);
        bad.extend_from_slice(&4u32.to_le_bytes());
        bad.extend_from_slice(b"zzzz");
        bad.extend_from_slice(&((16 << 20) + 1u32).to_le_bytes());
        refused(&bad, &o, 8, 7 * rec, InputProblem::ValueLength((16 << 20) + 1));
        // Truncated at every byte of the last record.
        let whole = bin(&good);
        for cut in (whole.len() - rec as usize + 1)..whole.len() {
            refused(&whole[..cut], &o, 50, 49 * rec, InputProblem::Truncated);
        }
        // Hex: a line without TAB, odd digits, a bad digit, a long key.
        let h = ImportOptions { format: Format::Hex, ..o.clone() };
        let lines = hex_lines(&good[..5]);
        let at = lines.len() as u64;
        for (line, problem) in [
            ("6b31\n", InputProblem::Malformed("no TAB")),
            ("6b3\t00\n", InputProblem::Malformed("an odd number of hex digits")),
            ("6bzz\t00\n", InputProblem::Malformed("not a hex digit")),
            ("\t00\n", InputProblem::KeyLength(0)),
        ] {
            let mut bad = lines.clone();
            bad.extend_from_slice(line.as_bytes());
            refused(&bad, &h, 6, at, problem);
        }
    }
    // Sorted input out of order (not a duplicate).
    let mut swapped = good.clone();
    swapped.swap(20, 21);
    let o = ImportOptions { sorted: true, ..ImportOptions::default() };
    refused(&bin(&swapped), &o, 22, 21 * rec, InputProblem::Unsorted);
    // The same key twice in a row, sorted: a duplicate of the record before.
    let mut twice = good.clone();
    twice.insert(12, good[11].clone());
    refused(&bin(&twice), &o, 13, 12 * rec, InputProblem::Duplicate { first: 12 });
}

#[test]
fn a_hex_value_may_be_empty_and_the_last_line_may_lack_its_newline() {
    let all = vec![(b"a".to_vec(), vec![]), (b"b".to_vec(), vec![0xAB, 0xcd])];
    let mut t = ascending(&all, 64);
    let dir = TempDir::new("bulk-hex");
    let opts = ImportOptions { format: Format::Hex, ..ImportOptions::default() };
    let done = import(dir.path(), &b"61\t\n62\tABcd"[..], &opts, &mut |_| {}).unwrap();
    assert_eq!(done.root, t.root_hash());
}

#[test]
fn an_import_killed_midway_never_opens_as_a_store() {
    let dir = TempDir::new("bulk-killed");
    let mut sorted = pairs(2000, 4);
    sorted.sort();
    let mut im = Import::create(dir.path(), 8, 1).unwrap();
    for (k, v) in &sorted {
        im.push(k, v).unwrap();
    }
    drop(im); // As a kill: no finish.
    for opts in [paged(), Options { read_only: true, ..Options::default() }] {
        let err = Store::open(dir.path(), opts).err().expect("refused");
        assert!(err.to_string().contains("interrupted bulk import"), "{err}");
    }
    let root = ascending(&sorted, 8).root_hash();
    let err = Ingest::open(dir.path(), root, 1, IngestOptions::default()).err().unwrap();
    assert!(matches!(err, StoreError::UnfinishedIngest(_)), "{err}");
    // A new import into it is refused too; abort clears a live one.
    assert!(import(dir.path(), &bin(&sorted)[..], &ImportOptions::default(), &mut |_| {}).is_err());
    let dir = TempDir::new("bulk-abort");
    let mut im = Import::create(dir.path(), 8, 1).unwrap();
    im.push(b"k", b"v").unwrap();
    im.abort().unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn push_refuses_keys_out_of_order_or_outside_the_limits_and_changes_nothing() {
    let mem = MemBackend::new();
    let mut im = Import::create_backend(Arc::new(mem), 4, 1).unwrap();
    im.push(b"b", b"1").unwrap();
    assert!(im.push(b"a", b"2").is_err());
    assert!(im.push(b"b", b"2").is_err());
    assert!(im.push(b"", b"2").is_err());
    assert!(im.push(&[b'c'; 1025], b"2").is_err());
    assert!(im.push(b"c", &vec![0; (16 << 20) + 1]).is_err());
    im.push(b"c", b"3").unwrap();
    let done = im.finish().unwrap();
    let mut t = Tree::with_capacity(4).unwrap();
    t.insert(b"b", b"1").unwrap();
    t.insert(b"c", b"3").unwrap();
    assert_eq!((done.root, done.keys), (t.root_hash(), 2));
}

#[test]
fn a_full_disk_fails_an_import_and_abort_leaves_nothing() {
    let disk = crate::ingest::SmallDisk::new(200 << 10);
    let mut im = Import::create_backend(Arc::new(disk.clone()), 16, 1).unwrap();
    let mut sorted = pairs(60_000, 5);
    sorted.sort();
    let err = sorted.iter().find_map(|(k, v)| im.push(k, v).err()).expect("the disk fills up");
    assert!(
        matches!(&err, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull),
        "{err}"
    );
    assert!(matches!(im.push(b"\xff\xff\xff\xff", b"v"), Err(StoreError::Poisoned(_))));
    im.abort().unwrap();
    assert_eq!(disk.files.list().unwrap(), Vec::<String>::new());
}
