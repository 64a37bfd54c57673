//! `bavl-peers`: today's authenticated stores beside bavl on the same Workload B blocks.
#![forbid(unsafe_code)]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

mod memlimit;
mod memplot;
mod memrecord;
mod memtargets;
mod plot;
mod report;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_peers::adapters::{self, STORES};
use bavl_peers::child::{self, ChildReport, Load};
use bavl_peers::stream::{self, Header};
use clap::{Args, Parser, Subcommand};

use crate::report::{Outcome, Params};

const LONG_ABOUT: &str = "\
Runs bavl beside today's authenticated key-value stores on the same Workload B block
stream and reports, per store: operations per second, per-block commit latency (apply +
durable commit, p50/p99), peak RSS and disk bytes.

Stores (in report order):
  bavl            bavl_store::Store, default options (fdatasync per commit)
  jmt-redb        jmt 0.12 with TreeReader/TreeWriter on redb 2 (fsync per block) [feature jmt]
  jmt-mock        jmt 0.12 on its in-memory MockTreeStore (not durable)       [feature jmt]
  nomt            nomt 1.0.5, SHA-256, io_uring (fsync per commit)            [feature nomt]
  iavl            IAVL v1.2.4 on goleveldb, SyncOption(true) (a Go program, built here
                  with `go build` from lab/peers/iavl-go into the target directory)
  btreemap-floor  BTreeMap + SHA-256 per written entry + log fsync per block (the floor)

How it works: the parent writes the blocks once to a stream file (the initial state of
--keys random 20-byte keys with 100-byte values, then --warmup-blocks + --blocks blocks of
--ops operations: 40% inserts, 50% updates, 10% deletes, drawn against the state as it
evolves). Each store then runs in its own child process, in its own directory under --dir:
it loads the initial state in commits of 100,000 keys, replays the blocks timing each
(apply + durable commit), records its peak RSS (VmHWM), and reads back every key the
stream ever wrote to compute a digest of its final state. The parent checks that every
store ends with the expected key count and digest, measures each directory's disk usage,
and writes the JSON report, a CSV and a PNG.

Examples:
  cargo run --release -p bavl-peers --features all -- run            # full: 1M keys, 30 blocks
  cargo run --release -p bavl-peers --features all -- run --quick    # smoke: 50k keys, 3 blocks
  cargo run --release -p bavl-peers -- run --stores bavl,iavl        # without the Rust peers
  cargo run --release -p bavl-peers --features nomt -- cgroup        # under a memory limit (root)";

