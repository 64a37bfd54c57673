//! `bavl-abci`: the bavl CometBFT application, its load generator and an RPC helper.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_abci::{App, Config, Op, Tx};
use clap::{Parser, Subcommand};
use rand::{Rng, SeedableRng};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

/// The bavl CometBFT application (ABCI 0.38): the app hash is the bavl root, queries carry
/// bavl proofs, and state sync verifies every chunk against the trusted app hash.
/// Formats and knobs: docs/chain.md.
#[derive(Parser)]
#[command(name = "bavl-abci", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serves the application to a CometBFT node (set its proxy_app to tcp://ADDR).
    Serve(ServeArgs),
    /// Submits random set/delete transactions over a node's RPC (broadcast_tx_sync).
    Load(LoadArgs),
    /// Prints a node's latest height, or a block's hash and app hash, as KEY=VALUE lines.
    Status {
        /// The node's RPC address.
        #[arg(long, default_value = "http://127.0.0.1:26657")]
        rpc: String,
        /// A block height (default: the latest).
        #[arg(long)]
        height: Option<u64>,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// The application's directory (created if missing).
    #[arg(long)]
    home: PathBuf,
    /// Where CometBFT connects (its proxy_app).
    #[arg(long, default_value = "127.0.0.1:26658")]
    listen: String,
    /// A snapshot every this many heights (0: none).
    #[arg(long, default_value_t = 100)]
    snapshot_interval: u64,
    /// How many snapshots to keep serving (the newest; a snapshot a peer fetched a chunk
    /// of in the last 2 minutes is kept too, at most 2 more).
    #[arg(long, default_value_t = 2)]
    snapshot_keep: usize,
    /// Also keep every snapshot taken less than this many seconds ago (0: by count only).
    /// Snapshots are files in HOME/snapshots and are served again after a restart.
    #[arg(long, default_value_t = 0)]
    snapshot_keep_secs: u64,
    /// The store's budget of chunk bodies in memory, in MiB: the state is paged to the
    /// store's chunk files beyond it, so memory does not grow with the state (about 4.4
    /// bytes per key of skeleton are held besides). 0 keeps no body between blocks.
    #[arg(long, default_value_t = bavl_abci::DEFAULT_CACHE_BYTES >> 20)]
    cache_mib: u64,
    /// Chunk capacity of a new store: the same on every node of a chain.
    #[arg(long)]
    capacity: Option<u32>,
    /// The size a snapshot's ABCI chunk (a bundle of bavl chunks) aims at, in bytes: the
    /// same on every node of a chain, or each serves a snapshot of its own.
    #[arg(long, default_value_t = bavl_abci::snapshot::TARGET_BUNDLE_BYTES)]
    bundle_bytes: u64,
    /// The snapshot format: bavl (format 1) or baseline (format 2, the Cosmos-SDK-style
    /// comparison: one zlib stream in 10 MiB chunks, checked against the app hash only
    /// after the last). The same on every node of a chain. [feature test-rigs]
    #[cfg(feature = "test-rigs")]
    #[arg(long, default_value = "bavl", value_parser = ["bavl", "baseline"])]
    snapshot_format: String,
    /// TESTS ONLY: serve lying snapshots (wrong-bytes, other-height, truncated, forged,
    /// forged-many). [feature test-rigs]
    #[cfg(feature = "test-rigs")]
    #[arg(long)]
    byzantine: Option<bavl_abci::Lie>,
    /// MEASUREMENT ONLY: as a joiner, accept every snapshot chunk unread and restore no
    /// state (the node cannot follow the chain after): the join time CometBFT itself
    /// needs to move the bytes, the floor of the chain experiments. [feature test-rigs]
    #[cfg(feature = "test-rigs")]
    #[arg(long)]
    restore_null: bool,
    /// Append one CSV line per committed block to this file: when its FinalizeBlock
    /// arrived, its transactions and operations, the time in FinalizeBlock, Commit and
    /// snapshotting.
    #[arg(long)]
    block_log: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    log: tracing::Level,
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Node RPC addresses, used in turn.
    #[arg(long, required = true, num_args = 1..)]
    rpc: Vec<String>,
    /// How many transactions to submit.
    #[arg(long, default_value_t = 1000)]
    txs: u64,
    /// Transactions per second (0: as fast as the nodes answer).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Operations per transaction (about 1 in 8 a delete).
    #[arg(long, default_value_t = 10)]
    ops: usize,
    /// Distinct keys drawn from (20-byte keys).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent submitters (each one request at a time), sharing the rate.
    #[arg(long, default_value_t = 1)]
    threads: u64,
}

