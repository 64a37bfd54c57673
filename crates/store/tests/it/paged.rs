//! The paged store (`Options::cache_bytes`) against a model: with a budget of a few
//! chunks, every commit evicts almost everything and every operation reloads what it
//! needs, across checkpoints (which read absent chunks back) and reopens; its roots
//! must equal an unpaged store's at every version, and its reads the model's.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::common::TempDir;
use bavl_core::{verify_range, Sha256};
use bavl_store::{CheckpointPolicy, Options, Store};

fn paged(budget: u64) -> Options {
    Options {
        capacity: Some(8),
        keep_recent: 3,
        checkpoint: CheckpointPolicy::Auto { log_ratio: 0.5, min_log_bytes: 4096 },
        cache_bytes: Some(budget),
        ..Options::default()
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn a_tiny_cache_behaves_like_the_model_across_reopens() {
    let (dir, plain_dir) = (TempDir::new("paged-model"), TempDir::new("paged-plain"));
    let mut store = Store::open(dir.path(), paged(2000)).unwrap();
    let mut plain =
        Store::open(plain_dir.path(), Options { cache_bytes: None, ..paged(0) }).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut loads, mut evictions) = (0, 0);
    for v in 1..=60u64 {
        for _ in 0..80 {
            let key = format!("key{:05}", rng.next() % 2500).into_bytes();
            match rng.next() % 10 {
                0..=5 => {
                    let value = rng.next().to_be_bytes().repeat(1 + (v % 3) as usize);
                    let new = store.insert(&key, &value).unwrap();
                    assert_eq!(new, model.insert(key.clone(), value.clone()).is_none());
                    plain.insert(&key, &value).unwrap();
                }
                6..=8 => {
                    assert_eq!(store.remove(&key).unwrap(), model.remove(&key));
                    plain.remove(&key).unwrap();
                }
                _ => assert_eq!(store.get(&key).unwrap(), model.get(&key).map(Vec::as_slice)),
            }
        }
        let (version, root) = store.commit().unwrap();
        assert_eq!((version, root), plain.commit().unwrap(), "version {v}");
        let s = store.stats().unwrap();
        let p = s.paging.expect("paging is on");
        assert!(p.resident_bytes <= 2000, "over budget after a commit: {p:?}");
        if v % 15 == 0 {
            let stats = store.stats().unwrap().paging.unwrap();
            (loads, evictions) = (loads + stats.loads, evictions + stats.evictions);
            store.close().unwrap();
            store = Store::open(dir.path(), paged(2000)).unwrap();
            assert_eq!(store.root(), root);
        }
    }
    assert!(loads > 500 && evictions > 500, "paging was exercised: {loads} {evictions}");
    assert!(
        store.last_checkpoint_report().is_some()
            || store.stats().unwrap().last_checkpoint.is_some()
    );
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v.as_slice()));
    }
    store.working().check().unwrap();
}

#[test]
fn a_value_read_from_an_evicted_chunk_after_a_reopen_is_the_committed_one() {
    let dir = TempDir::new("paged-reopen");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for i in 0u32..2000 {
        store.insert(&i.to_be_bytes(), format!("first {i}").as_bytes()).unwrap();
    }
    store.commit().unwrap();
    for i in (0u32..2000).step_by(3) {
        store.insert(&i.to_be_bytes(), format!("second {i}").as_bytes()).unwrap();
    }
    let (_, root) = store.commit().unwrap();
    store.checkpoint().unwrap();
    store.insert(&7u32.to_be_bytes(), b"after the checkpoint").unwrap();
    let (_, root2) = store.commit().unwrap();
    assert_ne!(root, root2);
    drop(store);
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    assert_eq!(store.root(), root2);
    let p = store.stats().unwrap().paging.unwrap();
    assert_eq!(p.resident_bytes, 0, "a budget of 0 leaves nothing resident: {p:?}");
    // Evicted: the working tree names the chunk it cannot read (never "absent")...
    let page = store.working().get(&5u32.to_be_bytes()).expect_err("evicted");
    assert!(!store.working().is_resident(page.index));
    // ... and the store's own read loads it.
    assert_eq!(store.get(&5u32.to_be_bytes()).unwrap(), Some(&b"first 5"[..]));
    for i in 0u32..2000 {
        let want = match i {
            7 => "after the checkpoint".to_string(),
            i if i % 3 == 0 => format!("second {i}"),
            i => format!("first {i}"),
        };
        assert_eq!(store.get(&i.to_be_bytes()).unwrap(), Some(want.as_bytes()), "key {i}");
    }
}

