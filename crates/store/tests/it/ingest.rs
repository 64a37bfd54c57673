//! `Ingest`: a store built from verified chunks in any order, with only its skeleton in
//! memory, opens paged at its version and root and behaves as any paged store; it resumes
//! after a kill at any point, drops a torn journal tail, refuses a damaged journal, and is
//! never opened as a store while unfinished (`docs/design.md` §8.8).

use std::sync::Arc;

use bavl_core::{verify_chunk, Digest, Sha256, Tree, VerifiedChunk};
use bavl_store::{
    Backend, FaultyBackend, Ingest, IngestOptions, MemBackend, Options, Store, StoreError,
    JOURNAL_FILE,
};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::TempDir;

fn key(i: u32) -> Vec<u8> {
    format!("key-{:08}", i.wrapping_mul(2_654_435_761)).into_bytes()
}

fn value(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// A tree of `n` keys with values of `vlen` bytes.
fn tree(n: u32, capacity: u32, vlen: usize) -> Tree {
    let mut t = Tree::with_capacity(capacity).unwrap();
    for i in 0..n {
        t.insert(&key(i), &value(i, vlen)).unwrap();
    }
    t
}

/// Every chunk of `t`, exported and verified, in a shuffled order.
fn chunks(t: &mut Tree, seed: u64) -> (Digest, Vec<VerifiedChunk>) {
    let snap = t.snapshot();
    let root = snap.root_hash();
    let mut out: Vec<_> = (0..snap.chunk_count())
        .map(|i| verify_chunk::<Sha256>(&root, i, &snap.export_chunk(i).unwrap()).unwrap())
        .collect();
    out.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    (root, out)
}

/// `bavl check`'s verification of the store at `dir`.
fn check(dir: &std::path::Path) -> Result<bavl_store::check::CheckReport, StoreError> {
    let b: Arc<dyn Backend> = Arc::new(bavl_store::DirBackend::open_read_only(dir).unwrap());
    bavl_store::check::check(&b)
}

fn small_flush() -> IngestOptions {
    IngestOptions { flush_bytes: 16 << 10, ..IngestOptions::default() }
}

fn paged() -> Options {
    Options { cache_bytes: Some(64 << 10), ..Options::default() }
}

/// The store at `dir` holds exactly `t`'s pairs and root at `version`, and its next
/// commit gives the root the same operations give `t`.
fn check_store(mut store: Store, t: &mut Tree, version: u64) {
    assert_eq!(store.version(), version);
    assert_eq!(store.root(), t.root_hash());
    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
        t.iter().unwrap().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    for (k, v) in &pairs {
        assert_eq!(store.get(k).unwrap(), Some(&v[..]), "key {k:?}");
    }
    assert_eq!(store.get(b"absent").unwrap(), None);
    // It goes on as any store: the same edits give the same root as on the tree.
    for (i, (k, _)) in pairs.iter().enumerate().step_by(7) {
        store.insert(k, b"changed").unwrap();
        t.insert(k, b"changed").unwrap();
        if i % 3 == 0 {
            store.remove(k).unwrap();
            t.remove(k);
        }
    }
    store.insert(b"a-new-key", b"new").unwrap();
    t.insert(b"a-new-key", b"new").unwrap();
    let (v, root) = store.commit().unwrap();
    assert_eq!((v, root), (version + 1, t.root_hash()));
}

/// A sync verifies and writes on threads of its own: the writer moves between them.
#[test]
fn an_ingest_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Ingest>();
    send::<bavl_store::import::Import>();
}