#[derive(Parser)]
#[command(name = "bavl-peers", about = "bavl beside jmt, nomt, IAVL and a BTreeMap floor on Workload B", long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the comparison (see `bavl-peers --help`).
    Run(RunArgs),
    /// Each store's run inside a cgroup v1 memory limit (root): larger than memory.
    ///
    /// Per key count, the parent writes the block stream once; each store then runs in its
    /// own child process inside its own memory group (the limit, swappiness 0): the load in
    /// commits of --load-batch keys (or, with --preload, a loader outside the group and an
    /// open inside it), warm-up and measured blocks, a reopen. The kernel's counters (peak
    /// usage with page cache, limit hits, OOM kills) and the child's (VmHWM,
    /// /proc/self/io over the measured blocks) go to the JSON, with the targets
    /// computed under `targets`; an OOM kill is recorded with the keys loaded by then. A
    /// second child, outside the group, reads every key back and the final state must
    /// match. Needs root and /sys/fs/cgroup/memory.
    ///
    /// Examples:
    ///   bavl-peers cgroup                  # nomt, bavl, bavl-paged(-cached): 1M and 10M, 2 GiB
    ///   bavl-peers cgroup --preload --keys 1000000,10000000,30000000 \
    ///       --memory-limit 2GiB,1GiB --in-memory-up-to 10000000   # docs/results/paged.json
    ///   bavl-peers cgroup --quick --out /tmp/paged.json   # smoke, ~20 s
    #[command(verbatim_doc_comment)]
    Cgroup(memlimit::CgroupArgs),
    /// Draws the PNG of a `cgroup` report again from its JSON (e.g. after the plot changed).
    CgroupPlot {
        /// The report (`docs/results/paged.json`).
        json: PathBuf,
        /// The PNG (default: where `cgroup` puts it beside the JSON).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// List the stores, whether this build has them and their durability setting.
    List,
    /// Child process: one store on a stream file; prints a JSON report line.
    #[command(hide = true)]
    Child(ChildArgs),
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Keys in the initial state (default 1,000,000; 50,000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Measured blocks (default 30; 3 with --quick).
    #[arg(long)]
    blocks: Option<u64>,
    /// Unmeasured blocks after the load, before the measured ones (default 2; 1 with --quick).
    #[arg(long)]
    warmup_blocks: Option<u64>,
    /// Operations per block.
    #[arg(long, default_value_t = 10_000)]
    ops: u32,
    /// Seed of the workload.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stores to run, comma-separated (default: all this build has; see `list`).
    #[arg(long, value_delimiter = ',')]
    stores: Option<Vec<String>>,
    /// Smoke run for CI: 50k keys, 1 + 3 blocks (a minute or two with the Go build cached).
    #[arg(long)]
    quick: bool,
    /// Where the stream and the stores' directories go: a real disk, not tmpfs (default
    /// <repo>/target/peers-bench). Removed afterwards unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the stores' directories.
    #[arg(long)]
    keep: bool,
    /// JSON report (default <repo>/docs/results/peers.json; the CSVs and the PNG go to
    /// the directory named after it without the extension, e.g. docs/results/peers/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The Go tool used to build the IAVL program.
    #[arg(long, default_value = "go")]
    go: String,
    /// Give up on a store's child after this many seconds.
    #[arg(long, default_value_t = 3600)]
    child_timeout_s: u64,
}

#[derive(Args)]
struct ChildArgs {
    #[arg(long)]
    store: String,
    #[arg(long)]
    stream: PathBuf,
    #[arg(long)]
    dir: PathBuf,
    /// Keys the state will hold at the end (sizes nomt's hash table).
    #[arg(long)]
    expected_keys: u64,
    /// Join this memory cgroup (its directory) before anything else.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// After the run, time opening the closed store again.
    #[arg(long)]
    reopen: bool,
    /// Initial keys per commit while loading.
    #[arg(long, default_value_t = child::LOAD_BATCH)]
    load_batch: usize,
    /// Skip reading the final state back (a `--read-back-only` child does it later).
    #[arg(long)]
    no_read_back: bool,
    /// Only open the store left in --dir and read every key back (count and digest).
    #[arg(long)]
    read_back_only: bool,
    /// nomt's page and leaf cache sizes, MiB each (default: nomt's 256).
    #[arg(long)]
    nomt_cache_mib: Option<usize>,
    /// bavl-paged's budget of chunk bodies, MiB (default: twice --nomt-cache-mib).
    #[arg(long)]
    bavl_cache_mib: Option<u64>,
    /// Only commit the initial state (in commits of --load-batch keys), settle the store
    /// (bavl: a checkpoint) and close it, for a `--preloaded` child.
    #[arg(long, conflicts_with_all = ["preloaded", "read_back_only"])]
    load_only: bool,
    /// The store in --dir holds the initial state already (a `--load-only` child wrote it):
    /// open it (timed: `open_s`) and go on with the blocks.
    #[arg(long)]
    preloaded: bool,
}

fn main() -> Result<()> {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    match Cli::parse().command {
        Cmd::Run(a) => run(a),
        Cmd::Cgroup(a) => memlimit::run(a),
        Cmd::CgroupPlot { json, out } => memlimit::replot(&json, out),
        Cmd::List => {
            for s in STORES {
                let built = if s.name == "iavl" {
                    "built at run time with `go build`".to_string()
                } else if adapters::compiled(s.name) {
                    "in this build".to_string()
                } else {
                    format!("needs --features {}", s.feature.unwrap_or("?"))
                };
                println!(
                    "{:<15} {built}\n    {}\n    durability: {}",
                    s.name, s.description, s.durability
                );
            }
            Ok(())
        }
        Cmd::Child(a) => child_main(a),
    }
}

/// The child process: one store on the stream, its report as a JSON line on stdout.
fn child_main(a: ChildArgs) -> Result<()> {
    if let Some(g) = &a.cgroup {
        bavl_peers::cgroup::join(g)?;
    }
    let caches = adapters::Caches { nomt_mib: a.nomt_cache_mib, bavl_mib: a.bavl_cache_mib };
    let open = || adapters::open_with(&a.store, &a.dir, a.expected_keys, caches);
    let rep = if a.load_only {
        child::load_only(&a.store, open()?, &a.stream, a.load_batch)?
    } else if a.read_back_only {
        let mut store = open()?;
        let mut rep = ChildReport { store: a.store.clone(), ..Default::default() };
        child::read_back(&a.store, store.as_mut(), &a.stream, &mut rep)?;
        store.close()?;
        rep
    } else {
        let t = Instant::now();
        let store = open()?;
        let open_s = t.elapsed().as_secs_f64();
        let how = if a.preloaded { Load::Preloaded } else { Load::Batches(a.load_batch) };
        let mut rep = child::run_with_batch(&a.store, store, &a.stream, how, !a.no_read_back)?;
        rep.open_s = a.preloaded.then_some(open_s);
        if a.reopen {
            let t = Instant::now();
            let store = open()?;
            rep.reopen_s = Some(t.elapsed().as_secs_f64());
            eprintln!("[{}] reopened in {:.2} s", a.store, rep.reopen_s.unwrap_or(0.0));
            store.close()?;
        }
        rep
    };
    println!("{}", serde_json::to_string(&rep)?);
    Ok(())
}

fn run(a: RunArgs) -> Result<()> {
    let wall = Instant::now();
    let root = bavl_labkit::repo_root();
    let keys = a.keys.unwrap_or(if a.quick { 50_000 } else { 1_000_000 });
    let blocks = a.blocks.unwrap_or(if a.quick { 3 } else { 30 });
    let warmup = a.warmup_blocks.unwrap_or(if a.quick { 1 } else { 2 });
    let dir = a.dir.clone().unwrap_or_else(|| root.join("target/peers-bench"));
    let out = a.out.clone().unwrap_or_else(|| root.join("docs/results/peers.json"));
    let names: Vec<String> = match &a.stores {
        Some(s) => s.clone(),
        None => STORES.iter().map(|s| s.name.to_string()).collect(),
    };
    for n in &names {
        if adapters::info(n).is_none() {
            bail!("unknown store {n:?} (see `bavl-peers list`)");
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let fs = report::fs_type(&dir);
    if matches!(fs.as_str(), "tmpfs" | "ramfs") {
        bail!("{} is on {fs}: fsync would cost nothing; pass --dir on a real disk", dir.display());
    }
    let mut machine = report::machine(&a.go);
    let params = Params {
        quick: a.quick,
        keys,
        warmup_blocks: warmup,
        blocks,
        ops_per_block: a.ops,
        key_bytes: bavl_workload::KEY_LEN,
        value_bytes: bavl_workload::VALUE_LEN,
        mix: "Workload B: 40% inserts, 50% updates, 10% deletes",
        load_batch: child::LOAD_BATCH,
        seed: a.seed,
        dir: dir.display().to_string(),
        dir_fs: fs,
        allocator: if cfg!(feature = "mimalloc") {
            "mimalloc (bavl-alloc, freed memory kept), the default feature"
        } else {
            "glibc malloc (--no-default-features)"
        },
    };

    // The IAVL program, built first so a missing Go fails early and visibly.
    let iavl_bin = if names.iter().any(|n| n == "iavl") { Some(build_go(&a.go)) } else { None };

    let stream_path = dir.join("stream.bin");
    eprintln!(
        "generating the block stream: {keys} keys, {warmup} warm-up + {blocks} blocks of {} ops -> {}",
        a.ops,
        stream_path.display()
    );
    let t = Instant::now();
    let header = Header { initial_keys: keys, warmup_blocks: warmup, blocks, seed: a.seed };
    let expected = stream::generate(&stream_path, header, a.ops, |_| {})?;
    eprintln!(
        "  {:.1} s; expected final state: {} keys, digest {}",
        t.elapsed().as_secs_f64(),
        expected.keys,
        &expected.digest[..16]
    );

    let exe = std::env::current_exe().context("locating this binary")?;
    let mut outcomes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let info = adapters::info(name).expect("checked");
        eprintln!("\n== {name} ({}/{}) ==", i + 1, names.len());
        let store_dir = dir.join(format!("store-{name}"));
        remove_dir(&store_dir)?;
        let cmd = if name == "iavl" {
            match iavl_bin.as_ref().expect("built above") {
                Ok(bin) => {
                    let mut c = Command::new(bin);
                    c.arg("-stream").arg(&stream_path).arg("-dir").arg(&store_dir);
                    Ok(c)
                }
                Err(e) => Err(format!("building the IAVL program failed: {e:#}")),
            }
        } else if !adapters::compiled(name) {
            Err(format!("not built: needs --features {}", info.feature.unwrap_or("?")))
        } else {
            let mut c = Command::new(&exe);
            c.arg("child")
                .arg("--store")
                .arg(name)
                .arg("--stream")
                .arg(&stream_path)
                .arg("--dir")
                .arg(&store_dir)
                .arg("--expected-keys")
                .arg(expected.keys.to_string());
            Ok(c)
        };
        let t = Instant::now();
        let busy0 = report::machine_busy_s();
        let result = match cmd {
            Ok(c) => run_child(c, Duration::from_secs(a.child_timeout_s)),
            Err(e) => Err(anyhow::anyhow!(e)),
        };
        let wall_s = t.elapsed().as_secs_f64();
        let busy = report::machine_busy_s() - busy0;
        let disk = report::disk_usage(&store_dir);
        let outcome = Outcome::new(info, result, disk, wall_s, busy, &expected);
        eprintln!("  {}", outcome.one_line());
        outcomes.push(outcome);
        if !a.keep {
            remove_dir(&store_dir)?;
        }
    }
    std::fs::remove_file(&stream_path).ok();

    machine.finish();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let rep = report::Report::new(machine, command, params, expected, outcomes, wall.elapsed());
    rep.write(&out)?;
    eprintln!();
    println!("{}", rep.summary());
    Ok(())
}

pub fn remove_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// `go build` of lab/peers/iavl-go into the directory of this binary.
fn build_go(go: &str) -> Result<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("iavl-go");
    let exe = std::env::current_exe()?;
    let bin = exe.parent().context("binary directory")?.join("iavl-peer");
    eprintln!("building the IAVL program: {go} build -o {} ({})", bin.display(), src.display());
    let t = Instant::now();
    let out = Command::new(go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running `{go} build` (is Go installed? --go PATH)"))?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    eprintln!("  built in {:.1} s", t.elapsed().as_secs_f64());
    Ok(bin)
}

/// How a child ended: its exit status, its stdout and the last lines of its stderr.
pub struct Ended {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub tail: Vec<String>,
}

impl Ended {
    /// The last `n` lines of the child's stderr, joined.
    pub fn last_lines(&self, n: usize) -> String {
        let k = self.tail.len().saturating_sub(n);
        self.tail[k..].join(" | ")
    }

    /// The child's JSON report line.
    pub fn report(&self) -> Result<ChildReport> {
        let line =
            self.stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("");
        serde_json::from_str(line).with_context(|| format!("reading the child's report {line:?}"))
    }
}

/// Runs a child, passing its progress (stderr) through, and parses its JSON line.
fn run_child(cmd: Command, timeout: Duration) -> Result<ChildReport> {
    let e = wait_child(cmd, timeout)?;
    if !e.status.success() {
        bail!("child failed ({}): {}", e.status, e.last_lines(8));
    }
    e.report()
}

/// Runs a child to its end (killing it after `timeout`), passing its stderr through.
pub fn wait_child(mut cmd: Command, timeout: Duration) -> Result<Ended> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the child")?;
    let tail = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = child.stderr.take().expect("piped");
    let t2 = tail.clone();
    let pass = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("  {line}");
            let mut t = t2.lock().unwrap();
            t.push(line);
            if t.len() > 30 {
                t.remove(0);
            }
        }
    });
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            child.wait().ok();
            bail!("no answer after {} s: killed", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    pass.join().ok();
    let stdout = reader.join().map_err(|_| anyhow::anyhow!("stdout reader panicked"))??;
    let tail = std::mem::take(&mut *tail.lock().unwrap());
    Ok(Ended { status, stdout, tail })
}
