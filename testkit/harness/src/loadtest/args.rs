//! The arguments of `bavl-harness loadtest`, its help text, and the store options and block mix
//! they ask for.

use std::path::PathBuf;

use anyhow::{ensure, Result};
use bavl_store::{CheckpointPace, CheckpointPolicy, Options};
use bavl_workload::Mix;

use crate::text::bytes;

/// The most operations one block may have.
const MAX_BLOCK_OPS: u64 = 10_000_000;

#[derive(clap::Args, Clone)]
pub struct LoadtestArgs {
    /// The store's directory (created if it does not exist).
    #[arg(long, value_name = "PATH")]
    pub db: PathBuf,
    /// Blocks to commit, one version each (0: only the initial load, if any).
    #[arg(long, value_name = "N")]
    pub blocks: u64,
    /// New random keys per block.
    #[arg(long, value_name = "I")]
    pub inserts: u32,
    /// Existing keys given new values per block.
    #[arg(long, value_name = "U")]
    pub updates: u32,
    /// Existing keys deleted per block.
    #[arg(long, value_name = "D", default_value_t = 0)]
    pub deletes: u32,
    /// After each commit, prove and verify 100 random keys of the new version.
    #[arg(long)]
    pub proofs: bool,
    /// On a new store (version 0), first load K random keys, 10,000 per version.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub initial: u64,
    /// Seed of the initial state and of every block.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Chunk capacity of a new store (4..=65536; default 64). An existing store keeps its
    /// own: giving another is an error.
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u32).range(4..=65_536))]
    pub capacity: Option<u32>,
    /// How many of the newest versions stay readable.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: u64,
    /// Automatic checkpoints once the log written since the last one exceeds M MiB (and
    /// --checkpoint-ratio times the last checkpoint). Fractions are allowed. [default: 64;
    /// 4 with --cache-mib, whose replay on open reads chunks from disk]
    #[arg(long, value_name = "M", conflicts_with = "manual_checkpoints")]
    pub checkpoint_mb: Option<f64>,
    /// Automatic checkpoints also wait for the log to exceed R times the size of the last
    /// checkpoint (0: the --checkpoint-mb threshold alone). [default: 1; 0 with --cache-mib]
    #[arg(long, value_name = "R", conflicts_with = "manual_checkpoints")]
    pub checkpoint_ratio: Option<f64>,
    /// Never write a checkpoint (the log alone keeps every version).
    #[arg(long)]
    pub manual_checkpoints: bool,
    /// Write checkpoints as fast as the disk takes them, synced once at their end, instead
    /// of spread over the commits (the default: handed to the disk a MiB at a time in step
    /// with the log, finishing once it has grown by half of what triggered the checkpoint,
    /// so the commits' fsyncs never wait behind a burst).
    #[arg(long, conflicts_with = "manual_checkpoints")]
    pub unpaced_checkpoints: bool,
    /// How often a commit also records its version in HEAD, in milliseconds (0: every
    /// commit). A log later found to end before HEAD's version is reported as damaged, so
    /// a cut log can lose unnoticed only the commits of the last interval. [default: 1000]
    #[arg(long, value_name = "MS", conflicts_with = "no_head_updates")]
    pub head_interval_ms: Option<u64>,
    /// Record the version in HEAD only at checkpoints and at the end (to measure what the
    /// updates cost).
    #[arg(long)]
    pub no_head_updates: bool,
    /// Page chunk bodies out to disk and keep at most M MiB of them in memory; the rest
    /// of the tree stays in memory as a small skeleton (about 4.4 bytes per key), for
    /// states larger than memory (docs/design.md §8.5.1). Without it the whole state is
    /// in memory. 0 keeps no body between blocks. The budget counts the allocator's
    /// slack too: the store evicts to M divided by the memory the process gained per
    /// byte of body it counts (up to 2; see --cache-counts-heap).
    #[arg(long, value_name = "M")]
    pub cache_mib: Option<u64>,
    /// With --cache-mib: the budget counts the bodies' heap bytes only, not the
    /// allocator's slack (more bodies cached, more memory used than M).
    #[arg(long, requires = "cache_mib")]
    pub cache_counts_heap: bool,
    /// With --cache-mib: do not load the chunks a block touches on several threads
    /// before applying it (each operation then loads what it needs, one read at a time).
    #[arg(long, requires = "cache_mib")]
    pub no_prefetch: bool,
    /// Also write the report, with one row per block, as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Print `committed <version> <root hex>` on stdout as soon as each commit returns
    /// (and, first, `opened <version> <root hex>` once the store is open).
    #[arg(long)]
    pub print_roots: bool,
    /// No progress bar and no summary (errors, --print-roots and --json still appear).
    #[arg(long)]
    pub quiet: bool,
}

