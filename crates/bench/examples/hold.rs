//! Does holding an old version (as a running checkpoint does) slow the blocks down?
//!
//! `cargo run --release -p bavl-bench --example hold -- DIR MODE` applies 6 phases of 20
//! Workload B blocks to the store at DIR (a copy: it is changed); in the odd phases MODE
//! `hold` keeps a snapshot of the version the phase started at, `ckpt` runs the store's
//! (paced) background checkpoint, and `none` does nothing. It prints the mean apply and
//! commit time of each phase and the page faults per block. mimalloc runs with its own
//! defaults here (freed memory goes back to the OS after a second);
//! `MIMALLOC_PURGE_DELAY=-1` keeps it, as the `bavl` binaries do. Measured (docs/design.md §8.7): `hold` and `ckpt` slow
//! apply alike, by 12-20%; `none` does not.
use std::ops::Bound;
use std::time::Instant;

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::{Mix, Op};

#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

fn main() {
    let dir = std::env::args().nth(1).expect("dir");
    let mode = std::env::args().nth(2).unwrap_or_default();
    let opts = Options { checkpoint: CheckpointPolicy::Manual, ..Options::default() };
    let mut store = Store::open(&dir, opts).unwrap();
    let mut held = None;
    for phase in 0..6 {
        let (mut apply, mut commit) = (0.0, 0.0);
        let faults0 = minor_faults();
        if phase % 2 == 1 {
            if mode == "hold" {
                held = Some(store.latest());
            } else if mode == "ckpt" {
                store.checkpoint().unwrap();
            }
        } else {
            held = None;
            if mode == "ckpt" {
                store.wait_checkpoint().unwrap();
            }
        }
        for _ in 0..20 {
            let v = store.version() + 1;
            let ops = bavl_workload::block(1, v, Mix::workload_b(10_000), |p| {
                bavl_workload::next_key(|lo| store.working().range(lo, Bound::Unbounded), p)
            });
            let t = Instant::now();
            for op in &ops {
                match op {
                    Op::Put(k, val) => {
                        store.insert(k, val).unwrap();
                    }
                    Op::Delete(k) => {
                        store.remove(k).unwrap();
                    }
                }
            }
            let t1 = Instant::now();
            store.commit().unwrap();
            apply += (t1 - t).as_secs_f64() * 1e3 / 20.0;
            commit += t1.elapsed().as_secs_f64() * 1e3 / 20.0;
        }
        let state = if phase % 2 == 1 { "held" } else { "free" };
        let faults = (minor_faults() - faults0) / 20;
        println!("phase {phase} {state}: apply {apply:.1} ms, commit {commit:.1} ms, {faults} page faults per block");
    }
    drop(held);
}

/// Minor page faults of this process so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    after.split_whitespace().nth(7).and_then(|f| f.parse().ok()).unwrap_or(0)
}
