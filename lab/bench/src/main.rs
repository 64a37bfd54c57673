//! `bavl-bench`: benchmarks for bavl.
//!
//! `bavl-bench core [--keys N] [--quick] [--out docs/results/core.json]` measures the core
//! tree side by side in one run — SHA-256 throughput, bulk load, update blocks, lookups
//! against `BTreeMap`, membership proof sizes, space efficiency, chunk export and verified
//! rebuild — at the default capacity, then sweeps the chunk capacity. It writes the JSON
//! report to `--out`, the sweep as `<stem>-capacity.csv` and `<stem>-capacity.png` beside
//! it, and prints a summary table. `--quick` is a smoke run for CI (well under a minute).
//!
//! `bavl-bench store [--quick] [--out docs/results/store.json]` measures the durable store
//! on Workload B ([`durable`]): throughput with a `fsync` per block, commit latency, bytes
//! written, reopen time, memory per key, and throughput while checkpoints run against a
//! blocking baseline, writing `<stem>-checkpoint.csv` and `.png` beside the JSON.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

mod accounting;
mod durable;
mod hashing;
mod machine;
mod measure;
mod plot;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use bavl_core::DEFAULT_CAPACITY;
use clap::{Args, Parser, Subcommand};

use crate::machine::Machine;
use crate::measure::{measure, Plan};
use crate::report::{Params, Report, Results};
use crate::workload::{CpuMeter, Shape, Workload, KEY_LEN, VALUE_LEN};

#[derive(Parser)]
#[command(name = "bavl-bench", about = "Benchmarks for bavl")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Core tree figures at the default capacity, plus a capacity sweep.
    Core(CoreArgs),
    /// The durable store on Workload B: throughput, commit latency, bytes written, reopen
    /// time, memory per key, and throughput while checkpoints run (vs blocking).
    Store(durable::StoreArgs),
    /// Child process of `store`: opens a store and prints its memory use.
    #[command(hide = true)]
    StoreRam(durable::StoreRamArgs),
}

#[derive(Args)]
struct CoreArgs {
    /// Keys in the measured state (default 1,000,000; 50,000 with --quick).
    #[arg(long)]
    keys: Option<usize>,
    /// Smoke run: fewer keys, fewer repetitions, a smaller sweep.
    #[arg(long)]
    quick: bool,
    /// JSON report path; the sweep CSV and PNG are written beside it.
    #[arg(long, default_value_os_t = bavl_labkit::results_path("core.json"))]
    out: PathBuf,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Keys in each capacity of the sweep (default: --keys; 25,000 with --quick).
    #[arg(long)]
    sweep_keys: Option<usize>,
    /// Capacities of the sweep, comma-separated.
    #[arg(long, value_delimiter = ',')]
    capacities: Option<Vec<u32>>,
    /// Measured update blocks of 10,000 upserts on one core (default 24; 10 with --quick).
    #[arg(long)]
    blocks: Option<usize>,
    /// Further measured blocks with no CPU pin, at the default capacity (default 12; 3 with --quick).
    #[arg(long)]
    unpinned_blocks: Option<usize>,
    /// Threads for the parallel verify.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Rounds of the capacity sweep (default 2; 1 with --quick): every capacity is
    /// measured once per round, rounds one after the other, and the best figures kept.
    #[arg(long)]
    rounds: Option<usize>,
    /// Before each capacity, wait up to this many seconds for other processes to leave
    /// the CPUs mostly idle (default 60; 0 with --quick).
    #[arg(long)]
    wait_quiet: Option<f64>,
}

const BLOCK: usize = 10_000;

fn main() -> Result<()> {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    match Cli::parse().command {
        Command::Core(args) => core(args),
        Command::Store(args) => durable::store(args),
        Command::StoreRam(args) => durable::store_ram(args),
    }
}

