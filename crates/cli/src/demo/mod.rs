//! `bavl demo`: build a state, serve it from untrusted in-process peers, sync it back.
//!
//! The source builds a tree of random keys, takes a snapshot and hands it to the peers;
//! a few liars also get a later version. The syncing side is given the root hash and
//! nothing else (see [`sync`]). The report shows what each liar's lies were rejected with
//! and whether the rebuilt root equals the source root.

mod peer;
mod report;
mod sync;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bavl_core::{Snapshot, Tree};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use peer::Behaviour;
use report::{ms, Report, Timings};

const KEY_LEN: usize = 20;
const VALUE_LEN: usize = 100;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Keys in the state: 20-byte keys with 100-byte values, pseudo-random from --seed.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Chunk capacity: the most entries a chunk holds (4..=65536).
    #[arg(long, default_value_t = bavl_core::DEFAULT_CAPACITY,
          value_parser = clap::value_parser!(u32).range(4..=65_536))]
    capacity: u32,
    /// Seed for the keys and values, the liars' places and the request order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Peers serving the state (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    peers: u16,
    /// How many of the peers lie (at most --peers). Liars take, in turn: wrong bytes (one
    /// byte flipped), wrong index (chunk i+1 for i), other version (the chunk of a later
    /// snapshot) and truncated bytes.
    #[arg(long, default_value_t = 4)]
    liars: u16,
    /// Worker threads that fetch and verify chunks.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Also write the report as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

/// Runs the demo; the exit code is non-zero if the sync failed or the roots differ.
pub fn run(args: &DemoArgs) -> Result<ExitCode> {
    ensure!(args.liars <= args.peers, "--liars ({}) exceeds --peers ({})", args.liars, args.peers);
    let start = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let (snap, other, mut report) = source(args, &mut rng)?;
    let peers = peer::make_peers(&snap, &other, args.peers.into(), args.liars.into(), &mut rng)?;
    let behaviours: Vec<Behaviour> = peers.iter().map(|p| p.behaviour()).collect();
    let bar = progress(0, "sync  ", "chunks");
    let outcome = sync::sync(snap.root_hash(), &peers, args.threads.into(), rng, bar);
    report.add_sync(&outcome, &behaviours);
    match outcome.result {
        Ok(mut rebuilt) => {
            let root = rebuilt.root_hash();
            report.rebuilt_root = Some(hex::encode(root));
            report.roots_equal = root == snap.root_hash();
            report.ok = report.roots_equal && rebuilt.len() == snap.len();
        }
        Err(e) => report.error = Some(format!("{e:#}")),
    }
    report.timings.total_ms = ms(start.elapsed());
    print!("{}", report.render());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The source side: builds the state, snapshots it, makes a later version for the
/// "other version" liars and exports every chunk once; the report starts here.
fn source(args: &DemoArgs, rng: &mut ChaCha8Rng) -> Result<(Snapshot, Snapshot, Report)> {
    let (mut tree, insert) = build(args, rng)?;
    let t = Instant::now();
    let snap = tree.snapshot();
    let hash = t.elapsed();
    ensure!(
        snap.chunk_count() >= 2,
        "the demo needs at least two chunks: raise --keys or lower --capacity"
    );
    let other = other_version(&mut tree, &snap)?;
    drop(tree);
    let (export, total_chunk_bytes) = export_all(&snap);
    let report = Report {
        keys: snap.len(),
        key_len: KEY_LEN,
        value_len: VALUE_LEN,
        seed: args.seed,
        capacity: snap.capacity(),
        chunks: snap.chunk_count(),
        total_chunk_bytes,
        threads: args.threads.into(),
        timings: Timings {
            insert_ms: ms(insert),
            hash_ms: ms(hash),
            export_ms: ms(export),
            ..Timings::default()
        },
        source_root: hex::encode(snap.root_hash()),
        ..Report::default()
    };
    Ok((snap, other, report))
}

fn progress(len: u64, prefix: &'static str, unit: &str) -> ProgressBar {
    let template = format!(
        "{{prefix}} [{{bar:40}}] {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, eta {{eta}})"
    );
    let style =
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(len).with_style(style.progress_chars("=> ")).with_prefix(prefix)
}

/// Inserts `--keys` random entries; returns the tree and the time spent inserting.
fn build(args: &DemoArgs, rng: &mut ChaCha8Rng) -> Result<(Tree, Duration)> {
    let mut tree = Tree::with_capacity(args.capacity)?;
    let bar = progress(args.keys, "build ", "keys");
    let (mut key, mut value) = ([0u8; KEY_LEN], [0u8; VALUE_LEN]);
    let start = Instant::now();
    for i in 0..args.keys {
        rng.fill_bytes(&mut key);
        rng.fill_bytes(&mut value);
        tree.insert(&key, &value)?;
        if i % 8192 == 8191 {
            bar.inc(8192);
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok((tree, elapsed))
}

/// A later version of the state: some values changed, so every chunk of it verifies
/// against another root than `snap`'s.
fn other_version(tree: &mut Tree, snap: &Snapshot) -> Result<Snapshot> {
    let step = (snap.len() / 16).max(1) as usize;
    let keys: Vec<Vec<u8>> = snap.iter().step_by(step).map(|(k, _)| k.to_vec()).collect();
    for key in keys {
        tree.insert(&key, b"changed in a later version")?;
    }
    let other = tree.snapshot();
    ensure!(other.root_hash() != snap.root_hash(), "the later version has the same root");
    ensure!(other.chunk_count() == snap.chunk_count(), "the later version has another chunk count");
    Ok(other)
}

/// Exports every chunk once; returns the time and the total size.
fn export_all(snap: &Snapshot) -> (Duration, u64) {
    let start = Instant::now();
    let total =
        (0..snap.chunk_count()).filter_map(|i| snap.export_chunk(i)).map(|c| c.len() as u64).sum();
    (start.elapsed(), total)
}
