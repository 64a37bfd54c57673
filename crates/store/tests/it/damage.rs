//! Damage that spares the newest version, and damage reported against the file that
//! holds it (the store's hardening against damaged files): every case is found by `check`
//! (a problem or, where a crash could have left it, a note) and opening names the damaged
//! file.

use std::sync::Arc;
use std::time::Duration;

use bavl_core::Digest;
use bavl_store::check::{check, CheckReport};
use bavl_store::meta::{checkpoint_name, wal_name};
use bavl_store::wal::RecordBuf;
use bavl_store::{Backend, CheckpointPolicy, MemBackend, Options, Store, StoreError};

/// The in-memory store, explicitly: the fixtures are full checkpoints (`ckpt-*`), and an
/// unpaged open rebuilds the versions before the newest checkpoint from the older one.
fn opts(keep: u64) -> Options {
    Options {
        capacity: Some(8),
        keep_recent: keep,
        checkpoint: CheckpointPolicy::Manual,
        head_interval: Some(Duration::ZERO),
        ..Options::in_memory()
    }
}

fn read_only() -> Options {
    Options { read_only: true, ..opts(3) }
}

/// Version `v`'s operations for store number `seed`: a few inserts and a delete.
fn apply(store: &mut Store, seed: u8, v: u64) {
    for i in 0..12u64 {
        let key = format!("s{seed}-k{:04}", (v * 7 + i * 13) % 97);
        store.insert(key.as_bytes(), format!("{seed}/{v}/{i}").as_bytes()).unwrap();
    }
    let gone = format!("s{seed}-k{:04}", (v * 5) % 97);
    store.remove(gone.as_bytes()).unwrap();
}

fn commit_to(store: &mut Store, seed: u8, last: u64) -> Vec<Digest> {
    let mut roots = Vec::new();
    while store.version() < last {
        let v = store.version() + 1;
        apply(store, seed, v);
        roots.push(store.commit().unwrap().1);
    }
    roots
}

/// A store whose files are `ckpt-5`, `wal-6` (6..=9), `ckpt-9`, `wal-10` (10): the
/// newest checkpoint was installed while older versions were retained, so the older
/// checkpoint and its log still rebuild versions 7 and 8.
fn two_checkpoints(seed: u8) -> MemBackend {
    let mem = MemBackend::new();
    let mut s = Store::open_backend(Arc::new(mem.clone()), opts(3)).unwrap();
    commit_to(&mut s, seed, 5);
    s.checkpoint().unwrap();
    s.wait_checkpoint().unwrap();
    commit_to(&mut s, seed, 9);
    s.checkpoint().unwrap();
    s.wait_checkpoint().unwrap();
    commit_to(&mut s, seed, 10);
    drop(s);
    let mut names = mem.list().unwrap();
    names.sort();
    let want = [checkpoint_name(5), checkpoint_name(9), "HEAD".into(), "bavl.meta".into()];
    for w in want.iter().chain([&wal_name(6), &wal_name(10)]) {
        assert!(names.contains(w), "{w} missing from {names:?}");
    }
    mem
}

fn report(mem: &MemBackend) -> CheckReport {
    check(&(Arc::new(mem.clone()) as Arc<dyn Backend>)).unwrap()
}

fn assert_problem(mem: &MemBackend, file: &str, what: &str) {
    let r = report(mem);
    assert!(r.problems.iter().any(|p| p.file == file), "{what}: no problem named {file}: {r:?}");
}

fn open_error(mem: &MemBackend, o: Options) -> (String, String) {
    match Store::open_backend(Arc::new(mem.clone()), o) {
        Err(StoreError::Corrupted { file, what, .. }) => (file, what),
        Err(e) => panic!("expected Corrupted, got {e}"),
        Ok(s) => panic!("opened at {} despite the damage", s.version()),
    }
}

/// Record boundaries of a segment: the header, then each record's end.
fn record_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = vec![24];
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let body = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + body + 4;
        ends.push(at);
    }
    ends
}

#[test]
fn the_intact_fixture_checks_clean() {
    let r = report(&two_checkpoints(1));
    assert!(r.ok() && r.notes.is_empty(), "{r:?}");
}

#[test]
fn damage_to_the_older_checkpoint_is_reported() {
    // Truncated.
    let mem = two_checkpoints(1);
    let c5 = checkpoint_name(5);
    let bytes = mem.get(&c5).unwrap();
    mem.put(&c5, bytes[..bytes.len() / 2].to_vec());
    assert_problem(&mem, &c5, "truncated older checkpoint");
    // Deleted: the log after it is left without its start.
    let mem = two_checkpoints(1);
    mem.remove(&c5).unwrap();
    assert_problem(&mem, &c5, "deleted older checkpoint");
    // Replaced by another store's checkpoint of the same version.
    let mem = two_checkpoints(1);
    mem.put(&c5, two_checkpoints(2).get(&c5).unwrap());
    assert_problem(&mem, &c5, "another store's older checkpoint");
    // Opening still works, from the newest checkpoint, and says why.
    let s = Store::open_backend(Arc::new(mem.clone()), read_only()).unwrap();
    assert_eq!(s.version(), 10);
    assert!(s.recovery().older_checkpoint_skipped.is_some());
}

