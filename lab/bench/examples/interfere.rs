//! What does each part of a background checkpoint cost the writer? A paired experiment.
//!
//! `cargo run --release -p bavl-bench --example interfere -- DIR [PATTERN...]` opens (or
//! first builds, 1M Workload B keys) the store at DIR and applies Workload B blocks, one
//! durable commit each. A background thread does one PATTERN at a time, the patterns
//! taking turns in groups of `INTERFERE_GROUP` blocks (default 4) for `INTERFERE_CYCLES`
//! cycles (default 12). Each pattern's cost is reported as its mean block parts (apply,
//! hash, persist) minus those of `none` in the same cycle (every other cycle runs the
//! patterns in reverse order), with the standard error over
//! the cycles: the machine's drift and the growing state cancel out, so differences of a
//! millisecond or two in a ~95 ms block can be seen on a noisy shared machine. The first
//! block of each group is left out (the switch).
//!
//! Patterns (after each commit the background thread does its share for the next block):
//! - `none`: nothing;
//! - `fsync:N`: writes N MiB to a new file, `fdatasync` after each MiB (the paced
//!   checkpoint's slices);
//! - `sfr:N`: the same with `sync_file_range` (write and wait, no journal commit, no
//!   device flush) instead of `fdatasync`;
//! - `fadv:N`: the same with `posix_fadvise(DONTNEED)`, which starts the slice's writeback
//!   and does not wait for it;
//! - `write:N`: writes N MiB, no sync (the page cache and the kernel's writeback);
//! - `copy:N`: copies N MiB in memory (the memory traffic of writing alone);
//! - `paced:N`: the checkpoint as the store writes it: the newest version encoded into
//!   1 MiB slices whenever none are left, then N of those slices written per block, each
//!   synced and freed (the encoding's cost is spread over the blocks it feeds);
//! - `encode` / `encode-idle`: at the start of each block, encodes the newest version as
//!   a checkpoint does (every chunk exported into 1 MiB slices, then freed), at nice 10 /
//!   under `SCHED_IDLE`; `poll`: wakes every 2 ms, as the pacer does.
//!
//! mimalloc keeps the memory it frees, as in the `bavl` binaries; `INTERFERE_NOTHP=1`
//! runs without transparent huge pages.
//!
//! Appending `@idle` to a pattern runs its thread under `SCHED_IDLE`, `@nice` (the
//! default) at nice 10.
#![allow(unsafe_code)]

use std::io::Write;
use std::ops::Bound;
use std::os::unix::io::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bavl_store::{CheckpointPolicy, Options, Store};
use bavl_workload::{Mix, Op};

#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

const MIB: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq)]
enum Work {
    None,
    Fsync(usize),
    Sfr(usize),
    Fadv(usize),
    Write(usize),
    Copy(usize),
    Encode,
    Poll,
    Paced(usize),
}

#[derive(Clone, Debug)]
struct Pattern {
    name: String,
    work: Work,
    idle: bool,
}

fn parse(p: &str) -> Pattern {
    let (body, prio) = p.split_once('@').unwrap_or((p, "nice"));
    let (kind, n) = body.split_once(':').unwrap_or((body, "4"));
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("{p}: the number after ':' is MiB per block; see --help");
        std::process::exit(2);
    };
    let (work, idle) = match kind {
        "none" => (Work::None, false),
        "fsync" => (Work::Fsync(n), false),
        "sfr" => (Work::Sfr(n), false),
        "fadv" => (Work::Fadv(n), false),
        "write" => (Work::Write(n), false),
        "copy" => (Work::Copy(n), false),
        "encode" => (Work::Encode, false),
        "encode-idle" => (Work::Encode, true),
        "poll" => (Work::Poll, false),
        "paced" => (Work::Paced(n), false),
        other => {
            eprintln!("unknown pattern {other}: see --help");
            std::process::exit(2);
        }
    };
    Pattern { name: p.to_string(), work, idle: idle || prio == "idle" }
}

fn set_priority(idle: bool) {
    unsafe {
        if idle {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        } else {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
        }
    }
}

/// What the background thread is told after each commit.
enum Msg {
    Block(Pattern, Option<bavl_core::Snapshot>),
    Quit,
}

/// Encodes every chunk of `snap` into slices of about a MiB, as a checkpoint does.
fn encode(snap: bavl_core::Snapshot) -> Vec<Vec<u8>> {
    let mut slices = Vec::new();
    let mut slice = Vec::with_capacity(MIB + (64 << 10));
    for i in 0..snap.chunk_count() {
        let c = snap.export_chunk(i).unwrap();
        slice.extend_from_slice(&(c.len() as u32).to_le_bytes());
        slice.extend_from_slice(&c);
        if slice.len() >= MIB {
            slices.push(std::mem::replace(&mut slice, Vec::with_capacity(MIB + (64 << 10))));
        }
    }
    slices.push(slice);
    slices
}