fn main() -> Result<()> {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    match Cli::parse().cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Load(a) => load(a),
        Cmd::Status { rpc, height } => status(&rpc, height),
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    tracing_subscriber::fmt().with_max_level(a.log).with_writer(std::io::stderr).init();
    // A handler that cannot go on (a store failure) panics: stop the whole process, so
    // CometBFT stops too and a restart recovers from the last durable version.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        tracing::error!("fatal: {info}");
        std::process::exit(70);
    }));
    let mut cfg = Config::new(&a.home);
    cfg.snapshot_interval = a.snapshot_interval;
    cfg.snapshot_keep = a.snapshot_keep;
    cfg.snapshot_keep_secs = a.snapshot_keep_secs;
    cfg.store.capacity = a.capacity;
    cfg.store.cache_bytes = Some(a.cache_mib.saturating_mul(1 << 20));
    #[cfg(feature = "mimalloc")]
    bavl_alloc::paged_memory();
    cfg.bundle_bytes = a.bundle_bytes.max(1);
    cfg.block_log = a.block_log;
    #[cfg(feature = "test-rigs")]
    {
        cfg.byzantine = a.byzantine;
        cfg.restore_null = a.restore_null;
        if a.snapshot_format == "baseline" {
            cfg.snapshot_format = bavl_abci::baseline::FORMAT_BASELINE;
        }
        if let Some(lie) = a.byzantine {
            tracing::warn!(%lie, "BYZANTINE TEST MODE: this node serves lying snapshot chunks");
        }
    }
    let app = App::open(cfg).with_context(|| format!("opening {}", a.home.display()))?;
    let server = tendermint_abci::ServerBuilder::default()
        .bind(&a.listen, app)
        .map_err(|e| anyhow::anyhow!("binding {}: {e}", a.listen))?;
    tracing::info!(listen = %server.local_addr(), "serving ABCI");
    server.listen().map_err(|e| anyhow::anyhow!("serving ABCI: {e}"))
}

fn random_tx(rng: &mut impl Rng, a: &LoadArgs) -> Tx {
    let ops = (0..a.ops.max(1))
        .map(|_| {
            let k = rng.gen_range(0..a.keys.max(1));
            let mut key = format!("key{k:017}").into_bytes();
            key.truncate(20);
            if rng.gen_ratio(1, 8) {
                Op::Delete { key }
            } else {
                let mut value = vec![0u8; a.value_bytes];
                rng.fill(&mut value[..]);
                Op::Set { key, value }
            }
        })
        .collect();
    Tx { ops }
}

/// Counts of one load thread: accepted, refused by CheckTx, failed to reach a node.
#[derive(Default)]
struct Sent {
    ok: u64,
    refused: u64,
    failed: u64,
}