pub const HELP: &str = "Examples:
  bavl-harness loadtest --db /tmp/lt --initial 1000000 --blocks 50 --inserts 4000 --updates 5000 --deletes 1000
  bavl-harness loadtest --db /tmp/lt --blocks 20 --inserts 4000 --updates 5000 --deletes 1000 --proofs
  bavl-harness loadtest --db /tmp/lt --blocks 100 --inserts 100 --updates 0 --manual-checkpoints --json lt.json
  bavl-harness loadtest --db /tmp/big --initial 10000000 --blocks 50 --inserts 4000 --updates 5000 --deletes 1000 --cache-mib 512

Each block is Workload B: --inserts new random 20-byte keys with 100-byte values, --updates
and --deletes of existing keys picked uniformly, shuffled together. Block v depends only on
--seed, v and the state, so running 10 blocks then 10 more commits the same roots as 20 at
once, and `bavl-harness crashtest` can follow a store it kills with an in-memory reference.

With --cache-mib the state may be larger than memory: chunk bodies beyond the budget live in
a page file and are read back (each verified against its hash) when a block needs them;
before each block its keys' chunks are loaded on up to 16 threads (--no-prefetch: one by
one, as the operations meet them). The summary then counts loads, evictions and the
page file's size.

Reported per block: prefetch (loading the block's chunks, with --cache-mib), apply
(operations into the tree), hash (rehashing what changed), persist (appending the log record
and fdatasync), commit latency (the whole commit() call), bytes appended to the log. At the end: throughput, latency percentiles, checkpoints written, and
the store's size statistics.

Exit status: 0 success, 1 a proof of --proofs failed to verify, 2 bad arguments or an I/O
error (including a store in use by another process), 3 the store is damaged (run `bavl check`).";

/// The store options the arguments ask for.
pub(super) fn options(args: &LoadtestArgs) -> Result<Options> {
    let checkpoint = if args.manual_checkpoints {
        CheckpointPolicy::Manual
    } else {
        // A paged store's defaults keep the log short (its replay reads from disk).
        let (default_mb, default_ratio) = match args.cache_mib {
            Some(_) => (4.0, 0.0),
            None => (64.0, 1.0),
        };
        let mb = args.checkpoint_mb.unwrap_or(default_mb);
        let ratio = args.checkpoint_ratio.unwrap_or(default_ratio);
        ensure!(mb.is_finite() && mb >= 0.0, "--checkpoint-mb must be a number >= 0, not {mb}");
        ensure!(
            ratio.is_finite() && ratio >= 0.0,
            "--checkpoint-ratio must be a number >= 0, not {ratio}"
        );
        CheckpointPolicy::Auto { log_ratio: ratio, min_log_bytes: (mb * 1048576.0) as u64 }
    };
    let checkpoint_pace =
        if args.unpaced_checkpoints { CheckpointPace::Unpaced } else { CheckpointPace::default() };
    let head_interval = match (args.no_head_updates, args.head_interval_ms) {
        (true, _) => None,
        (false, Some(ms)) => Some(std::time::Duration::from_millis(ms)),
        (false, None) => Options::default().head_interval,
    };
    let cache_bytes = match args.cache_mib {
        Some(m) if m > 1 << 30 => anyhow::bail!("--cache-mib {m} is more than 2^30 MiB"),
        m => m.map(|m| m << 20),
    };
    Ok(Options {
        capacity: args.capacity,
        cache_bytes,
        cache_counts_slack: !args.cache_counts_heap,
        keep_recent: args.keep,
        checkpoint,
        checkpoint_pace,
        head_interval,
        ..Options::default()
    })
}

pub(super) fn describe_policy(o: &Options) -> String {
    match o.checkpoint {
        CheckpointPolicy::Manual => "manual (never during the run)".into(),
        CheckpointPolicy::Auto { log_ratio, min_log_bytes } => format!(
            "automatic, once the log since the last one exceeds {} and {log_ratio} x its size; {}",
            bytes(min_log_bytes),
            match o.checkpoint_pace {
                CheckpointPace::Unpaced => "unpaced".to_string(),
                CheckpointPace::Spread { fraction } =>
                    format!("paced to finish within {fraction} of that much more log"),
            }
        ),
    }
}

/// Validates the mix.
pub(super) fn mix(args: &LoadtestArgs) -> Result<Mix> {
    let m = Mix { inserts: args.inserts, updates: args.updates, deletes: args.deletes };
    let total = m.inserts as u64 + m.updates as u64 + m.deletes as u64;
    ensure!(total > 0, "--inserts, --updates and --deletes are all 0: a block needs operations");
    ensure!(
        total <= MAX_BLOCK_OPS,
        "a block of {total} operations is too large (at most {MAX_BLOCK_OPS})"
    );
    Ok(m)
}