fn background(dir: std::path::PathBuf, rx: mpsc::Receiver<Msg>) {
    let src = vec![0x5au8; MIB];
    let mut dst = vec![0u8; MIB];
    let mut file: Option<std::fs::File> = None;
    let mut files = 0;
    let mut written = 0usize;
    let mut prio: Option<bool> = None;
    let mut queue = std::collections::VecDeque::<Vec<u8>>::new();
    let mut open = |written: &mut usize, file: &mut Option<std::fs::File>| {
        if file.is_none() || *written >= 256 * MIB {
            files += 1;
            *file = Some(std::fs::File::create(dir.join(format!("junk-{files}"))).unwrap());
            *written = 0;
        }
    };
    while let Ok(Msg::Block(p, snap)) = rx.recv() {
        if prio != Some(p.idle) {
            set_priority(p.idle);
            prio = Some(p.idle);
        }
        match p.work {
            Work::None => {}
            Work::Fsync(n) | Work::Sfr(n) | Work::Fadv(n) | Work::Write(n) => {
                for _ in 0..n {
                    open(&mut written, &mut file);
                    let f = file.as_mut().unwrap();
                    f.write_all(&src).unwrap();
                    written += MIB;
                    match p.work {
                        Work::Fsync(_) => f.sync_data().unwrap(),
                        Work::Fadv(_) => unsafe {
                            libc::posix_fadvise(
                                f.as_raw_fd(),
                                (written - MIB) as i64,
                                MIB as i64,
                                libc::POSIX_FADV_DONTNEED,
                            );
                        },
                        Work::Sfr(_) => unsafe {
                            libc::sync_file_range(
                                f.as_raw_fd(),
                                (written - MIB) as i64,
                                MIB as i64,
                                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                                    | libc::SYNC_FILE_RANGE_WRITE
                                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                            );
                        },
                        _ => {}
                    }
                }
            }
            Work::Copy(n) => {
                for _ in 0..n {
                    dst.copy_from_slice(&src);
                    std::hint::black_box(&dst);
                }
            }
            Work::Encode => {
                let Some(snap) = snap else { continue };
                std::hint::black_box(encode(snap));
            }
            Work::Paced(n) => {
                match snap {
                    Some(snap) if queue.is_empty() => queue = encode(snap).into(),
                    _ => {}
                }
                for _ in 0..n {
                    let Some(slice) = queue.pop_front() else { break };
                    open(&mut written, &mut file);
                    let f = file.as_mut().unwrap();
                    f.write_all(&slice).unwrap();
                    written += slice.len();
                    f.sync_data().unwrap();
                }
            }
            Work::Poll => {
                // Until the next message: wake every 2 ms.
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(60) {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
}

fn apply(store: &mut Store, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(k, v) => {
                store.insert(k, v).unwrap();
            }
            Op::Delete(k) => {
                store.remove(k).unwrap();
            }
        }
    }
}

fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, (var / n).sqrt())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        // The module documentation above is the help.
        let doc: String = include_str!("interfere.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start()))
            .collect();
        eprint!("{doc}");
        std::process::exit(if args.is_empty() { 2 } else { 0 });
    }
    let dir = std::path::PathBuf::from(&args[0]);
    let mut patterns: Vec<Pattern> = args[1..].iter().map(|p| parse(p)).collect();
    if !patterns.iter().any(|p| p.work == Work::None) {
        patterns.insert(0, parse("none"));
    }
    bavl_alloc::keep_freed_memory();
    if std::env::var_os("INTERFERE_NOTHP").is_some() {
        bavl_alloc::no_transparent_huge_pages();
    }
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let group = env("INTERFERE_GROUP", 4).max(2);
    let cycles = env("INTERFERE_CYCLES", 12);
    let opts = Options { checkpoint: CheckpointPolicy::Manual, ..Options::in_memory() };
    let mut store = Store::open(dir.join("store"), opts).unwrap();
    if store.version() == 0 {
        eprintln!("building 1M keys");
        let mut n = 0;
        for (k, v) in bavl_workload::initial(1).take(1_000_000) {
            store.insert(&k, &v).unwrap();
            n += 1;
            if n % 100_000 == 0 {
                store.commit().unwrap();
            }
        }
        store.checkpoint().unwrap();
        store.wait_checkpoint().unwrap();
    }
    if std::env::var_os("INTERFERE_TIME_ENCODE").is_some() {
        for _ in 0..5 {
            let t = Instant::now();
            let slices = encode(store.latest());
            let bytes: usize = slices.iter().map(Vec::len).sum();
            println!("encode: {:.0} ms, {} MB", t.elapsed().as_secs_f64() * 1e3, bytes / MIB);
        }
        return;
    }
    if std::env::var_os("INTERFERE_TIME_CKPT").is_some() {
        for _ in 0..4 {
            store.checkpoint().unwrap();
            let r = store.wait_checkpoint().unwrap().unwrap();
            println!(
                "checkpoint: encoding {:.0} ms, all {:.0} ms, {} MB",
                r.encoding.as_secs_f64() * 1e3,
                r.elapsed.as_secs_f64() * 1e3,
                r.bytes as usize / MIB
            );
            for _ in 0..3 {
                let v = store.version() + 1;
                let ops = bavl_workload::block(1, v, Mix::workload_b(10_000), |q| {
                    bavl_workload::next_key(|lo| store.working().range(lo, Bound::Unbounded), q)
                        .expect("resident")
                });
                apply(&mut store, &ops);
                store.commit().unwrap();
            }
        }
        return;
    }
    let junk = dir.join("junk");
    let _ = std::fs::remove_dir_all(&junk);
    std::fs::create_dir_all(&junk).unwrap();
    let (tx, rx) = mpsc::channel();
    let bg = {
        let junk = junk.clone();
        std::thread::spawn(move || background(junk, rx))
    };
    // results[pattern][cycle] = (apply, hash, persist) means over the group's blocks.
    let mut results = vec![vec![[0.0f64; 4]; cycles]; patterns.len()];
    let warm = 3;
    for c in 0..cycles + 1 {
        // Every other cycle in reverse order, so that the state's growth within a cycle
        // favours no pattern.
        let order: Vec<usize> = if c % 2 == 0 {
            (0..patterns.len()).collect()
        } else {
            (0..patterns.len()).rev().collect()
        };
        for pi in order {
            let p = &patterns[pi];
            let mut sums = [0.0; 4];
            for b in 0..group {
                if c == 0 && b >= warm.min(group) {
                    break; // a short warm-up cycle
                }
                let snap = match p.work {
                    Work::Encode => (b == 1).then(|| store.latest()),
                    Work::Paced(_) => Some(store.latest()),
                    _ => None,
                };
                tx.send(Msg::Block(p.clone(), snap)).unwrap();
                let v = store.version() + 1;
                let ops = bavl_workload::block(1, v, Mix::workload_b(10_000), |q| {
                    bavl_workload::next_key(|lo| store.working().range(lo, Bound::Unbounded), q)
                        .expect("resident")
                });
                let t = Instant::now();
                apply(&mut store, &ops);
                let applied = t.elapsed().as_secs_f64() * 1e3;
                store.commit().unwrap();
                let tm = store.last_commit_timing();
                let (h, pe) = (tm.hash.as_secs_f64() * 1e3, tm.persist.as_secs_f64() * 1e3);
                if b > 0 {
                    for (s, x) in sums.iter_mut().zip([applied, h, pe, applied + h + pe]) {
                        *s += x / (group - 1) as f64;
                    }
                }
            }
            if c > 0 {
                results[pi][c - 1] = sums;
            }
        }
        if c > 0 {
            eprint!("\rcycle {c}/{cycles}");
        }
    }
    eprintln!();
    tx.send(Msg::Quit).unwrap();
    bg.join().unwrap();
    let _ = std::fs::remove_dir_all(&junk);
    let none = patterns.iter().position(|p| p.work == Work::None).unwrap();
    println!(
        "{} keys, {cycles} cycles of {group}-block groups; ms per block (pattern - none, ± s.e.)",
        store.working().len()
    );
    println!("{:<16} {:>16} {:>16} {:>16} {:>16}", "pattern", "apply", "hash", "persist", "total");
    for (pi, p) in patterns.iter().enumerate() {
        let mut line = format!("{:<16}", p.name);
        for part in 0..4 {
            if pi == none {
                let (m, se) = mean_se(&results[pi].iter().map(|r| r[part]).collect::<Vec<_>>());
                line += &format!(" {:>9.2} ±{:>4.2}", m, se);
            } else {
                let d: Vec<f64> = results[pi]
                    .iter()
                    .zip(&results[none])
                    .map(|(a, b)| a[part] - b[part])
                    .collect();
                let (m, se) = mean_se(&d);
                line += &format!(" {:>+9.2} ±{:>4.2}", m, se);
            }
        }
        println!("{line}");
    }
}