#[test]
fn shuffled_chunks_make_a_store_that_opens_paged_at_the_version_and_root() {
    let dir = TempDir::new("ingest-shuffled");
    let mut t = tree(3000, 16, 40);
    let (root, chunks) = chunks(&mut t, 1);
    let count = chunks.len() as u64;
    let mut ing = Ingest::open(dir.path(), root, 77, small_flush()).unwrap();
    assert_eq!(ing.chunk_count(), None);
    for (n, c) in chunks.into_iter().enumerate() {
        let again = c.clone();
        assert!(ing.add_verified(c).unwrap());
        assert!(!ing.add_verified(again).unwrap(), "a chunk held is ignored");
        assert_eq!(ing.received(), n as u64 + 1);
    }
    assert_eq!(ing.chunk_count(), Some(count));
    assert!(ing.is_complete() && ing.missing().next().is_none());
    assert_eq!(ing.finish().unwrap(), (77, root));
    let names = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    assert!(!names.iter().any(|n| n == JOURNAL_FILE || n.ends_with(".tmp")), "{names:?}");
    let store = Store::open(dir.path(), paged()).unwrap();
    assert_eq!(store.recovery().replayed, 0);
    check_store(store, &mut t, 77);
    // And again after a reopen (the commit went to the log after the skeleton).
    let store = Store::open(dir.path(), paged()).unwrap();
    assert_eq!((store.version(), store.root()), (78, t.root_hash()));
}

#[test]
fn an_unpaged_open_and_a_check_accept_the_ingested_store() {
    let dir = TempDir::new("ingest-unpaged");
    let mut t = tree(500, 8, 10);
    let (root, chunks) = chunks(&mut t, 2);
    let mut ing = Ingest::open(dir.path(), root, 5, IngestOptions::default()).unwrap();
    chunks.into_iter().for_each(|c| assert!(ing.add_verified(c).unwrap()));
    ing.finish().unwrap();
    let report = check(dir.path()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    check_store(Store::open(dir.path(), Options::default()).unwrap(), &mut t, 5);
}

#[test]
fn bodies_spread_over_several_chunk_files_when_one_would_grow_past_its_limit() {
    let dir = TempDir::new("ingest-files");
    let mut t = tree(3000, 16, 1000);
    let (root, chunks) = chunks(&mut t, 3);
    let opts = IngestOptions { chunk_file_bytes: 1 << 20, ..small_flush() };
    let mut ing = Ingest::open(dir.path(), root, 1, opts.clone()).unwrap();
    let half = chunks.len() / 2;
    for c in chunks[..half].iter().cloned() {
        ing.add_verified(c).unwrap();
    }
    ing.flush().unwrap();
    drop(ing);
    let mut ing = Ingest::open(dir.path(), root, 1, opts).unwrap();
    assert_eq!(ing.resumed(), half as u64);
    for c in chunks[half..].iter().cloned() {
        ing.add_verified(c).unwrap();
    }
    ing.finish().unwrap();
    let files = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("chunks-"))
        .count();
    assert!(files >= 3, "{files} chunk files for 3 MB of bodies at 1 MiB a file");
    check_store(Store::open(dir.path(), paged()).unwrap(), &mut t, 1);
}

#[test]
fn an_ingest_killed_at_random_points_resumes_without_fetching_flushed_chunks_again() {
    let dir = TempDir::new("ingest-resume");
    let mut t = tree(4000, 16, 30);
    let (root, chunks) = chunks(&mut t, 4);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut durable = Vec::new();
    let mut rounds = 0;
    loop {
        let mut ing = Ingest::open(dir.path(), root, 9, small_flush()).unwrap();
        rounds += 1;
        // Whatever it has it does not need again; the rest of what was added is lost.
        let have: Vec<u64> = (0..chunks.len() as u64).filter(|&i| ing.have(i)).collect();
        assert_eq!(ing.resumed(), have.len() as u64);
        let missing: Vec<u64> = ing.missing().collect();
        if ing.chunk_count().is_some() {
            assert_eq!(have.len() + missing.len(), chunks.len());
        }
        assert!(durable.iter().all(|&i| ing.have(i)), "a flushed chunk was lost");
        let todo: Vec<&VerifiedChunk> = chunks.iter().filter(|c| !ing.have(c.index)).collect();
        let stop = rng.gen_range(0..=todo.len().min(120));
        if stop == todo.len() || rounds > 60 {
            todo.into_iter().for_each(|c| assert!(ing.add_verified(c.clone()).unwrap()));
            ing.finish().unwrap();
            break;
        }
        for c in &todo[..stop] {
            ing.add_verified((*c).clone()).unwrap();
        }
        if rng.gen_bool(0.5) {
            ing.flush().unwrap();
            durable.extend(todo[..stop].iter().map(|c| c.index));
        }
        drop(ing); // A kill: nothing more is written.
                   // Until finished, the directory is no store.
        let err = Store::open(dir.path(), paged()).err().expect("refused");
        assert!(matches!(err, StoreError::UnfinishedIngest(_)), "{err}");
    }
    assert!(rounds > 3, "the test resumed {rounds} times");
    check_store(Store::open(dir.path(), paged()).unwrap(), &mut t, 9);
}

