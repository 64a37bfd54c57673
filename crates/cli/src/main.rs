//! `bavl`: the command-line tool of the bavl state store.
//!
//! - `bavl demo` builds a state, serves it from `bavl serve` peer processes on loopback
//!   (some of them lying) and syncs it over HTTP knowing only the root hash, verifying
//!   every chunk on arrival;
//! - `bavl vectors` writes (or `--check`s) the known-answer vectors `docs/vectors/core.json`
//!   that let a verifier in another language check itself;
//! - `bavl verify` checks one proof or chunk against a root, for scripts;
//! - `bavl loadtest`, `bavl crashtest`, `bavl check`, `bavl stats`, `bavl get` and
//!   `bavl prove` operate the durable store (`bavl_store`);
//! - `bavl cluster …` runs the key-range cluster's commands (the `bavl-cluster` binary).

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

mod blocks;
mod cluster;
mod crashtest;
mod demo;
mod loadtest;
mod query;
mod serve;
mod store_cmds;
mod sync;
mod text;
mod vectors;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// bavl: an authenticated, versioned key-value state store whose Merkle tree (a B+AVL
/// tree) is organised in self-verifiable chunks, so a new node can sync state from many
/// untrusted peers and verify every chunk on arrival against the root hash alone.
#[derive(Parser)]
#[command(name = "bavl", version, propagate_version = true)]
#[command(after_help = "Start with `bavl demo`. Formats and invariants: docs/design.md.\n\
    Every command exits with status 141 (128 + SIGPIPE), printing nothing more, when the \
    reader of its output goes away (`bavl stats --db D | head -1`).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a state, serve it from peer processes on loopback (some lying), sync it over
    /// HTTP.
    ///
    /// Exports the state (and a later version of it) as a `bavl export` directory, starts
    /// --peers `bavl serve --dir` processes of this binary on 127.0.0.1, --liars of them
    /// with `--byzantine KIND` (--lies), and syncs a fresh node from all of them with the
    /// `bavl sync` client, knowing only the root hash and version: adaptive per-peer
    /// windows, every chunk verified on arrival (on --threads workers), a peer banned at
    /// its first invalid answer and its chunks fetched elsewhere, the tree rebuilt and its
    /// root compared with the source's. The peers are stopped on every way out.
    /// Exits non-zero if the sync fails or the roots differ.
    #[command(after_help = DEMO_EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Write the known-answer test vectors (or check that the file on disk is current).
    ///
    /// Small fixed trees, their roots, membership / absence / range proofs, every exported
    /// chunk, and negative vectors that a verifier must reject. Keys, values and proofs
    /// are hex. A verifier in another language can check itself against this file.
    #[command(after_help = VECTORS_EXAMPLES)]
    Vectors(VectorsArgs),
    /// Verify one proof or chunk against a trusted root (for scripts).
    ///
    /// Prints the verified result (JSON with --json) and exits 0, or prints the typed
    /// error and exits 1. Keys, values and range bounds are given in hex.
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify(verify::VerifyArgs),
    /// Commit blocks of random inserts, updates and deletes to a durable store, and
    /// measure them.
    ///
    /// Opens (or creates) the store at --db; on a new store, first loads --initial keys
    /// (10,000 per version). Then every block is applied and committed as one durable
    /// version (its log record is fdatasync'ed before the commit returns) while
    /// checkpoints are written in the background. A store is resumed at its version.
    #[command(after_help = loadtest::HELP)]
    Loadtest(loadtest::LoadtestArgs),
    /// Kill a committing `bavl loadtest` again and again; check that nothing committed is
    /// lost and every root is exact.
    ///
    /// The crash soak of the durable store: every kill is followed by `bavl check`, a
    /// reopen, and a comparison with an in-memory reference tree that applies the same
    /// deterministic blocks.
    #[command(after_help = crashtest::HELP)]
    Crashtest(crashtest::CrashtestArgs),
    /// Verify every file of a store without changing it.
    ///
    /// Every checkpoint's chunks are verified against its root, every log record's
    /// checksums checked, the newest state rebuilt as opening would (every recorded root
    /// compared) and the tree's invariants checked. Each problem names the file, the byte
    /// offset and what is wrong.
    #[command(after_help = store_cmds::CHECK_HELP)]
    Check(store_cmds::CheckArgs),
    /// Open a store and show its versions, size, files and what opening it took.
    #[command(after_help = store_cmds::STATS_HELP)]
    Stats(store_cmds::StatsArgs),
    /// Read one key of a store, at the latest or a retained version.
    #[command(after_help = store_cmds::GET_HELP, disable_version_flag = true)]
    Get(store_cmds::GetArgs),
    /// Prove a key's value (or its absence) at a version of a store, for `bavl verify`.
    #[command(after_help = store_cmds::PROVE_HELP, disable_version_flag = true)]
    Prove(store_cmds::ProveArgs),
    /// Serve a store's retained versions over HTTP (sync protocol v1) for `bavl sync`.
    #[command(after_help = serve::SERVE_HELP)]
    Serve(serve::ServeArgs),
    /// Write a version as static files that any plain HTTP server can serve as a source.
    #[command(after_help = serve::EXPORT_HELP, disable_version_flag = true)]
    Export(serve::ExportArgs),
    /// Download a version from many untrusted HTTP sources into a new store, verifying
    /// every chunk against the trusted root.
    ///
    /// Parallel download with per-source adaptive concurrency, verification on worker
    /// threads, a source banned at its first invalid answer, bounded memory, resumable
    /// after a kill; the rebuilt tree is written durably as a new store at --db.
    #[command(after_help = sync::SYNC_HELP, disable_version_flag = true)]
    Sync(sync::SyncArgs),
    /// Read a key from a CometBFT chain of bavl-abci nodes, trusting no node: the header
    /// is checked against the genesis validators' signatures, the proof against its app
    /// hash.
    #[command(after_help = query::QUERY_HELP, disable_version_flag = true)]
    Query(query::QueryArgs),
    /// The key-range cluster (docs/cluster.md): nodes, a local cluster, a client, status,
    /// add-node, drain, demo; run by the `bavl-cluster` binary.
    #[command(after_help = cluster::CLUSTER_HELP, disable_version_flag = true)]
    Cluster(cluster::ClusterArgs),
}

