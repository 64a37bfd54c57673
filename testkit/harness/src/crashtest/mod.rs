//! `bavl-harness crashtest`: kill a committing process again and again, and check what survives.
//!
//! The parent builds a fresh store (many small chunks, a checkpoint threshold so small
//! that checkpoints, log rotations and deletions of old files happen all the time), then
//! in each iteration spawns `bavl-harness loadtest --print-roots` on it, reads the versions the
//! child reports as committed, kills it with SIGKILL at a random moment and checks:
//!
//! - (a) the reopened version is at least the last version the child printed;
//! - (b) the reopened root equals that of an in-memory reference tree, advanced with the
//!   same deterministic blocks ([`crate::blocks::Workload`]) to the reopened version;
//! - (c) `bavl_store::check::check` finds no problem, on the store as the kill left it
//!   and again after reopening;
//! - (d) every printed (version, root) equals the reference's root of that version and,
//!   if the store still retains the version, `Store::snapshot(v).root_hash()`; so does
//!   every version the reopened store retains.
//!
//! A failure is recorded with its iteration and the run goes on; the exit code is 1 if
//! there was any.
//!
//! Workload B grows the state (40% inserts, 10% deletes), and a bigger state opens and
//! checkpoints more slowly, until kills land only while the child is still opening. So
//! the kill delay is counted from the moment the child reports the store open (except
//! for a share of kills aimed at the opening itself), and once the state exceeds
//! `--max-keys` the store is deleted and built again: a new epoch, with the next seed.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use bavl_core::{Digest, Tree};
use bavl_store::{CheckpointPolicy, DirBackend, Options, Store};
use bavl_workload::Mix;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;

mod checks;
mod child;

use crate::blocks::Workload;
use crate::store_cmds::{store_error, RecoveryJson};
use crate::text::{group, human, ms};
use checks::{check_store, copy_dir, report, resync};
use child::{read_stderr, read_stdout, spawn_child};

/// Versions the children retain (the loadtest's --keep).
const CHILD_KEEP: u64 = 4;
/// Versions the parent retains when it reopens the store, to compare printed roots.
const PARENT_KEEP: u64 = 16;
/// Blocks asked of a child: more than it can commit before it is killed.
const CHILD_BLOCKS: u64 = 1_000_000_000;
/// How long a child may take to open the store before that is a failure.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct CrashtestArgs {
    /// Kill-and-check rounds.
    #[arg(long, value_name = "N", default_value_t = 100)]
    iterations: u64,
    /// Seed of the state, the blocks and the kill moments.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Where to create the store (must not exist or be empty; kept at the end). Default:
    /// a new temporary directory, removed at the end unless --keep-dir or a failure.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the temporary directory at the end.
    #[arg(long)]
    keep_dir: bool,
    /// Also write the report, with one row per iteration, as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Keys of the initial state (loaded by this process, 10,000 per version).
    #[arg(long, value_name = "K", default_value_t = 20_000)]
    keys: u64,
    /// Once the state exceeds this many keys, the store is deleted and built again (a
    /// new epoch, seeded with the next seed), so that every iteration stays fast.
    #[arg(long, value_name = "K", default_value_t = 100_000)]
    max_keys: u64,
    /// Chunk capacity (small: many chunks, so checkpoints have much to write).
    #[arg(long, value_name = "C", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(4..=65_536))]
    capacity: u32,
    /// Operations per block of the children: Workload B, 40% inserts, 50% updates, 10%
    /// deletes.
    #[arg(long, value_name = "OPS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    ops: u32,
    /// The children checkpoint whenever the log since the last checkpoint exceeds this
    /// many MiB (about one block: checkpoints run nearly all the time).
    #[arg(long, value_name = "M", default_value_t = 0.2)]
    checkpoint_mb: f64,
    /// Shortest delay between the child's report that the store is open and the kill.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    min_delay_ms: u64,
    /// Longest delay between the child's report that the store is open and the kill.
    #[arg(long, value_name = "MS", default_value_t = 400)]
    max_delay_ms: u64,
    /// Percentage of the kills aimed at the opening instead (a delay from the spawn
    /// within the time the last reopen took).
    #[arg(long, value_name = "PCT", default_value_t = 20,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    open_kills: u8,
    /// Page chunk bodies out and keep at most M MiB of them in memory, in the children
    /// and in every reopen of this process (`bavl-harness loadtest --cache-mib`): the soak of the
    /// paged store. 0 evicts every body at every commit.
    #[arg(long, value_name = "M")]
    cache_mib: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