#[test]
fn a_directory_holding_an_unfinished_ingest_never_opens_as_a_store() {
    let dir = TempDir::new("ingest-refused");
    let mut t = tree(300, 8, 10);
    let (root, chunks) = chunks(&mut t, 6);
    let mut ing = Ingest::open(dir.path(), root, 3, IngestOptions::default()).unwrap();
    chunks.iter().cloned().for_each(|c| assert!(ing.add_verified(c).unwrap()));
    ing.flush().unwrap();
    drop(ing);
    for opts in [Options::default(), paged(), Options { read_only: true, ..Options::default() }] {
        let err = Store::open(dir.path(), opts).err().expect("refused");
        let msg = err.to_string();
        assert!(matches!(err, StoreError::UnfinishedIngest(_)), "{msg}");
        assert!(msg.contains("unfinished ingest of version 3"), "{msg}");
    }
    assert!(Store::create_from_tree(dir.path(), &mut t, 3).is_err());
    assert!(matches!(check(dir.path()), Err(StoreError::UnfinishedIngest(_))));
    // Nothing was changed by the refusals: the ingest finishes.
    let ing = Ingest::open(dir.path(), root, 3, IngestOptions::default()).unwrap();
    assert!(ing.is_complete());
    ing.finish().unwrap();
    check_store(Store::open(dir.path(), paged()).unwrap(), &mut t, 3);
}

#[test]
fn finish_before_every_chunk_is_an_error_and_the_ingest_stays_resumable() {
    let dir = TempDir::new("ingest-incomplete");
    let mut t = tree(300, 8, 10);
    let (root, chunks) = chunks(&mut t, 7);
    let mut ing = Ingest::open(dir.path(), root, 3, IngestOptions::default()).unwrap();
    chunks[1..].iter().cloned().for_each(|c| assert!(ing.add_verified(c).unwrap()));
    let first = chunks[0].index;
    match ing.finish() {
        Err(StoreError::IngestIncomplete { missing: 1, first: f, .. }) => assert_eq!(f, first),
        r => panic!("{:?}", r.map(|_| ())),
    }
    let mut ing = Ingest::open(dir.path(), root, 3, IngestOptions::default()).unwrap();
    assert_eq!(ing.missing().collect::<Vec<_>>(), [first]);
    ing.add_verified(chunks[0].clone()).unwrap();
    ing.finish().unwrap();
    check_store(Store::open(dir.path(), paged()).unwrap(), &mut t, 3);
}