const DEMO_EXAMPLES: &str = "Examples:
  bavl demo                                   1M keys, 10 peers of which 4 lie
  bavl demo --keys 20000 --capacity 16 --json report.json
  bavl demo --peers 13 --liars 12 --lies wrong-bytes,endless,garbage,redirect-loop,lying-manifest
  bavl demo --peers 4 --liars 4               every peer lies: the sync fails (exit 1)";

const VECTORS_EXAMPLES: &str = "Examples:
  bavl vectors                                write docs/vectors/core.json
  bavl vectors --check                        exit 1 if the file is out of date";

const VERIFY_EXAMPLES: &str = "Examples:
  bavl verify --root HEX --kind chunk --index 3 --proof chunk3.bin
  bavl verify --root HEX --kind membership --key 6b3031 --value 7631 --proof-hex HEX --json
  bavl verify --root HEX --kind absence --key 6b3032 --proof-hex HEX
  bavl verify --root HEX --kind range --lo included:6b3031 --hi excluded:6b3130 --proof-hex HEX

Exit status: 0 verified, 1 rejected (the typed error is printed), 2 bad arguments or unreadable input.";

#[derive(clap::Args)]
struct VectorsArgs {
    /// Where to write the vectors (or which file to check).
    #[arg(long, default_value = "docs/vectors/core.json")]
    out: PathBuf,
    /// Do not write: regenerate in memory and exit non-zero if the file differs.
    #[arg(long)]
    check: bool,
}

/// Makes every command exit quietly with [`text::CLOSED_PIPE_EXIT`] when the reader of its
/// stdout or stderr goes away. Rust ignores SIGPIPE, so a write to a closed pipe fails
/// with `EPIPE`, and `print!`/`println!`/`eprintln!` turn that into a panic ("failed
/// printing to stdout: Broken pipe", exit 101); this hook turns exactly that panic, in any
/// command and any thread, into a quiet exit. Sockets are untouched (a peer that hangs
/// up is an ordinary error for `serve` and `sync`), unlike restoring SIGPIPE's default.
fn exit_quietly_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let printing = msg.starts_with("failed printing to stdout")
            || msg.starts_with("failed printing to stderr");
        if printing && (msg.contains("Broken pipe") || msg.contains("os error 32")) {
            std::process::exit(text::CLOSED_PIPE_EXIT);
        }
        default(info)
    }));
}

fn main() -> ExitCode {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    exit_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Vectors(args) => vectors::run(&args.out, args.check),
        Command::Verify(args) => verify::run(&args),
        Command::Loadtest(args) => loadtest::run(&args),
        Command::Crashtest(args) => crashtest::run(&args),
        Command::Check(args) => store_cmds::check(&args),
        Command::Stats(args) => store_cmds::stats(&args),
        Command::Get(args) => store_cmds::get(&args),
        Command::Prove(args) => store_cmds::prove(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Export(args) => serve::export(&args),
        Command::Sync(args) => sync::run(&args),
        Command::Query(args) => query::run(&args),
        Command::Cluster(args) => cluster::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(error_code(&e))
        }
    }
}

/// 3 when the error is a damaged store, else 2.
fn error_code(e: &anyhow::Error) -> u8 {
    let damaged = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<bavl_store::StoreError>(),
            Some(bavl_store::StoreError::Corrupted { .. })
        )
    });
    if damaged {
        3
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
