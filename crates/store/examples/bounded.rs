//! Bounded by default, measured outside CI: a paged store whose log holds one version far
//! larger than its cache is committed, then opened and read in fresh processes, each
//! reporting its memory (`docs/design.md` §8.5.1).
//!
//! `cargo run --release -p bavl-store --example bounded -- KEYS BIG CACHE_MB DIR`
//! (defaults 2000000 200000 64 /var/tmp/bavl-bounded). Builds a paged store of KEYS
//! Workload B keys (commits of 100k inserts, then a checkpoint), then commits one version
//! of BIG new keys and BIG/2 updates with no checkpoint after it: the version a reopen
//! replays. The writer, then a read-only open (as `bavl stats` does) and a writable open
//! each run in a process of their own and print one JSON object: the pager's counters
//! (`peak_resident_bytes`: the most the cache held when an eviction pass began;
//! `mid_evictions`: passes within the version), the skeleton's bytes, and the process's
//! peak resident memory (`VmHWM`) and anonymous memory at the end (`RssAnon`) from
//! `/proc/self/status`. Run it under a memory limit (`systemd-run --user --scope -p
//! MemoryMax=1G ...`) to see the process survive a state larger than that.
//!
//! Uses the system allocator.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::initial;

const SEED: u64 = 7;

fn opts(cache_mb: u64, read_only: bool) -> Options {
    Options { checkpoint: CheckpointPolicy::Manual, read_only, ..Options::paged(cache_mb << 20) }
}

/// A line of `/proc/self/status` in bytes (0 where there is none).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn report(phase: &str, store: &Store, seconds: f64) {
    let p = store.stats().expect("stats").paging.expect("paged");
    println!(
        "{{\"phase\":\"{phase}\",\"seconds\":{seconds:.2},\"keys\":{},\"peak_resident_bytes\":{},\
         \"resident_bytes\":{},\"mid_evictions\":{},\"loads\":{},\"skeleton_bytes\":{},\
         \"vm_hwm_bytes\":{},\"rss_anon_bytes\":{}}}",
        store.latest().len(),
        p.peak_resident_bytes,
        p.resident_bytes,
        p.mid_evictions,
        p.loads,
        p.skeleton_bytes,
        status_bytes("VmHWM:"),
        status_bytes("RssAnon:"),
    );
}

fn build(dir: &Path, keys: u64, big: u64, cache_mb: u64) {
    let _ = std::fs::remove_dir_all(dir);
    let mut s = Store::open(dir, opts(cache_mb, false)).expect("open");
    let mut gen = initial(SEED);
    for (i, (k, v)) in gen.by_ref().take(keys as usize).enumerate() {
        s.insert(&k, &v).expect("insert");
        if i % 100_000 == 99_999 {
            s.commit().expect("commit");
        }
    }
    s.commit().expect("commit");
    s.checkpoint().expect("checkpoint");
    s.wait_checkpoint().expect("wait").expect("checkpoint");
    let t = Instant::now();
    // The one large version: new keys, and updates of the first keys' values.
    for (k, v) in gen.by_ref().take(big as usize) {
        s.insert(&k, &v).expect("insert");
    }
    for (k, v) in initial(SEED).take((big / 2) as usize) {
        s.insert(&k, &v[..v.len() / 2]).expect("update");
    }
    s.commit().expect("commit");
    report("write", &s, t.elapsed().as_secs_f64());
    drop(s); // No checkpoint: the version stays in the log.
}

fn open(dir: &Path, cache_mb: u64, read_only: bool) {
    let t = Instant::now();
    let mut s = Store::open(dir, opts(cache_mb, read_only)).expect("open");
    let phase = if read_only { "open-read-only" } else { "open-writable" };
    report(phase, &s, t.elapsed().as_secs_f64());
    // A read of every thousandth key of the initial state, loading as it goes.
    for (k, _) in initial(SEED).step_by(1000).take(10_000) {
        s.get(&k).expect("get");
    }
    report(&format!("{phase}+reads"), &s, t.elapsed().as_secs_f64());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--phase") {
        let dir = Path::new(&args[3]);
        let cache_mb: u64 = args[4].parse().expect("CACHE_MB");
        match args[2].as_str() {
            "build" => build(dir, args[5].parse().unwrap(), args[6].parse().unwrap(), cache_mb),
            "read-only" => open(dir, cache_mb, true),
            _ => open(dir, cache_mb, false),
        }
        return;
    }
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let (keys, big, cache_mb) = (arg(1, "2000000"), arg(2, "200000"), arg(3, "64"));
    let dir = arg(4, "/var/tmp/bavl-bounded");
    let me = std::env::current_exe().expect("own path");
    for phase in ["build", "read-only", "writable"] {
        let mut cmd = Command::new(&me);
        cmd.args(["--phase", phase, &dir, &cache_mb]);
        if phase == "build" {
            cmd.args([&keys, &big]);
        }
        let status = cmd.status().expect("run a phase");
        assert!(status.success(), "phase {phase} failed");
    }
}