#[test]
fn another_root_version_or_tree_is_refused_and_changes_nothing() {
    let dir = TempDir::new("ingest-other");
    let mut t = tree(300, 8, 10);
    let mut other = tree(301, 8, 10);
    let (root, chunks) = chunks(&mut t, 8);
    let (other_root, other_chunks) = crate::ingest::chunks(&mut other, 8);
    let mut ing = Ingest::open(dir.path(), root, 3, IngestOptions::default()).unwrap();
    ing.add_verified(chunks[0].clone()).unwrap();
    let err = ing.add_verified(other_chunks[0].clone()).unwrap_err();
    assert!(matches!(err, StoreError::InvalidOption(_)), "{err}");
    assert_eq!(ing.received(), 1);
    ing.flush().unwrap();
    drop(ing);
    for (r, v) in [(other_root, 3), (root, 4)] {
        let err = Ingest::open(dir.path(), r, v, IngestOptions::default()).err().unwrap();
        assert!(matches!(err, StoreError::InvalidOption(_)), "{err}");
    }
    // A directory holding anything else is not written to.
    let busy = TempDir::new("ingest-busy");
    std::fs::create_dir_all(busy.path()).unwrap();
    std::fs::write(busy.path().join("notes.txt"), b"mine").unwrap();
    assert!(Ingest::open(busy.path(), root, 3, IngestOptions::default()).is_err());
    let names: Vec<_> = std::fs::read_dir(busy.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
    let store = TempDir::new("ingest-store");
    Store::create_from_tree(store.path(), &mut other, 1).unwrap();
    let err = Ingest::open(store.path(), root, 3, IngestOptions::default()).err().unwrap();
    assert!(err.to_string().contains("already holds"), "{err}");
}

#[test]
fn the_empty_state_ingests_with_no_chunk() {
    let dir = TempDir::new("ingest-empty");
    let mut t = Tree::with_capacity(32).unwrap();
    let opts = IngestOptions { empty_capacity: 32, ..IngestOptions::default() };
    let ing = Ingest::open(dir.path(), t.root_hash(), 12, opts).unwrap();
    assert_eq!(ing.finish().unwrap(), (12, t.root_hash()));
    let store = Store::open(dir.path(), paged()).unwrap();
    assert_eq!(store.capacity(), 32);
    check_store(store, &mut t, 12);
    // Another capacity is another root: refused.
    let dir = TempDir::new("ingest-empty-wrong");
    let ing = Ingest::open(dir.path(), t.root_hash(), 1, IngestOptions::default()).unwrap();
    let err = ing.finish().unwrap_err();
    assert!(err.to_string().contains("empty tree of capacity 64"), "{err}");
}

/// Flushes the first `n` of `chunks` into a new ingest at `dir` and returns the journal's
/// path and length.
fn flushed(dir: &TempDir, root: Digest, chunks: &[VerifiedChunk], n: usize) -> std::path::PathBuf {
    let mut ing = Ingest::open(dir.path(), root, 2, IngestOptions::default()).unwrap();
    for c in &chunks[..n] {
        ing.add_verified(c.clone()).unwrap();
        ing.flush().unwrap(); // one frame per flush
    }
    dir.path().join(JOURNAL_FILE)
}

#[test]
fn a_torn_journal_tail_is_dropped_and_its_chunks_fetched_again() {
    let mut t = tree(400, 8, 10);
    let (root, chunks) = chunks(&mut t, 9);
    let full = {
        let dir = TempDir::new("ingest-torn-len");
        std::fs::metadata(flushed(&dir, root, &chunks, 10)).unwrap().len()
    };
    let nine = {
        let dir = TempDir::new("ingest-torn-len9");
        std::fs::metadata(flushed(&dir, root, &chunks, 9)).unwrap().len()
    };
    // Every cut inside the last frame, and zeros over its end, lose that chunk only.
    for cut in (nine + 1..full).step_by(7).chain([full - 1]) {
        for zeros in [false, true] {
            let dir = TempDir::new("ingest-torn");
            let j = flushed(&dir, root, &chunks, 10);
            let mut bytes = std::fs::read(&j).unwrap();
            if zeros {
                bytes[cut as usize..].fill(0);
            } else {
                bytes.truncate(cut as usize);
            }
            std::fs::write(&j, &bytes).unwrap();
            let mut ing = Ingest::open(dir.path(), root, 2, IngestOptions::default()).unwrap();
            assert_eq!(ing.resumed(), 9, "cut at {cut}");
            assert!(!ing.have(chunks[9].index) && ing.have(chunks[8].index));
            for c in &chunks {
                ing.add_verified(c.clone()).unwrap();
            }
            ing.finish().unwrap();
            let store = Store::open(dir.path(), paged()).unwrap();
            assert_eq!(store.root(), root);
        }
    }
}

#[test]
fn a_damaged_journal_is_an_error_never_a_wrong_store() {
    let mut t = tree(400, 8, 10);
    let (root, chunks) = chunks(&mut t, 10);
    let len = {
        let dir = TempDir::new("ingest-damage-len");
        std::fs::metadata(flushed(&dir, root, &chunks, 6)).unwrap().len() as usize
    };
    // Every byte but those of the last frame (whose damage is a torn tail).
    let last = {
        let dir = TempDir::new("ingest-damage-len5");
        std::fs::metadata(flushed(&dir, root, &chunks, 5)).unwrap().len() as usize
    };
    let dir = TempDir::new("ingest-damage");
    let j = flushed(&dir, root, &chunks, 6);
    let good = std::fs::read(&j).unwrap();
    assert_eq!(good.len(), len);
    for at in 0..last {
        let mut bytes = good.clone();
        bytes[at] ^= 0x40;
        std::fs::write(&j, &bytes).unwrap();
        match Ingest::open(dir.path(), root, 2, IngestOptions::default()) {
            Err(StoreError::Corrupted { .. }) => {}
            Err(e) => panic!("byte {at}: {e}"),
            Ok(_) => panic!("byte {at} damaged, and the journal was accepted"),
        }
        let err = Store::open(dir.path(), paged()).err().expect("refused");
        assert!(matches!(err, StoreError::UnfinishedIngest(_)), "{err}");
    }
}

#[test]
fn a_write_or_sync_failing_at_any_point_leaves_a_resumable_ingest() {
    let mut t = tree(600, 8, 200);
    let (root, chunks) = chunks(&mut t, 11);
    let opts = IngestOptions { flush_bytes: 8 << 10, ..IngestOptions::default() };
    let (mut failed_in_finish, mut budget) = (0, 0);
    loop {
        let mem = MemBackend::new();
        let f = FaultyBackend::new(Arc::new(mem.clone()), budget);
        let mut in_finish = false;
        let mut run = || -> Result<(), StoreError> {
            let mut ing = Ingest::open_backend(Arc::new(f.clone()), root, 4, opts.clone())?;
            for c in &chunks {
                ing.add_verified(c.clone())?;
            }
            in_finish = true;
            ing.finish().map(|_| ())
        };
        let r = run();
        if !f.tripped() {
            r.unwrap();
            break; // The budget covers a whole run.
        }
        let err = r.expect_err("the fault is met");
        failed_in_finish += in_finish as u32;
        budget += 1;
        let b: Arc<dyn Backend> = Arc::new(mem.clone());
        let names = mem.list().unwrap();
        if !names.iter().any(|n| n == JOURNAL_FILE) {
            // Failed before the journal was in place, or after it was removed.
            match names.iter().any(|n| n == "HEAD") {
                true => assert!(Store::open_backend(b, paged()).is_ok()),
                false => assert!(
                    names.iter().all(|n| n.ends_with(".tmp")),
                    "budget {budget}: {err}: {names:?}"
                ),
            }
            continue;
        }
        assert!(matches!(
            Store::open_backend(b.clone(), paged()).err(),
            Some(StoreError::UnfinishedIngest(_))
        ));
        // A healthy backend over the same files resumes and finishes.
        let mut ing = Ingest::open_backend(b.clone(), root, 4, opts.clone()).unwrap();
        for c in &chunks {
            ing.add_verified(c.clone()).unwrap();
        }
        ing.finish().unwrap();
        let store = Store::open_backend(b, paged()).unwrap();
        assert_eq!((store.version(), store.root()), (4, root), "budget {budget}");
    }
    assert!(budget > 20 && failed_in_finish > 5, "{budget} operations, {failed_in_finish}");
}

#[test]
fn a_bad_journal_header_or_frame_bounds_are_refused() {
    let mut t = tree(100, 8, 10);
    let (root, chunks) = chunks(&mut t, 12);
    let dir = TempDir::new("ingest-header");
    let j = flushed(&dir, root, &chunks, 2);
    let good = std::fs::read(&j).unwrap();
    // A journal shorter than its header.
    std::fs::write(&j, &good[..20]).unwrap();
    assert!(matches!(
        Ingest::open(dir.path(), root, 2, IngestOptions::default()),
        Err(StoreError::Corrupted { .. })
    ));
    // A frame claiming a huge length, followed by more bytes: damage, not a tear.
    let mut bytes = good[..53].to_vec();
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&good[57..]);
    std::fs::write(&j, &bytes).unwrap();
    assert!(matches!(
        Ingest::open(dir.path(), root, 2, IngestOptions::default()),
        Err(StoreError::Corrupted { .. })
    ));
    std::fs::write(&j, &good).unwrap();
    assert_eq!(Ingest::open(dir.path(), root, 2, IngestOptions::default()).unwrap().resumed(), 2);
}

