//! Paging at a glance: the same Workload B blocks (10k operations, one durable commit
//! each) on the same initial state, unpaged, paged with everything cached, and paged
//! with a small budget; and what the skeleton costs per key.
//!
//! `cargo run --release -p bavl-store --example paged -- KEYS BLOCKS ROUNDS BUDGET_MB DIR`
//! (defaults 1000000 20 2 64 /var/tmp/bavl-paged). The modes alternate round by round so
//! that a machine busy with other work disturbs them alike. Reports ops/s per mode and
//! round, the median, the paged-cached over unpaged ratio, and the skeleton's bytes per
//! key with every chunk evicted. Uses the system allocator (absolute figures are lower
//! than the mimalloc binaries'; the ratios are what this is for).

use std::ops::Bound;
use std::path::Path;
use std::time::Instant;

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::{block, initial, Mix, Op};

const SEED: u64 = 42;

fn build(dir: &Path, keys: u64) {
    let _ = std::fs::remove_dir_all(dir);
    // Built in memory (faster; it must fit), then checkpointed whole.
    let opts = Options { checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let mut s = Store::open(dir, opts).expect("open");
    for (i, (k, v)) in initial(SEED).take(keys as usize).enumerate() {
        s.insert(&k, &v).expect("insert");
        if i % 100_000 == 99_999 {
            s.commit().expect("commit");
        }
    }
    s.commit().expect("commit");
    s.checkpoint().expect("checkpoint");
    s.close().expect("close");
}

fn copy(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

/// Runs `blocks` blocks; returns durable ops/s.
fn run(dir: &Path, cache: Option<u64>, blocks: u64) -> f64 {
    let opts =
        Options { checkpoint: CheckpointPolicy::Manual, cache_bytes: cache, ..Options::default() };
    let mut s = Store::open(dir, opts).expect("open");
    let mut ops = 0;
    let t = Instant::now();
    for b in 1..=blocks {
        let gen = block(SEED, 1000 + b, Mix::workload_b(10_000), |p| {
            // A seek that loads; an owned copy keeps the store free for the writes.
            let found = s.seek(Bound::Included(&p[..])).expect("seek");
            found.map(|(k, _)| {
                let mut key = [0u8; bavl_workload::KEY_LEN];
                let n = k.len().min(key.len());
                key[..n].copy_from_slice(&k[..n]);
                key
            })
        });
        for op in gen {
            match op {
                Op::Put(k, v) => drop(s.insert(&k, &v).expect("insert")),
                Op::Delete(k) => drop(s.remove(&k).expect("remove")),
            }
            ops += 1;
        }
        s.commit().expect("commit");
    }
    let rate = ops as f64 / t.elapsed().as_secs_f64();
    if let Some(p) = s.stats().expect("stats").paging {
        eprintln!("  paging: {p:?}");
    }
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (keys, blocks, rounds, budget_mb) = (arg(1, 1_000_000), arg(2, 20), arg(3, 2), arg(4, 64));
    let base = Path::new(a.get(5).map_or("/var/tmp/bavl-paged", String::as_str)).to_path_buf();
    let (seed_dir, work) = (base.join("seed"), base.join("work"));
    build(&seed_dir, keys);
    let modes = [
        ("unpaged", None),
        ("paged-cached", Some(u64::MAX)),
        ("paged-small", Some(budget_mb << 20)),
    ];
    let mut rates = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        for (m, (name, cache)) in modes.iter().enumerate() {
            copy(&seed_dir, &work);
            let r = run(&work, *cache, blocks);
            println!("round {round} {name:>13}: {r:>9.0} ops/s");
            rates[m].push(r);
        }
    }
    let med: Vec<f64> = rates.into_iter().map(median).collect();
    for ((name, _), m) in modes.iter().zip(&med) {
        println!("median {name:>13}: {m:>9.0} ops/s");
    }
    println!("cached_1m_ratio (paged-cached / unpaged): {:.3}", med[1] / med[0]);
    copy(&seed_dir, &work);
    let opts = Options {
        cache_bytes: Some(0),
        checkpoint: CheckpointPolicy::Manual,
        ..Options::default()
    };
    let s = Store::open(&work, opts).expect("open");
    let p = s.stats().expect("stats").paging.expect("paging on");
    println!(
        "skeleton: {} bytes, {:.2} bytes per key; resident bodies {} bytes",
        p.skeleton_bytes,
        p.skeleton_bytes as f64 / keys as f64,
        p.resident_bytes
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&base);
}
