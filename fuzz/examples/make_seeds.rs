//! Writes valid seed inputs for every fuzz target into `<dir>/<target>/` (default dir:
//! `corpus`): exported chunks, proofs of every kind, restore sequences and operation
//! sequences, in the layouts `src/lib.rs` documents. Random bytes rarely get past a
//! proof's header; mutations of valid encodings reach every decoder rule.
//!
//! `cargo run --release --example make_seeds -- corpus` (from `fuzz/`).

use std::ops::Bound;
use std::path::{Path, PathBuf};

use bavl_core::Sha256;
use bavl_fuzz::*;

type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

struct Out {
    dir: PathBuf,
    n: usize,
    /// Checks a seed before it is written (that the layouts and fixtures agree).
    check: fn(&[u8]),
}

impl Out {
    fn new(root: &Path, target: &str, check: fn(&[u8])) -> Self {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        Out { dir, n: 0, check }
    }
    fn put(&mut self, bytes: &[u8]) {
        (self.check)(bytes);
        std::fs::write(self.dir.join(format!("seed-{:04}", self.n)), bytes).expect("write seed");
        self.n += 1;
    }
}

/// A chunk seed verifies exactly when it names the fixture and index it was exported from.
fn check_chunk_seed(seed: &[u8]) {
    let (sel, index, bytes) = decode_chunk_input(seed).expect("non-empty");
    let f = fixture(sel);
    let exported = f.chunks.get(index as usize).is_some_and(|c| c == bytes);
    let ok = bavl_core::verify_chunk::<Sha256>(&f.root, index, bytes).is_ok();
    assert_eq!(ok, exported, "chunk seed of fixture {} index {index}", f.name);
}

/// Every proof seed verifies.
fn check_proof_seed(seed: &[u8]) {
    let p = decode_proof_input(seed).expect("non-empty");
    let f = fixture(p.fixture);
    let ok = match p.mode {
        MEMBERSHIP => bavl_core::verify_membership::<Sha256>(&f.root, p.a, p.b, p.proof).is_ok(),
        ABSENCE => bavl_core::verify_absence::<Sha256>(&f.root, p.a, p.proof).is_ok(),
        _ => bavl_core::verify_range::<Sha256>(
            &f.root,
            bound(p.lo_kind, p.a),
            bound(p.hi_kind, p.b),
            p.proof,
        )
        .is_ok(),
    };
    assert!(ok, "proof seed (mode {}) of fixture {} does not verify", p.mode, f.name);
}

