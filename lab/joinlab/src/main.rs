//! `bavl-joinlab`: a node joins with a state larger than its memory — the bulk import, ten
//! servers of which three lie, the sync to disk in a memory cgroup beside its floor and
//! the in-memory sync of before, one run. How to run it: `lab/notes/join-to-disk.md`.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use bavl_joinlab::report::{self, Row};
use bavl_joinlab::run::{self, Config};
use bavl_joinlab::{floors, pairs};
use bavl_labkit::cgroup::{self, parse_size};
use bavl_labkit::Machine;
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "bavl-joinlab",
    about = "A node joins with a state larger than its memory: bavl import, 10 servers of which 3 lie, bavl sync to disk in a memory cgroup, beside a plain HTTP fetch of the same bytes and the in-memory sync of before",
    after_help = "Examples:
  cd lab && cargo run --release -p bavl-joinlab -- --quick        # smoke, 200k keys, ~1 minute
  cd lab && cargo run --release -p bavl-joinlab                   # 10M and 100M keys, 2 GiB cgroup
  cd lab && cargo run --release -p bavl-joinlab -- --keys 1000000 --out /tmp/j --json /tmp/j.json"
)]
struct Args {
    /// Smoke run: 200k keys, small floors, written under target/joinlab/quick.
    #[arg(long)]
    quick: bool,
    /// State sizes in keys (default 10000000,100000000; quick 200000).
    #[arg(long, value_delimiter = ',')]
    keys: Option<Vec<u64>>,
    /// Chunk capacity of the imported store. 128, not the store's default 64: at 100M keys
    /// the manifest of an import of capacity 64 (2.3M chunk sizes, ~11.6 MB) is over the
    /// sync's 8 MiB manifest limit, which no `bavl sync` flag raises.
    #[arg(long, default_value_t = 128)]
    capacity: u32,
    /// Servers in all (liars among them).
    #[arg(long, default_value_t = 10)]
    peers: usize,
    /// One lying server of each kind (`bavl-harness serve-liar --byzantine KIND`).
    #[arg(long, value_delimiter = ',', default_value = "wrong-bytes,wrong-index,truncate")]
    lies: Vec<String>,
    /// The memory cgroup of the sync, stats and check (`none`: no cgroup; quick: 2GiB
    /// when this runs as root with a cgroup v1 memory hierarchy, none otherwise).
    #[arg(long, default_value = "2GiB")]
    memory_limit: String,
    /// `bavl serve --cache-mib` of every server.
    #[arg(long, default_value_t = 256)]
    serve_cache_mib: u64,
    /// Sizes up to this also run the in-memory sync of before (--baseline-bavl).
    #[arg(long, default_value_t = 10_000_000)]
    in_memory_up_to: u64,
    /// The floor's connections (`bavl sync --max-in-flight`'s default).
    #[arg(long, default_value_t = 128)]
    connections: usize,
    /// Floor fetches per size: one before the sync, the others after it.
    #[arg(long, default_value_t = 2)]
    floor_reps: u32,
    /// Bytes of the disk's write measurement (default 1GiB; quick 64MiB).
    #[arg(long)]
    dd_bytes: Option<String>,
    /// Seconds before a step is killed (default 3600; quick 120).
    #[arg(long)]
    timeout: Option<u64>,
    /// The `bavl` binary (default: beside this one).
    #[arg(long)]
    bavl: Option<PathBuf>,
    /// The `bavl-harness` binary (default: beside this one).
    #[arg(long)]
    harness: Option<PathBuf>,
    /// The `bavl` of before, whose sync holds the state in memory (default:
    /// target/joinlab/base-target/release/bavl, built from commit 302a955 as
    /// lab/notes/join-to-disk.md says; none there: no in-memory baseline).
    #[arg(long)]
    baseline_bavl: Option<PathBuf>,
    /// Stores, inputs and logs (default target/joinlab/work).
    #[arg(long)]
    work: Option<PathBuf>,
    /// CSV and PNG directory (default docs/results/join-to-disk; quick target/joinlab/quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The JSON (default docs/results/join-to-disk.json; quick OUT/join-to-disk.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the stores after each size.
    #[arg(long)]
    keep: bool,
    /// A note recorded in the JSON.
    #[arg(long)]
    note: Option<String>,
    /// Draw the figure again from this run's JSON (into --out) and exit.
    #[arg(long, value_name = "JSON")]
    replot: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match &args.replot {
        Some(json) => replot(json, &outputs(&args).0),
        None => run_all(&args),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn cgroups_available() -> bool {
    Path::new(cgroup::ROOT).join("memory.limit_in_bytes").exists()
        && cgroup::MemCgroup::create("probe", 1 << 30).is_ok()
}

fn config(args: &Args, out: &Path) -> Result<Config> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let bavl = args.bavl.clone().unwrap_or_else(|| exe.with_file_name("bavl"));
    let harness = args.harness.clone().unwrap_or_else(|| exe.with_file_name("bavl-harness"));
    for (b, how) in [(&bavl, "-p bavl-cli"), (&harness, "-p bavl-harness")] {
        anyhow::ensure!(b.exists(), "{} not found (cargo build --release {how})", b.display());
    }
    let baseline = match &args.baseline_bavl {
        Some(p) => Some(p.clone()),
        None => Some(bavl_labkit::repo_path("target/joinlab/base-target/release/bavl"))
            .filter(|p| p.exists()),
    };
    let limit = match args.memory_limit.as_str() {
        "none" => None,
        _ if args.quick && !cgroups_available() => None,
        l => Some(parse_size(l).context("--memory-limit")?),
    };
    Ok(Config {
        bavl,
        harness,
        baseline,
        work: args.work.clone().unwrap_or_else(|| bavl_labkit::repo_path("target/joinlab/work")),
        out: out.to_path_buf(),
        sizes: args.keys.clone().unwrap_or_else(|| {
            if args.quick {
                vec![200_000]
            } else {
                vec![10_000_000, 100_000_000]
            }
        }),
        capacity: args.capacity,
        peers: args.peers,
        lies: args.lies.clone(),
        limit,
        serve_cache_mib: args.serve_cache_mib,
        in_memory_up_to: args.in_memory_up_to,
        connections: args.connections,
        floor_reps: args.floor_reps.max(1),
        seed: 1,
        timeout_s: args.timeout.unwrap_or(if args.quick { 120 } else { 3600 }),
        keep: args.keep,
    })
}

/// Bytes a size needs on disk at its peak: the input and the store (while importing), or
/// the store and the synced store (while syncing) — the larger, with a margin of 1 GiB.
fn disk_needed(keys: u64, store_bytes_per_key: f64) -> u64 {
    let store = (keys as f64 * store_bytes_per_key) as u64;
    let input = keys * pairs::RECORD_BYTES;
    (input + store).max(2 * store) + (1 << 30)
}

fn run_all(args: &Args) -> Result<ExitCode> {
    let (out, json_path) = outputs(args);
    let cfg = config(args, &out)?;
    let mut machine = Machine::probe().with("bavl_binary", cfg.bavl.display().to_string());
    if let Some(n) = &args.note {
        machine = machine.with("note", n.clone());
    }
    let uncommitted = uncommitted();
    let swept = cgroup::sweep_stale();
    if swept > 0 {
        eprintln!("joinlab: removed {swept} cgroup(s) left by killed runs");
    }
    std::fs::create_dir_all(&out)?;
    std::fs::create_dir_all(&cfg.work)?;
    let dd =
        parse_size(args.dd_bytes.as_deref().unwrap_or(if args.quick { "64MiB" } else { "1GiB" }))?;
    let fl = floors::measure(&cfg.work, dd, if args.quick { 256 << 20 } else { 1 << 30 })?;
    eprintln!(
        "joinlab: floors: disk write {:.0} MB/s (+fsync), SHA-256 {:.0} MB/s, {:.2}M 64-byte hashes/s",
        fl.disk_write_bytes_per_s / 1e6,
        fl.sha256_bytes_per_s / 1e6,
        fl.sha256_64b_hashes_per_s / 1e6
    );
    let (mut rows, mut skipped, mut disk) =
        (Vec::<Row>::new(), Vec::<Value>::new(), Vec::<Value>::new());
    let mut per_key = 150.0; // bytes a key of a store, until one is measured
                             // The file is written after every size, the sizes still to run listed as pending: a
                             // run stopped midway leaves what it measured, saying what it did not.
    let write = |machine: &Machine,
                 rows: &[Row],
                 skipped: &[Value],
                 disk: &[Value],
                 pending: &[u64]|
     -> Result<Value> {
        let mut not = skipped.to_vec();
        not.extend(pending.iter().map(|k| json!({"keys": k, "why": "pending: the run had not reached it when this file was written"})));
        let doc = document(&cfg, machine, &fl, rows, &not, disk, &uncommitted);
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
        std::fs::write(out.join("rows.csv"), report::csv(rows))?;
        if let Err(e) = report::plot(&out.join("join-to-disk.png"), rows, cfg.limit) {
            eprintln!("joinlab: no plot: {e:#}");
        }
        Ok(doc)
    };
    for (i, &keys) in cfg.sizes.iter().enumerate() {
        let free = run::free_bytes(&cfg.work).unwrap_or(0);
        let need = disk_needed(keys, per_key);
        disk.push(json!({"keys": keys, "free_before_bytes": free, "needed_bytes": need,
            "arithmetic": format!("max(input {} B/key + store, 2 x store) at {per_key:.0} B/key + 1 GiB", pairs::RECORD_BYTES)}));
        if free < need {
            let why = format!("not run: {need} bytes needed on disk, {free} free");
            eprintln!("joinlab: {keys} keys {why}");
            skipped.push(json!({"keys": keys, "why": why}));
            continue;
        }
        match run::run_size(&cfg, keys, &fl) {
            Ok(row) => {
                per_key = per_key.max(row.store_bytes as f64 / keys as f64 * 1.05);
                rows.push(row);
            }
            Err(e) => {
                eprintln!("joinlab: {keys} keys failed: {e:#}");
                skipped.push(json!({"keys": keys, "why": format!("failed: {e:#}")}));
            }
        }
        let mut m = machine.clone();
        m.finish();
        write(&m, &rows, &skipped, &disk, &cfg.sizes[i + 1..])?;
    }
    machine.finish();
    let doc = write(&machine, &rows, &skipped, &disk, &[])?;
    let h = &doc["largest"];
    eprintln!(
        "joinlab: largest {} keys: sync/floor {:.3} (<= 1.2), RSS over budget {:.2} B/key (<= 8), ok {}, import {:.0} keys/s -> {}",
        h["keys"], h["sync_over_floor"].as_f64().unwrap_or(f64::NAN),
        h["rss_over_budget_bytes_per_key"].as_f64().unwrap_or(f64::NAN), h["ok"],
        h["import_keys_per_s"].as_f64().unwrap_or(f64::NAN), json_path.display()
    );
    let all_ok = !rows.is_empty() && rows.iter().all(|r| r.ok) && skipped.is_empty();
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The figure of a written JSON, drawn again.
fn replot(json: &Path, out: &Path) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let doc: Value = serde_json::from_str(&text)?;
    let rows: Vec<Row> = serde_json::from_value(doc["sizes"].clone()).context("the sizes")?;
    let limit = doc["config"]["limit"].as_u64();
    report::plot(&out.join("join-to-disk.png"), &rows, limit)?;
    Ok(ExitCode::SUCCESS)
}

fn outputs(args: &Args) -> (PathBuf, PathBuf) {
    let out = args.out.clone().unwrap_or_else(|| {
        if args.quick {
            bavl_labkit::repo_path("target/joinlab/quick")
        } else {
            bavl_labkit::results_path("join-to-disk")
        }
    });
    let json = args.json.clone().unwrap_or_else(|| {
        if args.quick {
            out.join("join-to-disk.json")
        } else {
            bavl_labkit::results_path("join-to-disk.json")
        }
    });
    (out, json)
}

/// Files under crates/ and testkit/ that differ from the commit: the binaries measured
/// may hold them.
fn uncommitted() -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["diff", "--name-only", "HEAD", "--", "crates", "testkit"])
        .current_dir(bavl_labkit::repo_root())
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn document(
    cfg: &Config,
    machine: &Machine,
    fl: &floors::Floors,
    rows: &[Row],
    skipped: &[Value],
    disk: &[Value],
    uncommitted: &[String],
) -> Value {
    let mut doc = json!({
        "benchmark": "join-to-disk",
        "machine": machine,
        "commit": machine.git_commit,
        "command": machine.command,
        "uncommitted_in_crates_at_start": uncommitted,
        "config": cfg,
        "budget_bytes": run::BUDGET_BYTES,
        "floors": fl,
        "import_floors_note": "import_floor_keys_per_s: the keys per second that writing the store's bytes at the disk's sequential rate (write + fsync), or hashing the input's bytes once with SHA-256 on one core, allows, whichever is slower",
        "sizes": rows,
        "not_measured": skipped,
        "disk": disk,
        "in_memory_baseline": match &cfg.baseline {
            Some(b) => format!("{} (bavl sync of commit 302a955, which holds the state in memory; run outside the cgroup, for sizes up to {})", b.display(), cfg.in_memory_up_to),
            None => "unavailable: no bavl of before (--baseline-bavl)".into(),
        },
    });
    if let (Some(o), Value::Object(h)) = (doc.as_object_mut(), report::headline(rows)) {
        o.extend(h);
    }
    if !rows.iter().any(|r| r.keys == report::HEADLINE_KEYS) {
        doc["headline_note"] = json!(format!(
            "no 100M-key run in this file: the *_100m_* fields are null and `largest` holds the figures of the largest size measured ({}); see not_measured",
            rows.iter().map(|r| r.keys).max().unwrap_or(0)
        ));
    }
    doc
}
