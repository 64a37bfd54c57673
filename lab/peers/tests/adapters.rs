//! Every adapter this build has replays the same small stream and ends in the reference
//! state (same key count and digest over the sorted key/values).

use std::path::PathBuf;

use bavl_peers::adapters::{self, STORES};
use bavl_peers::child;
use bavl_peers::stream::{self, final_effect, Header, Reader};
use bavl_workload::Op;

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("peers-{name}-{}", std::process::id()));
    if d.exists() {
        std::fs::remove_dir_all(&d).unwrap();
    }
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn small_stream(dir: &std::path::Path) -> (PathBuf, stream::Expected) {
    let path = dir.join("stream.bin");
    // More than one load commit (100,000 keys each) is not needed to exercise the paths.
    let header = Header { initial_keys: 3_000, warmup_blocks: 1, blocks: 4, seed: 7 };
    let expected = stream::generate(&path, header, 1_000, |_| {}).unwrap();
    (path, expected)
}

#[test]
fn stream_round_trips_and_counts_ops() {
    let dir = scratch("stream");
    let (path, expected) = small_stream(&dir);
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(r.header, Header { initial_keys: 3_000, warmup_blocks: 1, blocks: 4, seed: 7 });
    let init = r.initial_batch(10_000).unwrap();
    assert_eq!(init.len(), 3_000);
    assert!(r.initial_batch(10).unwrap().is_empty());
    let mut blocks = Vec::new();
    while let Some(b) = r.next_block().unwrap() {
        blocks.push(b);
    }
    assert_eq!(blocks.len(), 5);
    assert_eq!(expected.measured_ops, blocks[1..].iter().map(|b| b.len() as u64).sum::<u64>());
    // Replaying in order gives the expected digest.
    let mut m = std::collections::BTreeMap::new();
    for op in init.iter().chain(blocks.iter().flatten()) {
        match op {
            Op::Put(k, v) => {
                m.insert(*k, *v);
            }
            Op::Delete(k) => {
                m.remove(k);
            }
        }
    }
    let mut d = stream::StateDigest::default();
    for (k, v) in &m {
        d.add(k, v);
    }
    assert_eq!(d.keys, expected.keys);
    assert_eq!(d.finish(), expected.digest);
    // The universe holds every key the state ends with.
    let u = stream::universe(&path).unwrap();
    assert!(m.keys().all(|k| u.binary_search(k).is_ok()));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn final_effect_keeps_the_last_operation_per_key() {
    let (a, b) = ([1u8; 20], [2u8; 20]);
    let ops = vec![
        Op::Put(a, [1; 100]),
        Op::Delete(a),
        Op::Delete(b),
        Op::Put(b, [3; 100]),
        Op::Delete(b),
        Op::Put(a, [4; 100]),
    ];
    let f = final_effect(&ops);
    assert_eq!(f.len(), 2);
    assert_eq!(f[&a], Some([4; 100]));
    assert_eq!(f[&b], None);
}

/// Runs every adapter compiled into this build (bavl and the floor always; jmt-redb,
/// jmt-mock with `--features jmt`; nomt with `--features nomt`).
#[test]
fn every_built_adapter_ends_in_the_reference_state() {
    let dir = scratch("adapters");
    let (path, expected) = small_stream(&dir);
    let mut ran = Vec::new();
    for s in STORES.iter().filter(|s| s.name != "iavl" && adapters::compiled(s.name)) {
        let store_dir = dir.join(s.name);
        let store = adapters::open(s.name, &store_dir, expected.keys).unwrap();
        let rep = child::run(s.name, store, &path).unwrap();
        assert_eq!(rep.keys, expected.keys, "{}: key count", s.name);
        assert_eq!(rep.digest, expected.digest, "{}: digest", s.name);
        assert_eq!(rep.block_ms.len(), 4);
        assert_eq!(rep.warmup_ms.len(), 1);
        assert_eq!(rep.ops_measured, expected.measured_ops);
        assert!(rep.hwm_bytes > 0);
        ran.push(s.name);
    }
    assert!(ran.contains(&"bavl") && ran.contains(&"btreemap-floor"));
    if cfg!(feature = "jmt") {
        assert!(ran.contains(&"jmt-redb") && ran.contains(&"jmt-mock"));
    }
    if cfg!(feature = "nomt") {
        assert!(ran.contains(&"nomt"));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_and_unbuilt_stores_are_errors() {
    let dir = scratch("unknown");
    assert!(adapters::open("nope", &dir, 10).is_err());
    if !cfg!(feature = "nomt") {
        let e = adapters::open("nomt", &dir, 10).err().unwrap().to_string();
        assert!(e.contains("not built"), "{e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