/// A message seed decodes; a records seed is a whole valid log (opening it cuts nothing).
fn check_cluster_seed(seed: &[u8]) {
    use bavl_cluster::{codec, log_store, msg::Reply, tcp::Request};
    use bavl_fuzz::cluster::*;
    match seed[0] {
        REQUEST => assert!(codec::decode::<Request>(&seed[1..]).is_ok(), "request seed"),
        REPLY => assert!(codec::decode::<Reply>(&seed[1..]).is_ok(), "reply seed"),
        LOG_RECORDS => {
            let file = log_file_of_records(&seed[1..]);
            let dir = std::env::temp_dir().join(format!("bavl-seed-check-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let path = dir.join("raft.log");
            std::fs::write(&path, &file).expect("write");
            log_store::LogStore::open(&path, log_store::Durability::NoSync).expect("opens");
            assert_eq!(std::fs::read(&path).expect("read"), file, "a records seed was cut");
            std::fs::remove_dir_all(&dir).ok();
        }
        _ => {}
    }
}

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let fx = fixtures();

    // store_files: the fixture store's newest log segment and checkpoint, whole and cut.
    let mut out = Out::new(&root, "store_files", |_| {});
    let sf = bavl_fuzz::store_fixture();
    for (sel, prefix) in bavl_fuzz::STORE_TARGETS.iter().enumerate() {
        let (_, bytes) =
            sf.files.iter().filter(|(n, _)| n.starts_with(prefix)).max().expect("file");
        for cut in [bytes.len(), bytes.len() - 1, bytes.len() / 2, 30] {
            let mut input = vec![sel as u8];
            input.extend_from_slice(&bytes[..cut.min(bytes.len())]);
            out.put(&input);
        }
    }

    // cluster_wire: requests and replies of each family, log files whole and cut.
    let mut out = Out::new(&root, "cluster_wire", check_cluster_seed);
    for seed in bavl_fuzz::cluster::seeds() {
        out.put(&seed);
    }
    let n_cluster = out.n;

    // verify_chunk: every chunk of every fixture at its index, some at a wrong index or
    // under another fixture's root.
    let mut out = Out::new(&root, "verify_chunk", check_chunk_seed);
    for (f, fixture) in fx.iter().enumerate() {
        for (i, c) in fixture.chunks.iter().enumerate().take(63) {
            out.put(&encode_chunk_input(f as u8, i as u64, c));
            if i % 4 == 0 {
                out.put(&encode_chunk_input(f as u8, i as u64 + 1, c));
                out.put(&encode_chunk_input((f as u8 + 1) % 4, i as u64, c));
            }
        }
    }
    let n_chunk = out.n;

    // verify_proofs: membership, absence and range proofs on every fixture.
    let mut out = Out::new(&root, "verify_proofs", check_proof_seed);
    let u = Bound::Unbounded;
    for (f, fixture) in fx.iter().enumerate() {
        let f = f as u8;
        let snap = &fixture.snap;
        let e = &fixture.entries;
        for (j, (k, v)) in e.iter().enumerate() {
            if j % 5 == 0 || j + 1 == e.len() {
                let p = snap.prove_membership(k).expect("present");
                out.put(&encode_proof_input(f, MEMBERSHIP, u, u, k, v, &p));
            }
        }
        let mut absent: Vec<Vec<u8>> = vec![b"a".to_vec(), b"zzz".to_vec(), b"key".to_vec()];
        absent.extend((0..12).map(|i| main_key(8 * i + 1)));
        for k in absent.iter().filter(|k| fixture.index_of(k).is_none()) {
            let p = snap.prove_absence(k).expect("absent");
            out.put(&encode_proof_input(f, ABSENCE, u, u, k, &[], &p));
        }
        let keys: Vec<&[u8]> = e.iter().map(|(k, _)| k.as_slice()).collect();
        let pick =
            |j: usize| keys.get(j.min(keys.len().saturating_sub(1))).copied().unwrap_or(b"key");
        let ranges: Vec<Bounds> = vec![
            (u, u),
            (Bound::Included(pick(3)), Bound::Excluded(pick(9))),
            (Bound::Excluded(pick(0)), Bound::Included(pick(1))),
            (Bound::Included(b"key0011"), Bound::Included(b"key0031")),
            (Bound::Excluded(b"key0011"), u),
            (u, Bound::Excluded(b"key0003")),
            (Bound::Included(pick(7)), Bound::Included(pick(7))),
            (Bound::Included(b"zz"), u),
            (u, Bound::Excluded(b"a")),
            (Bound::Included(b"key0040"), Bound::Excluded(b"key0040")),
        ];
        for (lo, hi) in ranges {
            if let Ok(p) = snap.prove_range(lo, hi) {
                out.put(&encode_proof_input(f, RANGE, lo, hi, &[], &[], &p));
            }
        }
    }
    let n_proofs = out.n;

    // restore: all chunks in order, reversed, with a duplicate, with one missing, with a
    // foreign chunk.
    let mut out = Out::new(&root, "restore", |_| {});
    for (f, fixture) in fx.iter().enumerate() {
        let f = f as u8;
        let all: Vec<(u64, &[u8])> =
            fixture.chunks.iter().enumerate().map(|(i, c)| (i as u64, c.as_slice())).collect();
        let seed = encode_restore_input(f, &all);
        let (_, records) = decode_restore_input(&seed).expect("non-empty");
        let mut r = bavl_core::Restore::<Sha256>::new(fixture.root);
        for (i, bytes) in records {
            r.add_chunk(i, bytes).expect("seed chunk is accepted");
        }
        let mut t = r.finish(4).expect("complete seed restores");
        assert_eq!(t.root_hash(), fixture.root);
        out.put(&seed);
        let mut rev = all.clone();
        rev.reverse();
        out.put(&encode_restore_input(f, &rev));
        if let Some(&first) = all.first() {
            let mut dup = all.clone();
            dup.insert(dup.len() / 2, first);
            out.put(&encode_restore_input(f, &dup));
            out.put(&encode_restore_input(f, &all[1..]));
            let other = &fx[((f + 3) % 4) as usize];
            let mut foreign = all.clone();
            if let Some(c) = other.chunks.first() {
                foreign.insert(0, (0, c.as_slice()));
            }
            out.put(&encode_restore_input(f, &foreign));
        }
    }
    let n_restore = out.n;

    // roundtrip: operation sequences that build multi-level trees and shrink them again.
    let mut out = Out::new(&root, "roundtrip", |_| {});
    let seq = |cap: u8, ops: &[(u8, u8)]| {
        let mut v = vec![cap];
        for &(o, k) in ops {
            v.extend([o, k]);
        }
        v
    };
    let ascending: Vec<(u8, u8)> = (0..160u8).map(|k| (INSERT + k % 0x90, k)).collect();
    let mut grow_shrink = ascending.clone();
    grow_shrink.push((CHECK, 0));
    grow_shrink.extend((0..160u8).step_by(2).map(|k| (REMOVE, k)));
    grow_shrink.push((CHECK, 1));
    grow_shrink.extend((0..160u8).map(|k| (REMOVE, k)));
    for cap in 0..5u8 {
        out.put(&seq(cap, &ascending));
        out.put(&seq(cap, &grow_shrink));
    }
    let descending: Vec<(u8, u8)> = (0..=255u8).rev().map(|k| (INSERT + 0x0f, k)).collect();
    out.put(&seq(0, &descending));
    let mut rng = Rng(42);
    for cap in 0..5u8 {
        let ops: Vec<(u8, u8)> = (0..200)
            .map(|_| {
                let o = rng.below(256) as u8;
                let o = if o >= 0xf0 && rng.below(4) != 0 { o - 0x80 } else { o };
                (o, rng.below(256) as u8)
            })
            .collect();
        out.put(&seq(cap, &ops));
    }
    out.put(&seq(
        2,
        &[(INSERT, 0xff), (INSERT + 1, 0xfe), (INSERT + 2, 0xc0), (CHECK, 0), (REMOVE, 0xff)],
    ));
    out.put(&seq(1, &[(INSERT, 1), (CHECK, 0), (REMOVE, 1), (CHECK, 0)]));
    let n_roundtrip = out.n;

    // forge: honest requests (the target checks they verify) of every kind on every
    // fixture; the fuzzer perturbs runs, leaf kinds and expansions from there.
    let mut out = Out::new(&root, "forge", |_| {});
    for f in 0..4u8 {
        let n = fx[f as usize].entries.len().max(1);
        let some = [0, 1, n / 2, n - 1].map(|j| (j % 256) as u8);
        for j in some {
            out.put(&encode_forge_input(f, false, Forge::Membership { j, alter: 0 }, 0, 0, &[]));
            for variant in 0..4 {
                out.put(&encode_forge_input(f, false, Forge::Absence { j, variant }, 0, 0, &[]));
            }
        }
        for (a, b) in [(0, 3), (1, 1), (2, 7), (3, 0)] {
            let lo = (a % 3, some[a as usize], b % 4);
            let hi = (b % 3, some[(a as usize + 1) % 4], (a + b) % 4);
            out.put(&encode_forge_input(f, false, Forge::Range { lo, hi }, 0, 0, &[]));
        }
        for i in 0..=fx[f as usize].chunks.len().min(255) as u8 {
            out.put(&encode_forge_input(f, i % 2 == 1, Forge::Chunk { i }, 0, 0, &[]));
        }
    }
    let n_forge = out.n;

    // syncer: every fixture from 1-4 honest sources (no ops: the honest end alone), with
    // an early limit below every chunk, and random scripts of answers, lies, failures,
    // verifications and waits.
    let mut out = Out::new(&root, "syncer", |_| {});
    let mut rng = Rng(7);
    for f in 0..4u8 {
        for sources in 0..4u8 {
            out.put(&[f, sources, 255]);
            out.put(&[f, sources, 0]);
            let mut script = vec![f, sources, rng.below(256) as u8];
            script.extend((0..2 * (20 + rng.below(100))).map(|_| rng.below(256) as u8));
            out.put(&script);
        }
    }
    let n_syncer = out.n;

    println!(
        "seeds in {}: verify_chunk {n_chunk}, verify_proofs {n_proofs}, restore {n_restore}, roundtrip {n_roundtrip}, forge {n_forge}, syncer {n_syncer}, cluster_wire {n_cluster} \
         (fixtures: {})",
        root.display(),
        fx.iter().map(|f| format!("{} {} keys/{} chunks", f.name, f.entries.len(), f.chunks.len())).collect::<Vec<_>>().join(", ")
    );
}