#[test]
fn damage_to_an_older_log_segment_is_reported() {
    let w6 = wal_name(6);
    // Cut at a record boundary (versions 8 and 9 gone).
    let mem = two_checkpoints(1);
    let bytes = mem.get(&w6).unwrap();
    let ends = record_ends(&bytes);
    mem.put(&w6, bytes[..ends[2]].to_vec());
    assert_problem(&mem, &w6, "older segment cut at a record boundary");
    // Deleted.
    let mem = two_checkpoints(1);
    mem.remove(&w6).unwrap();
    assert_problem(&mem, &w6, "deleted older segment");
    // Replaced by another store's segment of the same versions: the newer checkpoint
    // is the witness that the segment, not the checkpoint before it, is foreign.
    let mem = two_checkpoints(1);
    mem.put(&w6, two_checkpoints(2).get(&w6).unwrap());
    assert_problem(&mem, &w6, "another store's older segment");
}

#[test]
fn a_deleted_head_is_noted() {
    let mem = two_checkpoints(1);
    mem.remove("HEAD").unwrap();
    let r = report(&mem);
    assert!(r.notes.iter().any(|n| n.starts_with("HEAD")), "{r:?}");
}

#[test]
fn a_cut_log_is_named_and_never_called_uncommitted() {
    let mem = two_checkpoints(1);
    let w10 = wal_name(10);
    let bytes = mem.get(&w10).unwrap();
    // Cut in the middle of version 10's record: looks torn, but HEAD says 10 committed.
    mem.put(&w10, bytes[..bytes.len() - 7].to_vec());
    let (file, what) = open_error(&mem, read_only());
    assert_eq!(file, w10, "{what}");
    let r = report(&mem);
    assert!(r.problems.iter().any(|p| p.file == w10), "{r:?}");
    let text = format!("{r:?}");
    assert!(!text.contains("never committed"), "{text}");
    // The newest segment deleted: the same, against the log.
    let mem = two_checkpoints(1);
    mem.remove(&w10).unwrap();
    let (file, what) = open_error(&mem, read_only());
    assert_eq!(file, w10, "{what}");
}

/// `HEAD` moves with the commits (here at every one): a cut that removes only versions
/// after the last checkpoint is found. Without the updates it is not (the window the
/// interval bounds).
#[test]
fn head_updates_narrow_the_window_of_a_silent_cut() {
    for interval in [Some(Duration::ZERO), None] {
        let mem = MemBackend::new();
        let o = Options { head_interval: interval, ..opts(3) };
        let mut s = Store::open_backend(Arc::new(mem.clone()), o).unwrap();
        commit_to(&mut s, 1, 6);
        drop(s); // no close: HEAD is what the commits wrote
        let w1 = wal_name(1);
        let bytes = mem.get(&w1).unwrap();
        mem.put(&w1, bytes[..record_ends(&bytes)[4]].to_vec()); // versions 5, 6 cut
        let opened = Store::open_backend(Arc::new(mem.clone()), read_only());
        match interval {
            Some(_) => assert!(
                matches!(&opened, Err(StoreError::Corrupted { file, .. }) if *file == w1),
                "{:?}",
                opened.map(|s| s.version())
            ),
            None => assert_eq!(opened.unwrap().version(), 4, "the documented window"),
        }
    }
}

#[test]
fn a_missing_checkpoint_is_named() {
    let mem = two_checkpoints(1);
    for name in [checkpoint_name(5), wal_name(6), checkpoint_name(9)] {
        mem.remove(&name).unwrap();
    }
    let (file, what) = open_error(&mem, read_only());
    assert_eq!(file, checkpoint_name(9), "{what}");
}

#[test]
fn another_stores_newest_checkpoint_is_named() {
    let mem = two_checkpoints(1);
    let c9 = checkpoint_name(9);
    mem.put(&c9, two_checkpoints(2).get(&c9).unwrap());
    for name in [checkpoint_name(5), wal_name(6)] {
        mem.remove(&name).unwrap();
    }
    let (file, what) = open_error(&mem, read_only());
    assert_eq!(file, c9, "{what}");
}

#[test]
fn a_forged_capacity_is_blamed_on_the_metadata() {
    let mem = two_checkpoints(1);
    let mut meta = mem.get("bavl.meta").unwrap();
    meta[13..17].copy_from_slice(&16u32.to_le_bytes());
    let n = meta.len();
    let crc = crc32(&meta[..n - 4]);
    meta[n - 4..].copy_from_slice(&crc.to_le_bytes());
    mem.put("bavl.meta", meta);
    let (file, what) = open_error(&mem, read_only());
    assert_eq!(file, "bavl.meta", "{what}");
    assert_problem(&mem, "bavl.meta", "forged capacity");
}

/// IEEE CRC-32 (the store's checksums), bit by bit: enough for a 17-byte file.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A record deleting a key that is not there, with valid checksums and the unchanged
/// root: replay accepted it (the root check cannot see it); the format says deletes name
/// present keys.
#[test]
fn replay_refuses_a_delete_of_an_absent_key() {
    let mem = MemBackend::new();
    let mut s = Store::open_backend(Arc::new(mem.clone()), opts(3)).unwrap();
    let roots = commit_to(&mut s, 1, 3);
    drop(s);
    let mut rec = RecordBuf::default();
    rec.delete(b"no such key");
    let forged = rec.seal(4, &roots[2]).to_vec();
    let w1 = wal_name(1);
    let mut bytes = mem.get(&w1).unwrap();
    let at = bytes.len() as u64;
    bytes.extend_from_slice(&forged);
    mem.put(&w1, bytes);
    match Store::open_backend(Arc::new(mem.clone()), read_only()) {
        Err(StoreError::Corrupted { file, offset, what }) => {
            assert_eq!((file.as_str(), offset), (w1.as_str(), at), "{what}");
            assert!(what.contains("absent key"), "{what}");
        }
        other => panic!("a delete of an absent key was replayed: {:?}", other.map(|s| s.version())),
    }
}