/// Thread `t` of `threads` submits transactions t, t + threads, ... at its share of the
/// rate, from its own random stream.
fn load_thread(a: &LoadArgs, t: u64, threads: u64, start: Instant) -> Sent {
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed.wrapping_mul(1_000_003).wrapping_add(t));
    let mut sent = Sent::default();
    for i in (t..a.txs).step_by(threads as usize) {
        if a.rate > 0.0 {
            let due = start + Duration::from_secs_f64(i as f64 / a.rate);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let tx = random_tx(&mut rng, a).encode();
        let rpc = &a.rpc[i as usize % a.rpc.len()];
        let path = format!("/broadcast_tx_sync?tx=0x{}", hex::encode(&tx));
        match bavl_abci::rpc::get(rpc, &path) {
            Ok(r) if r["code"].as_u64() == Some(0) => sent.ok += 1,
            Ok(r) => {
                sent.refused += 1;
                eprintln!("tx {i} refused: code {} {}", r["code"], r["log"]);
            }
            Err(e) => {
                sent.failed += 1;
                eprintln!("tx {i} via {rpc}: {e}");
            }
        }
    }
    sent
}

fn load(a: LoadArgs) -> Result<()> {
    let start = Instant::now();
    let threads = a.threads.clamp(1, 256);
    let sent: Vec<Sent> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let a = &a;
                s.spawn(move || load_thread(a, t, threads, start))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let ok: u64 = sent.iter().map(|s| s.ok).sum();
    let refused: u64 = sent.iter().map(|s| s.refused).sum();
    let failed: u64 = sent.iter().map(|s| s.failed).sum();
    let secs = start.elapsed().as_secs_f64();
    println!("sent={} accepted={ok} refused={refused} failed={failed} seconds={secs:.2}", a.txs);
    if ok == 0 && a.txs > 0 {
        bail!("no transaction was accepted");
    }
    let height = confirm(&a.rpc[0], a.seed, a.txs)?;
    println!("committed: marker at height {height}, its membership proof verified against the app hash in header {}", height + 1);
    Ok(())
}

/// Submits a marker transaction, waits until it is committed, and verifies its
/// membership proof against the app hash the next header carries.
fn confirm(rpc: &str, seed: u64, txs: u64) -> Result<u64> {
    let key = format!("load-done-{seed}").into_bytes();
    let value = format!("{txs}").into_bytes();
    let path = format!("/broadcast_tx_sync?tx=0x{}", hex::encode(Tx::set(&key, &value).encode()));
    let r = bavl_abci::rpc::get(rpc, &path)?;
    if r["code"].as_u64() != Some(0) {
        bail!("the marker transaction was refused: {r}");
    }
    let start = Instant::now();
    let (height, proof) = loop {
        let (h, v, kind, proof) = bavl_abci::rpc::query_key(rpc, &key)?;
        if v.as_deref() == Some(&value[..]) && kind == bavl_abci::query::OP_MEMBERSHIP {
            break (h, proof);
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the marker transaction was not committed within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // The state after block `height` is committed to by header `height + 1`.
    let header_hash = loop {
        match bavl_abci::rpc::block_hashes(rpc, height + 1) {
            Ok((_, app_hash)) => break app_hash,
            Err(_) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => return Err(e.into()),
        }
    };
    let root: [u8; 32] = hex::decode(&header_hash)
        .ok()
        .and_then(|b| b.try_into().ok())
        .with_context(|| format!("app hash {header_hash:?} is not 32 bytes of hex"))?;
    let _verified = bavl_core::verify_membership::<bavl_core::Sha256>(&root, &key, &value, &proof)
        .context("the marker's proof does not verify against the header's app hash")?;
    Ok(height)
}

fn status(rpc: &str, height: Option<u64>) -> Result<()> {
    let latest = bavl_abci::rpc::latest_height(rpc).with_context(|| format!("asking {rpc}"))?;
    println!("latest_height={latest}");
    let (app_height, app_hash) =
        bavl_abci::rpc::app_info(rpc).with_context(|| format!("asking {rpc}"))?;
    println!("app_height={app_height}\napp_hash_own={}", hex::encode(app_hash));
    if let Some(h) = height {
        let (hash, app) =
            bavl_abci::rpc::block_hashes(rpc, h).with_context(|| format!("asking {rpc}"))?;
        println!("height={h}\nblock_hash={hash}\napp_hash={app}");
    }
    Ok(())
}