impl CrashtestArgs {
    /// The page budget of --cache-mib, in bytes.
    fn cache_bytes(&self) -> Option<u64> {
        self.cache_mib.map(|m| m.min(1 << 30) << 20)
    }
}

pub const HELP: &str = "Examples:
  bavl-harness crashtest                                   100 kills on a temporary store
  bavl-harness crashtest --iterations 200 --json docs/results/crash.json
  bavl-harness crashtest --iterations 20 --dir /tmp/crash --seed 7 --max-delay-ms 100
  bavl-harness crashtest --iterations 200 --cache-mib 0    the paged store: every body evicted at every commit

Each iteration spawns this binary as `bavl-harness loadtest --print-roots` on the store and kills
it with SIGKILL at a moment drawn from --seed: usually --min-delay-ms..=--max-delay-ms after
the child reports the store open, sometimes (--open-kills %) while it is still opening.
Then: (a) the reopened version is at least the last one the child printed as committed;
(b) the reopened root equals that of an in-memory reference tree that applies the same
deterministic blocks; (c) `bavl check` finds no problem, before and after reopening; (d)
every printed root equals the reference's and, while retained, the store's snapshot root.
Kills land while opening, applying, appending to the log, and writing or deleting
checkpoints; the report counts what it can tell apart. When the state outgrows --max-keys,
the store is built again (a new epoch).

Exit status: 0 no failure, 1 failures (each with its iteration and details), 2 bad arguments
or a failure to set up (e.g. a --dir that is not empty).";

/// One check that did not hold.
#[derive(Serialize, Clone)]
pub struct Failure {
    pub iteration: u64,
    pub epoch: u64,
    pub what: String,
}

/// One iteration, for the JSON report.
#[derive(Serialize)]
struct Row {
    iteration: u64,
    epoch: u64,
    /// "open" (aimed at the opening) or "running" (a delay after the child opened).
    aim: &'static str,
    delay_ms: u64,
    /// The version the child opened, if it said so before the kill.
    opened: Option<u64>,
    printed: u64,
    last_printed: Option<u64>,
    reopened: u64,
    keys: u64,
    open_ms: f64,
    recovery: RecoveryJson,
    notes: usize,
    ok: bool,
}

fn policy(args: &CrashtestArgs) -> CheckpointPolicy {
    CheckpointPolicy::Auto {
        log_ratio: 0.0,
        min_log_bytes: (args.checkpoint_mb * 1048576.0) as u64,
    }
}

/// One store, from its creation until it outgrows --max-keys.
struct Epoch {
    number: u64,
    seed: u64,
    /// The in-memory reference, at `version`, and its generator.
    reference: Tree,
    workload: Workload,
    version: u64,
    initial_version: u64,
    /// The reference's root of every version of the epoch.
    roots: BTreeMap<u64, Digest>,
}

/// Creates the store and loads the initial state into it and into the reference, each
/// with its own generator.
fn build(args: &CrashtestArgs, dir: &Path, number: u64, mix: Mix) -> Result<Epoch> {
    let seed = args.seed.wrapping_add(number - 1);
    let opts = Options {
        capacity: Some(args.capacity),
        keep_recent: CHILD_KEEP,
        checkpoint: policy(args),
        cache_bytes: args.cache_bytes(),
        ..Options::default()
    };
    let mut store = Store::open(dir, opts).map_err(|e| store_error(dir, e))?;
    let mut reference = Tree::with_capacity(args.capacity)?;
    let mut store_workload = Workload::new(seed, args.keys, mix);
    let mut workload = Workload::new(seed, args.keys, mix);
    let mut roots = BTreeMap::new();
    roots.insert(0, reference.root_hash());
    for v in 1..=workload.initial_versions() {
        store_workload.apply(&mut store, v)?;
        let (version, root) = store.commit().map_err(|e| store_error(dir, e))?;
        workload.apply(&mut reference, v)?;
        ensure!(
            version == v && root == reference.root_hash(),
            "the store and the reference differ at initial version {v}"
        );
        roots.insert(v, root);
    }
    store.close().map_err(|e| store_error(dir, e))?;
    let initial_version = workload.initial_versions();
    Ok(Epoch {
        number,
        seed,
        reference,
        workload,
        version: initial_version,
        initial_version,
        roots,
    })
}