/// A disk that holds `room` more bytes: a write past it writes what fits and fails with
/// `StorageFull`, as a full file system does. Raising `room` is freeing space.
#[derive(Clone)]
pub struct SmallDisk {
    pub files: MemBackend,
    pub room: Arc<std::sync::atomic::AtomicU64>,
}

impl SmallDisk {
    pub fn new(room: u64) -> Self {
        SmallDisk { files: MemBackend::new(), room: Arc::new(room.into()) }
    }
}

struct SmallFile(Box<dyn bavl_store::WriteFile>, Arc<std::sync::atomic::AtomicU64>);

impl std::io::Write for SmallFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering::SeqCst;
        let room = self.1.load(SeqCst);
        if room < buf.len() as u64 {
            self.1.store(0, SeqCst);
            self.0.write_all(&buf[..room as usize])?;
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        self.1.fetch_sub(buf.len() as u64, SeqCst);
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl bavl_store::WriteFile for SmallFile {
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.sync()
    }
}

impl Backend for SmallDisk {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.files.list()
    }
    fn open_read(&self, name: &str) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        self.files.open_read(name)
    }
    fn file_len(&self, name: &str) -> std::io::Result<u64> {
        self.files.file_len(name)
    }
    fn create(&self, name: &str) -> std::io::Result<Box<dyn bavl_store::WriteFile>> {
        Ok(Box::new(SmallFile(self.files.create(name)?, self.room.clone())))
    }
    fn open_append(&self, name: &str, len: u64) -> std::io::Result<Box<dyn bavl_store::WriteFile>> {
        Ok(Box::new(SmallFile(self.files.open_append(name, len)?, self.room.clone())))
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.files.rename(from, to)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.files.remove(name)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.files.sync_dir()
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.files.read_at(name, offset, buf)
    }
    fn describe(&self) -> String {
        "a small disk".into()
    }
}

