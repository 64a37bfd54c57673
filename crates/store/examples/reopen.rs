//! Reopening a paged store: how long `Store::open` takes with durable pages (the newest
//! skeleton read and checked against its root, then the log after it replayed), against
//! the key count.
//!
//! `cargo run --release -p bavl-store --example reopen -- KEYS BLOCKS CACHE_MB ROUNDS DIR`
//! (defaults 1000000 10 512 3 /var/tmp/bavl-reopen). Builds a paged store of KEYS
//! Workload B keys (commits of 100k inserts, then a checkpoint, waited for), commits
//! BLOCKS Workload B blocks of 10k operations after it (the log a reopen replays), closes
//! it, then opens it ROUNDS times with the same cache budget in three modes, printing one
//! JSON object per open (open seconds, of which the checkpoint and the replay, the
//! skeleton's heap bytes per key, the files' sizes):
//! - `skeleton+log`: the skeleton, then BLOCKS blocks replayed;
//! - `unpaged+log` (with `REOPEN_UNPAGED=1`): the same store opened unpaged, for the
//!   replay time of the same log with every body in memory (and every body read first);
//! - `skeleton`: after a checkpoint of the head (nothing to replay);
//! - `full-checkpoint`: the same state after an unpaged open rewrote it as a full
//!   checkpoint, which a paged open reads whole into a skeleton (the design before
//!   durable pages); skipped with `REOPEN_NO_FULL=1` (the unpaged open holds the state).
//!
//! `REOPEN_BUILD_UNPAGED=1` builds the state in memory first (faster; it must fit).
//!
//! Uses the system allocator.

use std::ops::Bound;
use std::path::Path;
use std::time::Instant;

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::{block, initial, Mix, Op};

const SEED: u64 = 42;

fn opts(cache_mb: u64) -> Options {
    Options {
        checkpoint: CheckpointPolicy::Manual,
        cache_bytes: Some(cache_mb << 20),
        ..Options::default()
    }
}

fn build(dir: &Path, keys: u64, blocks: u64, cache_mb: u64) {
    let _ = std::fs::remove_dir_all(dir);
    // With `REOPEN_BUILD_UNPAGED=1` the keys are inserted unpaged (in memory: fast, but
    // the state must fit) and written as a full checkpoint, which the paged open below
    // turns into chunk files and a skeleton.
    let unpaged = std::env::var_os("REOPEN_BUILD_UNPAGED").is_some();
    // Retaining one version, the checkpoint's install deletes the files before it: a
    // reopen then starts from it, not from an older checkpoint whose log reaches it.
    let paged = Options { keep_recent: 1, ..opts(cache_mb) };
    let o = if unpaged { Options { cache_bytes: None, ..paged.clone() } } else { paged.clone() };
    let mut s = Store::open(dir, o).expect("open");
    let t = Instant::now();
    for (i, (k, v)) in initial(SEED).take(keys as usize).enumerate() {
        s.insert(&k, &v).expect("insert");
        if i % 100_000 == 99_999 {
            s.commit().expect("commit");
        }
    }
    s.commit().expect("commit");
    eprintln!("built {keys} keys in {:.1} s", t.elapsed().as_secs_f64());
    if unpaged {
        s.checkpoint().expect("checkpoint");
        s.close().expect("close");
        let t = Instant::now();
        s = Store::open(dir, paged).expect("open");
        eprintln!("opened paged from the full checkpoint in {:.1} s", t.elapsed().as_secs_f64());
        s.commit().expect("commit");
    }
    s.checkpoint().expect("checkpoint");
    let r = s.wait_checkpoint().expect("checkpoint").expect("a checkpoint");
    eprintln!("checkpoint: {} bytes in {:.1} s", r.bytes, r.elapsed.as_secs_f64());
    for b in 1..=blocks {
        let ops = block(SEED, 1000 + b, Mix::workload_b(10_000), |p| {
            let found = s.seek(Bound::Included(&p[..])).expect("seek");
            found.map(|(k, _)| {
                let mut key = [0u8; bavl_workload::KEY_LEN];
                let n = k.len().min(key.len());
                key[..n].copy_from_slice(&k[..n]);
                key
            })
        });
        for op in ops {
            match op {
                Op::Put(k, v) => drop(s.insert(&k, &v).expect("insert")),
                Op::Delete(k) => drop(s.remove(&k).expect("remove")),
            }
        }
        s.commit().expect("commit");
    }
    s.close().expect("close");
}

fn measure(dir: &Path, cache_mb: u64, rounds: u64, mode: &str) {
    let paged = mode != "unpaged+log";
    for round in 0..rounds {
        let o = if paged { opts(cache_mb) } else { Options { cache_bytes: None, ..opts(0) } };
        let t = Instant::now();
        let s = Store::open(dir, o).expect("open");
        let open_s = t.elapsed().as_secs_f64();
        let r = s.recovery().clone();
        let st = s.stats().expect("stats");
        let p = st.paging.unwrap_or_default();
        let bytes = |prefix: &str| -> u64 {
            st.files.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, l)| l).sum()
        };
        println!(
            "{{\"mode\": \"{mode}\", \"keys\": {}, \"round\": {round}, \"open_s\": {open_s:.3}, \
             \"checkpoint_s\": {:.3}, \"replay_s\": {:.3}, \"replayed_versions\": {}, \
             \"skeleton_heap_bytes_per_key\": {:.2}, \"resident_bytes\": {}, \
             \"skel_file_bytes\": {}, \"chunk_file_bytes\": {}, \"ckpt_file_bytes\": {}, \
             \"log_bytes\": {}, \"cache_mb\": {cache_mb}}}",
            st.keys,
            r.load_checkpoint.as_secs_f64(),
            r.replay.as_secs_f64(),
            r.replayed,
            p.skeleton_bytes as f64 / st.keys as f64,
            p.resident_bytes,
            bytes("skel-"),
            bytes("chunks-"),
            bytes("ckpt-"),
            bytes("wal-"),
        );
        drop(s);
    }
}

/// Opens the store (paged or not), commits a version (so the checkpoint is of a new one)
/// and checkpoints it, retaining only it: the files before are deleted at once.
fn checkpoint(dir: &Path, cache: Option<u64>) {
    let o = Options {
        checkpoint: CheckpointPolicy::Manual,
        cache_bytes: cache,
        keep_recent: 1,
        ..Options::default()
    };
    let mut s = Store::open(dir, o).expect("open");
    s.commit().expect("commit");
    s.checkpoint().expect("checkpoint");
    s.close().expect("close");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (keys, blocks, cache_mb, rounds) = (arg(1, 1_000_000), arg(2, 10), arg(3, 512), arg(4, 3));
    let dir = Path::new(a.get(5).map_or("/var/tmp/bavl-reopen", String::as_str)).to_path_buf();
    build(&dir, keys, blocks, cache_mb);
    measure(&dir, cache_mb, rounds, "skeleton+log");
    if std::env::var_os("REOPEN_UNPAGED").is_some() {
        measure(&dir, cache_mb, rounds, "unpaged+log");
    }
    checkpoint(&dir, Some(cache_mb << 20));
    measure(&dir, cache_mb, rounds, "skeleton");
    if std::env::var_os("REOPEN_NO_FULL").is_none() {
        checkpoint(&dir, None);
        measure(&dir, cache_mb, rounds, "full-checkpoint");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