#[test]
fn retained_versions_read_and_prove_their_evicted_chunks() {
    let dir = TempDir::new("paged-retained");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for i in 0u32..500 {
        store.insert(&i.to_be_bytes(), b"old").unwrap();
    }
    let (v1, root1) = store.commit().unwrap();
    for i in 0u32..500 {
        store.insert(&i.to_be_bytes(), b"new").unwrap();
    }
    store.commit().unwrap();
    let old = store.snapshot(v1).unwrap();
    let key = 250u32.to_be_bytes();
    let page = old.try_get(&key).expect_err("version 1's chunks were evicted");
    let loaded = store.load_pages(&old, &[page]).unwrap();
    assert_eq!(loaded.get(&key), Ok(Some(&b"old"[..])));
    let (lo, hi) = (Bound::Included(&key[..]), Bound::Unbounded);
    assert!(old.prove_range(lo, hi).is_err(), "a proof over absent chunks is refused");
    let mut snap = old.clone();
    while let Some(p) = snap.absent_for_range(lo, hi) {
        snap = store.load_pages(&snap, &[p]).unwrap();
    }
    let proof = snap.prove_range(lo, hi).unwrap();
    let got = verify_range::<Sha256>(&root1, lo, hi, &proof).unwrap();
    assert_eq!(got.entries.len(), 250);
    assert!(old.try_get(&key).is_err(), "the retained version itself is unchanged");
    // Membership and absence proofs of a retained version: the plain calls name the
    // absent chunk (never "absent" or "present"); `resident_for` loads what they need.
    let (present, absent) = (400u32.to_be_bytes(), 5000u32.to_be_bytes());
    assert!(old.prove_membership(&present).unwrap_err().page().is_some());
    assert!(old.prove_absence(&absent).unwrap_err().page().is_some());
    for (k, v) in [(&present[..], Some(&b"old"[..])), (&absent[..], None)] {
        let view = store.resident_for(&old, |s| s.get(k).err()).unwrap();
        assert_eq!(view.get(k), Ok(v));
        let needs = |s: &bavl_core::Snapshot| match v {
            Some(_) => s.prove_membership(k).err()?.page().cloned(),
            None => s.prove_absence(k).err()?.page().cloned(),
        };
        let view = store.resident_for(&view, needs).unwrap();
        match v {
            Some(v) => {
                let p = view.prove_membership(k).unwrap();
                let _ = bavl_core::verify_membership::<Sha256>(&root1, k, v, &p).unwrap();
            }
            None => {
                let p = view.prove_absence(k).unwrap();
                let _ = bavl_core::verify_absence::<Sha256>(&root1, k, &p).unwrap();
            }
        }
    }
}

/// The file of `dir` whose name starts with `prefix`.
fn file_of(dir: &std::path::Path, prefix: &str) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} file"))
}

fn check_problems(dir: &std::path::Path) -> Vec<bavl_store::check::Problem> {
    let backend: std::sync::Arc<dyn bavl_store::Backend> =
        std::sync::Arc::new(bavl_store::DirBackend::open_read_only(dir).unwrap());
    bavl_store::check::check(&backend).unwrap().problems
}