#[test]
fn a_full_disk_is_an_error_and_the_ingest_resumes_once_there_is_room() {
    let mut t = tree(2000, 16, 300);
    let (root, chunks) = chunks(&mut t, 13);
    let opts = IngestOptions { flush_bytes: 64 << 10, ..IngestOptions::default() };
    // Room for about half the bodies (600 KB of about 1.2 MB).
    let disk = SmallDisk::new(600 << 10);
    let b: Arc<dyn Backend> = Arc::new(disk.clone());
    let mut ing = Ingest::open_backend(b.clone(), root, 6, opts.clone()).unwrap();
    let err =
        chunks.iter().find_map(|c| ing.add_verified(c.clone()).err()).expect("the disk fills up");
    match &err {
        StoreError::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{err}")
        }
        e => panic!("{e}"),
    }
    // The writer is done for: every later call fails, nothing more is written.
    assert!(matches!(ing.add_verified(chunks[0].clone()), Err(StoreError::Poisoned(_))));
    assert!(matches!(ing.flush(), Err(StoreError::Poisoned(_))));
    drop(ing);
    assert!(matches!(
        Store::open_backend(b.clone(), paged()).err(),
        Some(StoreError::UnfinishedIngest(_))
    ));
    // Space is freed; the ingest resumes with what it flushed and finishes.
    disk.room.store(u64::MAX / 2, std::sync::atomic::Ordering::SeqCst);
    let mut ing = Ingest::open_backend(b.clone(), root, 6, opts).unwrap();
    assert!(ing.resumed() > 0 && ing.resumed() < chunks.len() as u64, "{}", ing.resumed());
    for c in &chunks {
        ing.add_verified(c.clone()).unwrap();
    }
    ing.finish().unwrap();
    check_store(Store::open_backend(b, paged()).unwrap(), &mut t, 6);
}

