//! `bavl`: the command-line tool of the bavl state store, what an operator runs.
//!
//! - `bavl verify` checks one proof or chunk against a root, for scripts;
//! - `bavl check`, `bavl stats`, `bavl get` and `bavl prove` operate the durable store
//!   (`bavl_store`);
//! - `bavl serve`, `bavl export` and `bavl sync` serve a store's versions over HTTP and
//!   sync one from many untrusted sources; `bavl import` builds one from a stream of pairs;
//!   `bavl query` reads a key from a CometBFT chain;
//! - `bavl cluster …` runs the key-range cluster's commands (the `bavl-cluster` binary).
//!
//! The harnesses (the demo with lying peers, the crash soak, the load test, the
//! known-answer vectors) are not here: they are `bavl-harness` (`testkit/harness`). The
//! commands themselves live in the library (`src/lib.rs`), which the harness shares.

#![forbid(unsafe_code)]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

use std::process::ExitCode;

use bavl_cli::{cluster, import, query, serve, store_cmds, sync, verify};
use clap::{Parser, Subcommand};

/// bavl: an authenticated, versioned key-value state store whose Merkle tree (a B+AVL
/// tree) is organised in self-verifiable chunks, so a new node can sync state from many
/// untrusted peers and verify every chunk on arrival against the root hash alone.
#[derive(Parser)]
#[command(name = "bavl", version, propagate_version = true)]
#[command(after_help = "Formats and invariants: docs/design.md.\n\
    The demo, crash soak, load test and vectors: `cargo run --release -p bavl-harness -- \
    --help`.\n\
    Every command exits with status 141 (128 + SIGPIPE), printing nothing more, when the \
    reader of its output goes away (`bavl stats --db D | head -1`).")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Verify one proof or chunk against a trusted root (for scripts).
    ///
    /// Prints the verified result (JSON with --json) and exits 0, or prints the typed
    /// error and exits 1. Keys, values and range bounds are given in hex.
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify(verify::VerifyArgs),
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
    /// Serve a store's retained versions (or an export directory) over HTTP (sync protocol
    /// v1) for `bavl sync`.
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
    /// Build a new store from a stream of key-value pairs (sorted or not), in bounded
    /// memory.
    ///
    /// The chunk files are written directly (no log replay, no state in memory: unsorted
    /// input goes through an external merge sort); the store is exactly the tree that
    /// inserting the pairs in increasing key order makes. Bad input is an error naming the
    /// record and its byte offset, and leaves no store behind.
    #[command(after_help = import::IMPORT_HELP, disable_version_flag = true)]
    Import(import::ImportArgs),
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

const VERIFY_EXAMPLES: &str = "Examples:
  bavl verify --root HEX --kind chunk --index 3 --proof chunk3.bin
  bavl verify --root HEX --kind membership --key 6b3031 --value 7631 --proof-hex HEX --json
  bavl verify --root HEX --kind absence --key 6b3032 --proof-hex HEX
  bavl verify --root HEX --kind range --lo included:6b3031 --hi excluded:6b3130 --proof-hex HEX

Exit status: 0 verified, 1 rejected (the typed error is printed), 2 bad arguments or unreadable input.";

fn main() -> ExitCode {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    bavl_cli::exit_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => verify::run(&args),
        Command::Check(args) => store_cmds::check(&args),
        Command::Stats(args) => store_cmds::stats(&args),
        Command::Get(args) => store_cmds::get(&args),
        Command::Prove(args) => store_cmds::prove(&args),
        Command::Serve(args) => serve::serve(&args),
        Command::Export(args) => serve::export(&args),
        Command::Sync(args) => sync::run(&args),
        Command::Import(args) => import::run(&args),
        Command::Query(args) => query::run(&args),
        Command::Cluster(args) => cluster::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(bavl_cli::error_code(&e))
        }
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
