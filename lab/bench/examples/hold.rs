//! Does holding an old version (as a running checkpoint does) slow the blocks down?
//!
//! `cargo run --release -p bavl-bench --example hold -- DIR MODE` applies 6 phases of 20
//! Workload B blocks to the store at DIR (a copy: it is changed). In the odd phases MODE
//! `hold` keeps a snapshot of the version the phase started at for the whole phase,
//! `brief` for its first block only, `ckpt` runs the store's (paced) background
//! checkpoint, and `none` does nothing. It prints the mean apply and commit time of each
//! phase and the page faults per block (and, for `ckpt`, the checkpoint's time and how
//! long it held its snapshot to encode it). `HOLD_VERBOSE=1` prints the first blocks of
//! each odd phase with the writer thread's user and system time and faults;
//! `HOLD_NOTHP=1` runs without transparent huge pages; `HOLD_PERSIST=1` prints every
//! block whose log append and sync took over 10 ms. mimalloc runs with its own
//! defaults here (freed memory goes back to the OS after a second);
//! `MIMALLOC_PURGE_DELAY=-1` keeps it, as the `bavl` binaries do. Measured
//! (docs/design.md §8.7): `hold` slows apply by 10-33%, `brief` and `none` do not; `ckpt`
//! (a checkpoint of the newest version, held only while it encodes) no longer slows the
//! first block after it starts (it did, 250 ms against 75, when it was of the oldest).
use std::ops::Bound;
use std::time::Instant;

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::{Mix, Op};

#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

fn main() {
    let dir = std::env::args().nth(1).expect("dir");
    let mode = std::env::args().nth(2).unwrap_or_default();
    if std::env::var_os("HOLD_NOTHP").is_some() {
        bavl_alloc::no_transparent_huge_pages();
    }
    let opts = Options { checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let mut store = Store::open(&dir, opts).unwrap();
    let mut held = None;
    for phase in 0..6 {
        let (mut apply, mut commit) = (0.0, 0.0);
        let faults0 = minor_faults();
        if phase % 2 == 1 {
            if mode == "hold" || mode == "brief" {
                held = Some(store.latest());
            } else if mode == "ckpt" {
                store.checkpoint().unwrap();
            }
        } else {
            held = None;
            if mode == "ckpt" {
                if let Some(r) =
                    store.wait_checkpoint().unwrap().or(store.last_checkpoint_report().cloned())
                {
                    println!(
                        "  checkpoint: {:.0} ms, encoding {:.0} ms",
                        r.elapsed.as_secs_f64() * 1e3,
                        r.encoding.as_secs_f64() * 1e3
                    );
                }
            }
        }
        for b in 0..20 {
            if mode == "brief" && b == 1 {
                held = None;
            }
            let v = store.version() + 1;
            let ops = bavl_workload::block(1, v, Mix::workload_b(10_000), |p| {
                bavl_workload::next_key(|lo| store.working().range(lo, Bound::Unbounded), p)
                    .expect("resident")
            });
            let (t, c0) = (Instant::now(), thread_cpu());
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
            let (t1, c1) = (Instant::now(), thread_cpu());
            store.commit().unwrap();
            let persist = store.last_commit_timing().persist.as_secs_f64() * 1e3;
            if std::env::var_os("HOLD_PERSIST").is_some() && persist > 10.0 {
                println!("  phase {phase} block {b}: persist {persist:.1} ms");
            }
            if std::env::var_os("HOLD_VERBOSE").is_some() && phase % 2 == 1 && b < 6 {
                let f = minor_faults();
                println!(
                    "  block {b}: apply {:.1} ms ({:.1} ms on CPU), commit {:.1} ms, faults so far {}",
                    (t1 - t).as_secs_f64() * 1e3,
                    (c1 - c0) * 1e3,
                    t1.elapsed().as_secs_f64() * 1e3,
                    f - faults0
                );
            }
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

/// CPU time of the calling thread, seconds.
#[allow(unsafe_code)]
fn thread_cpu() -> f64 {
    // SAFETY: getrusage fills a plain struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    if std::env::var_os("HOLD_VERBOSE").is_some() {
        println!(
            "    (thread: user {:.3} s, system {:.3} s, {} minor faults)",
            t(ru.ru_utime),
            t(ru.ru_stime),
            ru.ru_minflt
        );
    }
    t(ru.ru_utime) + t(ru.ru_stime)
}