#[test]
fn a_damaged_skeleton_is_corrupted_on_open_and_named_by_check() {
    let dir = TempDir::new("paged-damage");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for i in 0u32..1500 {
        store.insert(&i.to_be_bytes(), b"some value").unwrap();
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.close().unwrap();
    assert!(check_problems(dir.path()).is_empty());
    let skel = file_of(dir.path(), "skel-");
    let skel_name = skel.file_name().unwrap().to_string_lossy().to_string();
    let good = std::fs::read(&skel).unwrap();
    for at in (0..good.len()).step_by(13).chain([good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x04;
        std::fs::write(&skel, &bad).unwrap();
        let read_only = Options { read_only: true, ..paged(0) };
        match Store::open(dir.path(), read_only) {
            Err(bavl_store::StoreError::Corrupted { file, .. }) => assert_eq!(file, skel_name),
            Err(e) => panic!("byte {at}: another error: {e}"),
            Ok(_) => panic!("byte {at}: a damaged skeleton opened"),
        }
        if at % 91 == 0 {
            let problems = check_problems(dir.path());
            assert!(problems.iter().any(|p| p.file == skel_name), "byte {at}: {problems:?}");
        }
    }
    std::fs::write(&skel, &good).unwrap();
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    assert_eq!(store.get(&700u32.to_be_bytes()).unwrap(), Some(&b"some value"[..]));
}

#[test]
fn a_damaged_chunk_file_is_corrupted_never_an_answer() {
    let dir = TempDir::new("paged-chunk-damage");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for i in 0u32..600 {
        store.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.close().unwrap();
    let chunks = file_of(dir.path(), "chunks-");
    let chunks_name = chunks.file_name().unwrap().to_string_lossy().to_string();
    let good = std::fs::read(&chunks).unwrap();
    // The header (20 bytes) and the first two records, byte by byte.
    let first = 20 + 4 + u32::from_le_bytes(good[20..24].try_into().unwrap()) as usize;
    let end = first + 4 + u32::from_le_bytes(good[first..first + 4].try_into().unwrap()) as usize;
    for at in 0..end {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&chunks, &bad).unwrap();
        let read_only = Options { read_only: true, ..paged(0) };
        let mut store = match Store::open(dir.path(), read_only) {
            Err(bavl_store::StoreError::Corrupted { file, .. }) => {
                assert_eq!(file, chunks_name, "byte {at}");
                continue;
            }
            Err(e) => panic!("byte {at}: another error: {e}"),
            Ok(s) => s,
        };
        let mut refused = 0;
        for i in 0u32..40 {
            match store.get(&i.to_be_bytes()) {
                Ok(v) => assert_eq!(v, Some(format!("value {i}").as_bytes()), "byte {at}"),
                Err(bavl_store::StoreError::Corrupted { file, .. }) => {
                    assert_eq!(file, chunks_name, "byte {at}");
                    refused += 1;
                }
                Err(e) => panic!("byte {at}: another error: {e}"),
            }
        }
        assert!(refused > 0, "byte {at}: the damage went unnoticed");
        drop(store);
        if at % 7 == 0 {
            let problems = check_problems(dir.path());
            assert!(problems.iter().any(|p| p.file == chunks_name), "byte {at}: {problems:?}");
        }
        let unpaged = Options { read_only: true, cache_bytes: None, ..paged(0) };
        assert!(Store::open(dir.path(), unpaged).is_err(), "byte {at}: an unpaged open reads all");
    }
}

#[test]
fn a_prefetch_meeting_a_damaged_body_is_corrupted_and_later_ones_still_load() {
    let dir = TempDir::new("paged-prefetch-damage");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    let value = |i: u32| format!("value {i}").into_bytes();
    for i in 0u32..20_000 {
        store.insert(&i.to_be_bytes(), &value(i)).unwrap();
    }
    store.commit().unwrap();
    store.checkpoint().unwrap();
    store.close().unwrap();
    // One byte in the middle of the 40th record's body: it still decodes, but its hash
    // is not the one the skeleton holds.
    let chunks = file_of(dir.path(), "chunks-");
    let chunks_name = chunks.file_name().unwrap().to_string_lossy().to_string();
    let mut bytes = std::fs::read(&chunks).unwrap();
    let mut at = 20;
    for _ in 0..39 {
        at += 4 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    assert!(at + 4 + len < bytes.len(), "the chunk file holds more than 40 records");
    bytes[at + 4 + len / 2] ^= 0x01;
    std::fs::write(&chunks, &bytes).unwrap();

    // A budget that holds the whole state: a prefetch loads no more than fits
    // (`Store::prefetch`), and this one is to meet the damaged body.
    let mut store = Store::open(dir.path(), paged(16 << 20)).unwrap();
    let keys: Vec<[u8; 4]> = (0u32..20_000).map(u32::to_be_bytes).collect();
    match store.prefetch(&keys) {
        Err(bavl_store::StoreError::Corrupted { file, .. }) => assert_eq!(file, chunks_name),
        other => panic!("a prefetch over a damaged body: {other:?}"),
    }
    // Every key answers right or is refused; only the damaged chunk's are refused.
    let mut refused = Vec::new();
    for i in 0u32..20_000 {
        match store.get(&i.to_be_bytes()) {
            Ok(v) => assert_eq!(v, Some(&value(i)[..]), "key {i}"),
            Err(bavl_store::StoreError::Corrupted { .. }) => refused.push(i),
            Err(e) => panic!("key {i}: another error: {e}"),
        }
    }
    assert!(!refused.is_empty() && refused.len() <= 64, "{} refused", refused.len());
    drop(store);
    // Further prefetches, on the same reading threads, after each commit evicted
    // everything (a budget of 0; the commit writes past every key read here). Few keys
    // a round: with a budget of 0 a prefetch loads at most `evict::MIN_STEP` of bodies.
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for round in 0u32..3 {
        store.insert(&(100_000 + round).to_be_bytes(), b"later").unwrap();
        store.commit().unwrap();
        assert!(store.working().get(&7u32.to_be_bytes()).is_err(), "round {round}: evicted");
        let rest: Vec<[u8; 4]> = (0u32..20_000)
            .filter(|i| i % 300 == round && !refused.contains(i))
            .map(u32::to_be_bytes)
            .collect();
        assert!(store.prefetch(&rest).unwrap() > 0, "round {round}");
        for k in &rest {
            let i = u32::from_be_bytes(*k);
            assert_eq!(store.working().get(k), Ok(Some(&value(i)[..])), "round {round}, key {i}");
        }
    }
}

#[test]
fn checkpoints_compact_mostly_dead_chunk_files_and_delete_them() {
    let dir = TempDir::new("paged-compact");
    let opts = Options { checkpoint: CheckpointPolicy::Manual, ..paged(4000) };
    let mut store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng(7);
    let disk = |store: &Store| -> (u64, usize) {
        let files = store.stats().unwrap().files;
        let chunks: Vec<_> = files.iter().filter(|(n, _)| n.starts_with("chunks-")).collect();
        (chunks.iter().map(|(_, l)| l).sum(), chunks.len())
    };
    let mut peak = 0;
    let mut history = std::collections::VecDeque::new();
    for v in 1..=120u64 {
        for _ in 0..60 {
            let key = format!("key{:04}", rng.next() % 1500).into_bytes();
            let value = rng.next().to_be_bytes().to_vec();
            store.insert(&key, &value).unwrap();
            model.insert(key, value);
        }
        let (version, _) = store.commit().unwrap();
        history.push_back((version, model.clone()));
        if v % 3 == 0 {
            store.checkpoint().unwrap();
            store.wait_checkpoint().unwrap();
        }
        // Every retained version reads its own values, loading from whatever chunk file
        // (compacted or not) it names: nothing it needs was deleted.
        while history.front().is_some_and(|(h, _)| *h < store.versions().next().unwrap()) {
            history.pop_front();
        }
        for (h, m) in &history {
            let mut snap = store.snapshot(*h).unwrap();
            for (k, want) in m.iter().step_by(37) {
                if let Err(page) = snap.try_get(k) {
                    snap = store.load_pages(&snap, &[page]).unwrap();
                }
                assert_eq!(snap.try_get(k).unwrap(), Some(want.as_slice()), "version {h}");
            }
        }
        if v % 40 == 0 {
            history.clear();
            store.close().unwrap();
            store = Store::open(dir.path(), opts.clone()).unwrap();
        }
        if v > 60 {
            peak = peak.max(disk(&store).0);
        }
    }
    let p = store.stats().unwrap().paging.unwrap();
    let (bytes, files) = disk(&store);
    // 1500 keys of about 30 bytes: about 60 KB live. Without compaction every body
    // rewritten since the first checkpoint would stay (several MB by now).
    // Measured: 99 KB at the peak with compaction, 215 KB (and rising) without.
    assert!(peak < 150_000, "chunk files grow without bound: {peak} bytes ({p:?})");
    assert!(files < 8, "{files} chunk files");
    assert!(bytes > 0);
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v.as_slice()));
    }
    store.close().unwrap();
    let problems = check_problems(dir.path());
    assert!(problems.is_empty(), "{problems:?}");
    let mut store = Store::open(dir.path(), opts).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v.as_slice()));
    }
}