/// The `acked` of a power-loss image taken after `finish` returned.
const FINISHED: u64 = u64::MAX;

/// Power loss at every moment of an ingest (the crash images of `power.rs`: synced names
/// and bytes; names as they are; half of each unsynced tail): every image is either no
/// store yet, an unfinished ingest that every open refuses and that resumes holding at
/// least every chunk flushed before the image, or (once `finish` returned, always) the
/// finished store with its root.
#[test]
fn every_power_loss_image_of_an_ingest_resumes_or_opens_at_the_root() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut t = tree(1500, 8, 60);
    let (root, chunks) = chunks(&mut t, 14);
    let opts = IngestOptions { flush_bytes: 4 << 10, ..IngestOptions::default() };
    let disk = crate::power::PowerLoss::default();
    let b: Arc<dyn Backend> = Arc::new(disk.clone());
    let mut ing = Ingest::open_backend(b, root, 8, opts.clone()).unwrap();
    for (n, c) in chunks.iter().enumerate() {
        ing.add_verified(c.clone()).unwrap();
        if n % 10 == 9 {
            ing.flush().unwrap();
            disk.acked.store(n as u64 + 1, SeqCst);
        }
    }
    ing.finish().unwrap();
    disk.acked.store(FINISHED, SeqCst);
    let mut d = disk.disk.lock().unwrap();
    d.snapshot(FINISHED);
    let images = std::mem::take(&mut d.images);
    drop(d);
    assert!(images.len() > 100, "only {} images", images.len());
    let (mut unfinished, mut finished) = (0, 0);
    for (i, (image, acked)) in images.iter().enumerate() {
        let mem = MemBackend::new();
        for (name, bytes) in image {
            mem.put(name, bytes.clone());
        }
        let b: Arc<dyn Backend> = Arc::new(mem.clone());
        let names: Vec<&String> = image.keys().collect();
        if image.contains_key(JOURNAL_FILE) {
            assert_ne!(*acked, FINISHED, "image {i}: {names:?}");
            assert!(matches!(
                Store::open_backend(b.clone(), paged()).err(),
                Some(StoreError::UnfinishedIngest(_))
            ));
            let mut ing = Ingest::open_backend(b.clone(), root, 8, opts.clone())
                .unwrap_or_else(|e| panic!("image {i} (acknowledged {acked}): {e}"));
            assert!(ing.resumed() >= *acked, "image {i}: {} < {acked}", ing.resumed());
            for c in &chunks {
                ing.add_verified(c.clone()).unwrap();
            }
            ing.finish().unwrap();
            unfinished += 1;
        } else if image.contains_key("HEAD") {
            finished += 1;
        } else {
            // Before the journal was in place: nothing but its temporary.
            assert_eq!(*acked, 0, "image {i}: {names:?}");
            assert!(image.keys().all(|n| n.ends_with(".tmp")), "image {i}: {names:?}");
            continue;
        }
        let store = Store::open_backend(b, paged())
            .unwrap_or_else(|e| panic!("image {i} (acknowledged {acked}): {e}"));
        assert_eq!((store.version(), store.root()), (8, root), "image {i}");
    }
    assert!(unfinished > 100 && finished > 0, "{unfinished} unfinished, {finished} finished");
}
