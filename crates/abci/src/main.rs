//! `bavl-abci`: the bavl CometBFT application, its load generator and an RPC helper.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bavl_abci::{App, Config, Lie, Op, Tx};
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
    /// Reads a key with its proof from a node and verifies both: the header that carries
    /// the app hash (its hash, and precommit signatures of more than 2/3 of the genesis
    /// validators' power), then the bavl membership or absence proof against that app
    /// hash. Exit status 1 if anything does not verify.
    Query {
        /// The node's RPC address (untrusted).
        #[arg(long, default_value = "http://127.0.0.1:26657")]
        rpc: String,
        /// The key, in hex.
        #[arg(long)]
        key: String,
        /// The chain's genesis file: the trusted chain ID and validator set (a chain whose
        /// validators never change, as bavl-abci's).
        #[arg(long)]
        genesis: PathBuf,
    },
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
    /// How many snapshots to keep serving.
    #[arg(long, default_value_t = 2)]
    snapshot_keep: usize,
    /// Chunk capacity of a new store: the same on every node of a chain.
    #[arg(long)]
    capacity: Option<u32>,
    /// The size a snapshot's ABCI chunk (a bundle of bavl chunks) aims at, in bytes: the
    /// same on every node of a chain, or each serves a snapshot of its own.
    #[arg(long, default_value_t = bavl_abci::snapshot::TARGET_BUNDLE_BYTES)]
    bundle_bytes: u64,
    /// The snapshot format: bavl (format 1) or baseline (format 2, the Cosmos-SDK-style
    /// comparison: one zlib stream in 10 MiB chunks, checked against the app hash only
    /// after the last). The same on every node of a chain.
    #[arg(long, default_value = "bavl", value_parser = ["bavl", "baseline"])]
    snapshot_format: String,
    /// TESTS ONLY: serve lying snapshots (wrong-bytes, other-height, truncated, forged).
    #[arg(long)]
    byzantine: Option<Lie>,
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
}

fn main() -> Result<()> {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    match Cli::parse().cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Load(a) => load(a),
        Cmd::Status { rpc, height } => status(&rpc, height),
        Cmd::Query { rpc, key, genesis } => query(&rpc, &key, &genesis),
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
    cfg.store.capacity = a.capacity;
    cfg.bundle_bytes = a.bundle_bytes.max(1);
    cfg.byzantine = a.byzantine;
    if a.snapshot_format == "baseline" {
        cfg.snapshot_format = bavl_abci::baseline::FORMAT_BASELINE;
    }
    if let Some(lie) = a.byzantine {
        tracing::warn!(%lie, "BYZANTINE TEST MODE: this node serves lying snapshot chunks");
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

fn load(a: LoadArgs) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let start = Instant::now();
    let (mut ok, mut refused, mut failed) = (0u64, 0u64, 0u64);
    for i in 0..a.txs {
        if a.rate > 0.0 {
            let due = start + Duration::from_secs_f64(i as f64 / a.rate);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let tx = random_tx(&mut rng, &a).encode();
        let rpc = &a.rpc[i as usize % a.rpc.len()];
        let path = format!("/broadcast_tx_sync?tx=0x{}", hex::encode(&tx));
        match bavl_abci::rpc::get(rpc, &path) {
            Ok(r) if r["code"].as_u64() == Some(0) => ok += 1,
            Ok(r) => {
                refused += 1;
                eprintln!("tx {i} refused: code {} {}", r["code"], r["log"]);
            }
            Err(e) => {
                failed += 1;
                eprintln!("tx {i} via {rpc}: {e}");
            }
        }
    }
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

/// Fetches the commit of `height` (waiting up to 30 s for it) and verifies its header.
fn verified_header(
    rpc: &str,
    trusted: &bavl_abci::light::Trusted,
    height: u64,
) -> Result<bavl_abci::light::VerifiedHeader> {
    let start = Instant::now();
    let signed = loop {
        match bavl_abci::rpc::get(rpc, &format!("/commit?height={height}")) {
            Ok(v) if v["canonical"] == true => break v["signed_header"].clone(),
            _ if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Ok(_) => bail!("no canonical commit of height {height} within 30 s"),
            Err(e) => return Err(e).context("fetching the commit"),
        }
    };
    bavl_abci::light::verify(trusted, &signed)
        .with_context(|| format!("header {height} does not verify"))
}

fn query(rpc: &str, key_hex: &str, genesis: &std::path::Path) -> Result<()> {
    use bavl_abci::{light, query as q, rpc as r};
    let key = hex::decode(key_hex).context("--key must be hex")?;
    let text = std::fs::read_to_string(genesis)
        .with_context(|| format!("reading {}", genesis.display()))?;
    let trusted = light::Trusted::from_genesis(&serde_json::from_str(&text)?)
        .with_context(|| format!("reading the validators of {}", genesis.display()))?;
    let (height, value, kind, proof) = r::query_key(rpc, &key).context("querying")?;
    // The state after block `height` is committed to by header `height + 1`.
    let header = verified_header(rpc, &trusted, height + 1)?;
    let root: [u8; 32] = header.app_hash.as_slice().try_into().context("app hash length")?;
    match (&value, kind.as_str()) {
        (Some(v), q::OP_MEMBERSHIP) => {
            let _verified = bavl_core::verify_membership::<bavl_core::Sha256>(
                &root, &key, v, &proof,
            )
            .context("the membership proof does not verify against the header's app hash")?;
        }
        (None, q::OP_ABSENCE) => {
            let _verified = bavl_core::verify_absence::<bavl_core::Sha256>(&root, &key, &proof)
                .context("the absence proof does not verify against the header's app hash")?;
        }
        _ => bail!(
            "the node answered a {kind:?} proof for a key it says is {}",
            if value.is_some() { "present" } else { "absent" }
        ),
    }
    println!("key={key_hex}");
    match &value {
        Some(v) => println!("value={}", hex::encode(v)),
        None => println!("absent=true"),
    }
    println!("height={height}\napp_hash={}", hex::encode(root));
    println!(
        "verified: header {} signed by {} of {} voting power (genesis validators); {} proof against its app hash",
        header.height,
        header.signed_power,
        header.total_power,
        if value.is_some() { "membership" } else { "absence" }
    );
    Ok(())
}