/// Tallies over the whole run.
#[derive(Default)]
struct Run {
    failures: Vec<Failure>,
    rows: Vec<Row>,
    printed: u64,
    committed: u64,
    killed_while_opening: u64,
    before_first_commit: u64,
    during_checkpoint: u64,
    torn_tails: u64,
    recovery: Vec<f64>,
    open: Vec<f64>,
    epochs: u64,
    kept: Vec<String>,
}

pub fn run(args: &CrashtestArgs) -> Result<ExitCode> {
    ensure!(args.min_delay_ms <= args.max_delay_ms, "--min-delay-ms exceeds --max-delay-ms");
    ensure!(
        args.checkpoint_mb.is_finite() && args.checkpoint_mb >= 0.0,
        "--checkpoint-mb must be a number >= 0"
    );
    ensure!(args.max_keys > args.keys, "--max-keys must exceed --keys");
    let exe = std::env::current_exe().context("finding this program, to spawn it")?;
    let (dir, temporary) = match &args.dir {
        Some(d) => {
            if d.exists() {
                let mut entries =
                    std::fs::read_dir(d).with_context(|| format!("listing {}", d.display()))?;
                if entries.next().is_some() {
                    bail!("{} is not empty: the crash test needs a fresh store", d.display());
                }
            }
            (d.clone(), false)
        }
        None => {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let d =
                std::env::temp_dir().join(format!("bavl-crashtest-{}-{nanos}", std::process::id()));
            (d, true)
        }
    };
    let mix = Mix::workload_b(args.ops);
    let start = Instant::now();
    let mut r = Run { epochs: 1, ..Run::default() };
    let mut e = build(args, &dir, 1, mix)?;

    let hidden = args.quiet || !std::io::stderr().is_terminal();
    let pb = if hidden {
        ProgressBar::hidden()
    } else {
        let style = ProgressStyle::with_template(
            "crash  [{bar:40}] {pos}/{len} kills ({per_sec}, eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        ProgressBar::new(args.iterations).with_style(style.progress_chars("=> "))
    };
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    rng.set_stream(0x4b49_4c4c); // "KILL": not a stream the workload uses
    let mut last_open_ms = 50.0f64;
    for iteration in 1..=args.iterations {
        let failures_before = r.failures.len();
        let epoch = e.number;
        let fail = |r: &mut Run, what: String| r.failures.push(Failure { iteration, epoch, what });
        let aim_open = rng.gen_range(0..100u8) < args.open_kills;
        let delay = if aim_open {
            // Process start-up and the opening take about as long as the last reopen.
            rng.gen_range(0..=(last_open_ms as u64 + 10))
        } else {
            rng.gen_range(args.min_delay_ms..=args.max_delay_ms)
        };

        // Spawn, wait, kill.
        let mut child = spawn_child(&exe, &dir, args, &e, mix)?;
        let (tx, opened) = mpsc::channel();
        let out = read_stdout(child.0.stdout.take().expect("piped"), tx);
        let err = read_stderr(child.0.stderr.take().expect("piped"));
        if !aim_open {
            if let Err(why) = opened.recv_timeout(OPEN_TIMEOUT) {
                let why = match why {
                    mpsc::RecvTimeoutError::Timeout => "did not open the store within 60 s",
                    mpsc::RecvTimeoutError::Disconnected => "closed its output before opening",
                };
                fail(&mut r, format!("the child {why}"));
            }
        }
        std::thread::sleep(Duration::from_millis(delay));
        let exited = child.0.try_wait().context("polling the child")?;
        drop(child); // SIGKILL, then reaped
        let printed = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        if let Some(status) = exited {
            fail(&mut r, format!("the child exited by itself ({status}): {}", stderr.trim()));
        }
        for line in &printed.bad_lines {
            fail(&mut r, format!("the child printed an unexpected line: {line:?}"));
        }
        r.printed += printed.commits.len() as u64;
        if printed.opened.is_none() {
            r.killed_while_opening += 1;
        } else if printed.commits.is_empty() {
            r.before_first_commit += 1;
        }
        let last_printed = printed.commits.last().map(|c| c.0);

        // (c) The store as the kill left it.
        let mut notes = check_store(&dir, "as the kill left it", &mut |w| fail(&mut r, w));

        // Reopen.
        let t = Instant::now();
        let opts = Options {
            capacity: Some(args.capacity),
            keep_recent: PARENT_KEEP,
            checkpoint: CheckpointPolicy::Manual,
            cache_bytes: args.cache_bytes(),
            ..Options::default()
        };
        let store = match Store::open(&dir, opts) {
            Ok(s) => s,
            Err(err) => {
                fail(&mut r, format!("reopening failed: {err}"));
                pb.inc(1);
                break; // Nothing more can be checked on this store.
            }
        };
        let open_time = t.elapsed();
        last_open_ms = ms(open_time);
        let rec = store.recovery().clone();
        r.open.push(ms(open_time));
        r.recovery.push(ms(rec.load_checkpoint + rec.replay));
        if rec.removed_temporary > 0 {
            r.during_checkpoint += 1;
        }
        if rec.discarded_bytes > 0 {
            r.torn_tails += 1;
        }
        let version = store.version();

        // (a) Nothing acknowledged was lost.
        let opened_at = printed.opened.map(|o| o.0);
        for (what, v) in [("opened", opened_at), ("printed as committed", last_printed)] {
            if let Some(v) = v.filter(|&v| v > version) {
                fail(
                    &mut r,
                    format!("the child {what} version {v}, the store reopened at {version}"),
                );
            }
        }

        // (b) The reference, advanced to the reopened version.
        if version < e.version {
            fail(&mut r, format!("the store went back from version {} to {version}", e.version));
            resync(&mut e, &store, mix).map_err(|err| store_error(&dir, err))?;
        }
        while e.version < version {
            e.version += 1;
            e.workload.apply(&mut e.reference, e.version)?;
            e.roots.insert(e.version, e.reference.root_hash());
        }
        let expected = e.reference.root_hash();
        if store.root() != expected || store.latest().root_hash() != expected {
            fail(
                &mut r,
                format!(
                    "version {version}: the store's root {} differs from the reference's {}",
                    hex::encode(store.root()),
                    hex::encode(expected)
                ),
            );
            resync(&mut e, &store, mix).map_err(|err| store_error(&dir, err))?;
        }

        // (d) Every printed root, and every retained version.
        let reports = printed.opened.iter().chain(&printed.commits);
        for &(v, root) in reports {
            if let Some(want) = e.roots.get(&v).filter(|&&want| want != root) {
                let (got, want) = (hex::encode(root), hex::encode(want));
                fail(
                    &mut r,
                    format!(
                        "the child printed root {got} for version {v}, the reference has {want}"
                    ),
                );
            }
            if let Some(snap) = store.snapshot(v).ok().filter(|s| s.root_hash() != root) {
                let (got, has) = (hex::encode(root), hex::encode(snap.root_hash()));
                fail(
                    &mut r,
                    format!("version {v}: printed root {got}, the store's snapshot has {has}"),
                );
            }
        }
        for v in store.versions().collect::<Vec<_>>() {
            let snap = store.snapshot(v).map_err(|err| store_error(&dir, err))?;
            if e.roots.get(&v) != Some(&snap.root_hash()) {
                let has = hex::encode(snap.root_hash());
                fail(&mut r, format!("retained version {v} has root {has}, the reference another"));
            }
        }
        let keys = store.latest().len();
        drop(store);

        // (c) Again, after opening repaired what the kill left.
        notes += check_store(&dir, "after reopening", &mut |w| fail(&mut r, w));

        let ok = r.failures.len() == failures_before;
        r.rows.push(Row {
            iteration,
            epoch: e.number,
            aim: if aim_open { "open" } else { "running" },
            delay_ms: delay,
            opened: opened_at,
            printed: printed.commits.len() as u64,
            last_printed,
            reopened: version,
            keys,
            open_ms: ms(open_time),
            recovery: RecoveryJson::from(&rec),
            notes,
            ok,
        });
        pb.set_message(format!(
            "epoch {}, version {version}, {} keys, {} failure(s)",
            e.number,
            group(keys),
            r.failures.len()
        ));
        pb.inc(1);

        // A new epoch once the state is big enough (the last one's store is kept if it
        // failed a check).
        if keys > args.max_keys && iteration < args.iterations {
            r.committed += e.version - e.initial_version;
            if r.failures.iter().any(|f| f.epoch == e.number) {
                let kept = PathBuf::from(format!("{}.failed-epoch-{}", dir.display(), e.number));
                copy_dir(&dir, &kept)?;
                r.kept.push(kept.display().to_string());
            }
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            e = build(args, &dir, e.number + 1, mix)?;
            r.epochs += 1;
        }
    }
    pb.finish_and_clear();
    r.committed += e.version - e.initial_version;
    let elapsed = start.elapsed();

    let ok = r.failures.is_empty();
    let keep = !temporary || args.keep_dir || !ok;
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report(args, &r, &dir, keep, elapsed, mix)?;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