#[test]
fn a_store_moves_between_paged_and_unpaged_and_a_failed_open_writes_nothing() {
    let dir = TempDir::new("paged-switch");
    let mut model = BTreeMap::new();
    let mut rng = Rng(99);
    let mut step = |store: &mut Store, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        for _ in 0..200 {
            let key = format!("k{:05}", rng.next() % 3000).into_bytes();
            let value = rng.next().to_le_bytes().to_vec();
            store.insert(&key, &value).unwrap();
            model.insert(key, value);
        }
        store.commit().unwrap();
        store.checkpoint().unwrap();
        store.wait_checkpoint().unwrap();
        store.commit().unwrap();
    };
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    let unpaged = Options { cache_bytes: None, ..paged(0) };
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    step(&mut store, &mut model);
    store.close().unwrap();
    // Unpaged: the skeleton's bodies are read (verified) into memory.
    let mut store = Store::open(dir.path(), unpaged.clone()).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v.as_slice()));
    }
    for _ in 0..4 {
        step(&mut store, &mut model);
    }
    store.close().unwrap();
    assert!(!names(dir.path()).iter().any(|n| n.starts_with("chunks-")), "{:?}", names(dir.path()));
    // Paged again, from a full checkpoint.
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v.as_slice()));
    }
    for _ in 0..4 {
        step(&mut store, &mut model);
    }
    store.close().unwrap();
    assert!(check_problems(dir.path()).is_empty());
    // A damaged skeleton: the open fails and creates no file.
    let skel = names(dir.path()).into_iter().rfind(|n| n.starts_with("skel-")).unwrap();
    let path = dir.path().join(&skel);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let before = names(dir.path());
    assert!(Store::open(dir.path(), paged(0)).is_err());
    assert_eq!(names(dir.path()), before, "a failed open changed the directory");
}

#[test]
fn prefetch_makes_a_blocks_chunks_resident() {
    let dir = TempDir::new("paged-prefetch");
    let mut store = Store::open(dir.path(), paged(0)).unwrap();
    for i in 0u32..3000 {
        store.insert(&i.to_be_bytes(), b"v").unwrap();
    }
    store.commit().unwrap();
    let keys: Vec<[u8; 4]> = (0u32..3000).step_by(97).map(u32::to_be_bytes).collect();
    assert!(keys.iter().all(|k| store.working().get(k).is_err()), "everything was evicted");
    let loaded = store.prefetch(&keys).unwrap();
    assert!(loaded > 10 && loaded <= keys.len(), "{loaded}");
    let resident = |k: &[u8; 4]| store.working().get(k) == Ok(Some(&b"v"[..]));
    assert!(keys.iter().all(resident), "resident after prefetch");
    assert_eq!(store.prefetch(&keys).unwrap(), 0, "nothing left to load");
}