fn core(a: CoreArgs) -> Result<()> {
    let wall = Instant::now();
    let meter = CpuMeter::start();
    let mut machine = Machine::probe();
    let date = machine.date.clone();
    let keys = a.keys.unwrap_or(if a.quick { 50_000 } else { 1_000_000 });
    let blocks = a.blocks.unwrap_or(if a.quick { 10 } else { 24 });
    let unpinned = a.unpinned_blocks.unwrap_or(if a.quick { 3 } else { 12 });
    let sweep_keys = a.sweep_keys.unwrap_or(if a.quick { 25_000.min(keys) } else { keys });
    let capacities = a.capacities.clone().unwrap_or(if a.quick {
        vec![16, 64, 256, 1024, 4096]
    } else {
        vec![16, 32, 64, 128, 256, 1024, 4096]
    });
    let reps = 3;
    let shape = Shape {
        keys,
        blocks: 1 + blocks + unpinned,
        block_size: BLOCK,
        lookups: if a.quick { 100_000 } else { 1_000_000 },
        proof_samples: 10_000,
    };
    let plan = Plan {
        reps,
        get_reps: reps,
        compare_btreemap: true,
        threads: a.threads,
        update_blocks: blocks,
        unpinned_blocks: unpinned,
        wait_quiet: a.wait_quiet.unwrap_or(if a.quick { 0.0 } else { 60.0 }),
    };
    eprintln!("load average at start: {} ({} cores)", machine.load_avg_start, machine.nproc);

    eprintln!("generating workload: {keys} keys, {} update blocks of {BLOCK}", shape.blocks);
    let w = Workload::generate(a.seed, shape);
    eprintln!("sha256 throughput");
    workload::wait_for_quiet(plan.wait_quiet, 0.3);
    let (n64, bulk) = if a.quick { (1_000_000, 64 << 20) } else { (4_000_000, 256 << 20) };
    let sha64 = hashing::sha256_64b_per_s(n64, 5);
    let sha_bulk = hashing::sha256_bulk_mb_per_s(bulk, 5);

    eprintln!("capacity {DEFAULT_CAPACITY}: {keys} keys (with BTreeMap comparison)");
    let main = measure(&w, DEFAULT_CAPACITY, &plan)?;
    eprintln!("hash accounting at capacity {DEFAULT_CAPACITY}");
    let mut acct = accounting::account(&w, DEFAULT_CAPACITY)?;
    acct.explain(sha64, &main);

    let sweep_w;
    let sw = if sweep_keys == keys {
        &w
    } else {
        let s = Shape {
            keys: sweep_keys,
            blocks: 1 + if a.quick { 10 } else { 20 },
            lookups: (sweep_keys * 2).min(500_000),
            proof_samples: if a.quick { 2_000 } else { 10_000 },
            ..shape
        };
        sweep_w = Workload::generate(a.seed ^ 0x5eed, s);
        &sweep_w
    };
    let sweep_plan = Plan {
        compare_btreemap: false,
        update_blocks: if sweep_keys == keys {
            blocks
        } else if a.quick {
            10
        } else {
            20
        },
        unpinned_blocks: 0,
        ..plan
    };
    let rounds = a.rounds.unwrap_or(if a.quick { 1 } else { 2 }).max(1);
    let mut sweep: Vec<measure::CapacityResult> = Vec::new();
    for round in 0..rounds {
        for (i, &cap) in capacities.iter().enumerate() {
            let r = if round == 0 && sweep_keys == keys && cap == DEFAULT_CAPACITY {
                main.clone()
            } else {
                eprintln!("sweep round {}/{rounds}: capacity {cap}, {sweep_keys} keys", round + 1);
                let mut r =
                    measure(sw, cap, &sweep_plan).with_context(|| format!("capacity {cap}"))?;
                r.btreemap_get_ops_per_s = None;
                r.get_vs_btreemap = None;
                r
            };
            match sweep.get_mut(i) {
                Some(s) => s.merge_best(&r),
                None => sweep.push(r),
            }
        }
    }

    machine.finish();
    let others_busy_cores = (meter.others_cores() * 100.0).round() / 100.0;
    machine.others_busy_cores = Some(others_busy_cores);
    let mut notes = vec![
        "1 MB = 10^6 bytes. Update blocks: half new keys, half existing keys, shuffled; each block's time \
         includes its root_hash(); the first block is an unmeasured warm-up; the tree grows during updates. \
         update_ops_per_s is on one core: the thread (and any helper thread bavl_core spawns in root_hash) \
         pinned to one CPU; update_ops_per_s_unpinned runs further blocks as the library does by default \
         (root_hash may hash the two halves of the tree on two threads). Bulk load and rebuild are unpinned."
            .to_string(),
        "capacity_sweep: each capacity measured once per round (rounds one after the other, a few minutes \
         apart), keeping the best of each throughput; `results` is the single first measurement at the \
         default capacity, side by side with BTreeMap, so it can be below the sweep's entry for that capacity."
            .to_string(),
        "get_vs_btreemap = BTreeMap time / bavl time for the same lookups (target >= 1/1.5: bavl within 1.5x)."
            .to_string(),
        "verify_rebuild: Restore::add_chunk over every exported chunk in shuffled order plus finish, one thread; \
         the parallel figure verifies on `verify_threads` threads and adds on the calling thread."
            .to_string(),
    ];
    if others_busy_cores > 0.25 {
        notes.push(format!(
            "the machine was shared: other processes kept {:.2} cores busy on average (load {} -> {}); \
             figures are lower than on an idle machine",
            others_busy_cores, machine.load_avg_start, machine.load_avg_end
        ));
    }
    let targets = report::targets(&main);
    let met = targets.iter().map(|(k, t)| (*k, t.met())).collect();
    let params = Params {
        quick: a.quick,
        keys,
        capacity: DEFAULT_CAPACITY,
        key_bytes: KEY_LEN,
        value_bytes: VALUE_LEN,
        seed: a.seed,
        update_block_size: BLOCK,
        update_blocks_measured: blocks,
        update_blocks_unpinned: unpinned,
        lookups_per_pass: shape.lookups,
        proof_samples: shape.proof_samples,
        repetitions: reps,
        verify_threads: a.threads,
        sweep_keys,
        sweep_capacities: capacities,
        wait_quiet_s: plan.wait_quiet,
        sweep_rounds: rounds,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let report = Report {
        benchmark: "core",
        command: format!("bavl-bench {}", args.join(" ")),
        date,
        wall_time_s: (wall.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        machine,
        params,
        results: Results { sha256_64b_hashes_per_s: sha64, sha256_bulk_mb_per_s: sha_bulk, main },
        targets,
        met,
        hash_accounting: acct,
        capacity_sweep: sweep,
        notes,
    };
    write_outputs(&a.out, &report)?;
    println!("{}", report::summary(&report));
    println!("wall time {:.1} s", report.wall_time_s);
    Ok(())
}

/// `<dir>/<stem><suffix>` for the report path `out`.
fn beside(out: &Path, suffix: &str) -> PathBuf {
    let stem = out.file_stem().map_or("core".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}{suffix}"))
}

fn write_outputs(out: &Path, report: &Report) -> Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(out, json + "\n").with_context(|| format!("writing {}", out.display()))?;
    let csv = beside(out, "-capacity.csv");
    report::write_csv(&csv, &report.capacity_sweep)?;
    let png = beside(out, "-capacity.png");
    let title = format!(
        "bavl capacity sweep: {} keys (20-byte keys, 100-byte values), {}, commit {}",
        report.params.sweep_keys,
        report.machine.cpu,
        report.machine.short_commit(10)
    );
    match plot::plot(&png, &report.capacity_sweep, DEFAULT_CAPACITY, &title) {
        Ok(()) => eprintln!("wrote {}, {}, {}", out.display(), csv.display(), png.display()),
        Err(e) => {
            eprintln!("warning: no plot ({e:#}); wrote {} and {}", out.display(), csv.display())
        }
    }
    Ok(())
}
