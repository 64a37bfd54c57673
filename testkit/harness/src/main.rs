//! `bavl-harness`: the harnesses around `bavl`, kept out of the shipped binary.
//!
//! `bavl` is what an operator runs (verify, check, stats, get, prove, serve, export, sync,
//! query, cluster). These commands are not: they demonstrate, soak, measure or generate,
//! and some need code no operator should ship, the lying HTTP server above all (the
//! `liars` feature of bavl-sync, enabled here and in the lab, never in `bavl`). So they
//! live in this test-support crate, beside the product, sharing its code through the
//! `bavl_cli` library rather than copying it:
//!
//! - `demo` builds a state, serves it from peer processes on loopback — the shipped
//!   `bavl serve` for the honest ones, this binary's `serve-liar` for the liars — and
//!   syncs it over HTTP knowing only the root hash, verifying every chunk on arrival;
//! - `crashtest` kills a committing `bavl-harness loadtest` child again and again and
//!   checks that nothing committed is lost (the crash soak of the durable store);
//! - `loadtest` commits blocks of Workload B to a durable store and measures them (the
//!   benchmark driver, and the crash soak's child);
//! - `vectors` writes (or `--check`s) the known-answer vectors `docs/vectors/core.json`;
//! - `serve-liar` is `bavl serve` lying in one fixed way (`--byzantine KIND`), for the
//!   demo, the lab and the tests.
//!
//! `cargo run --release -p bavl-harness -- --help`.

#![forbid(unsafe_code)]

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: bavl_alloc::MiMalloc = bavl_alloc::MiMalloc;

mod blocks;
mod crashtest;
mod demo;
mod loadtest;
mod vectors;

// The moved commands name these as `crate::…`, as they did inside bavl-cli.
use bavl_cli::{store_cmds, sync, text, verify};

use std::path::PathBuf;
use std::process::ExitCode;

use bavl_sync::http::Byzantine;
use clap::{Parser, Subcommand};

/// bavl-harness: the demo, the crash soak, the load test, the known-answer vectors and the
/// lying server of bavl (not shipped in `bavl`).
#[derive(Parser)]
#[command(name = "bavl-harness", version, propagate_version = true)]
#[command(after_help = "Start with `bavl-harness demo` (its honest peers run the `bavl` \
    built beside this binary: `cargo build --release -p bavl-cli`).")]
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
    /// --peers processes serving it on 127.0.0.1 (`bavl serve --dir` for the honest ones,
    /// `bavl-harness serve-liar --byzantine KIND` for the --liars, telling the --lies),
    /// and syncs a fresh node from all of them with the `bavl sync` client, knowing only
    /// the root hash and version: adaptive per-peer windows, every chunk verified on
    /// arrival (on --threads workers), a peer banned at its first invalid answer and its
    /// chunks fetched elsewhere, the tree rebuilt and its root compared with the source's.
    /// The peers are stopped on every way out. Exits non-zero if the sync fails or the
    /// roots differ.
    #[command(after_help = DEMO_EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Kill a committing `bavl-harness loadtest` again and again; check that nothing
    /// committed is lost and every root is exact.
    ///
    /// The crash soak of the durable store: every kill is followed by a check of the
    /// store's files (`bavl check`), a reopen, and a comparison with an in-memory reference
    /// tree that applies the same deterministic blocks.
    #[command(after_help = crashtest::HELP)]
    Crashtest(crashtest::CrashtestArgs),
    /// Commit blocks of random inserts, updates and deletes to a durable store, and
    /// measure them.
    ///
    /// Opens (or creates) the store at --db; on a new store, first loads --initial keys
    /// (10,000 per version). Then every block is applied and committed as one durable
    /// version (its log record is fdatasync'ed before the commit returns) while
    /// checkpoints are written in the background. A store is resumed at its version.
    #[command(after_help = loadtest::HELP)]
    Loadtest(loadtest::LoadtestArgs),
    /// Write the known-answer test vectors (or check that the file on disk is current).
    ///
    /// Small fixed trees, their roots, membership / absence / range proofs, every exported
    /// chunk, and negative vectors that a verifier must reject. Keys, values and proofs
    /// are hex. A verifier in another language can check itself against this file.
    #[command(after_help = VECTORS_EXAMPLES)]
    Vectors(VectorsArgs),
    /// `bavl serve`, lying in one fixed way: the liars of the demo, the lab and the tests.
    ///
    /// Takes every argument of `bavl serve` (a store with --db or an export directory with
    /// --dir) and --byzantine KIND: the lies of docs/sync-protocol.md §9 (wrong-bytes,
    /// wrong-index, other-version, truncate, overlong, endless, stall, trickle,
    /// http-error, garbage, redirect-loop, lying-manifest, wrong-version) or the attacks
    /// on the client's progress of docs/sync-adversarial.md (drip-head, drip-body,
    /// endless-trailers, no-chunk-zero, huge-manifest, slow, early-hints, gzip-manifest,
    /// reset-truncate). Prints `serving http://ADDR` on stdout once listening.
    #[command(after_help = SERVE_LIAR_EXAMPLES)]
    ServeLiar(LiarArgs),
    /// `bavl serve` itself (the same code, linked into this binary): the demo's honest
    /// peers, so that `bavl-harness demo` needs no other binary built first.
    #[command(hide = true)]
    Serve(bavl_cli::serve::ServeArgs),
}

const DEMO_EXAMPLES: &str = "Examples:
  bavl-harness demo                           1M keys, 10 peers of which 4 lie
  bavl-harness demo --keys 20000 --capacity 16 --json report.json
  bavl-harness demo --peers 13 --liars 12 --lies wrong-bytes,endless,garbage,redirect-loop,lying-manifest
  bavl-harness demo --peers 4 --liars 4       every peer lies: the sync fails (exit 1)

The honest peers run `bavl serve`: its code linked into this binary, or the shipped binary given
with --bavl PATH (e.g. target/release/bavl after `cargo build --release -p bavl-cli`).";

const VECTORS_EXAMPLES: &str = "Examples:
  bavl-harness vectors                        write docs/vectors/core.json
  bavl-harness vectors --check                exit 1 if the file is out of date";

const SERVE_LIAR_EXAMPLES: &str = "Examples:
  bavl-harness serve-liar --byzantine wrong-bytes --db /tmp/lt --listen 127.0.0.1:0
  bavl-harness serve-liar --byzantine drip-head --dir /srv/mirror --listen 0.0.0.0:8000";

#[derive(clap::Args)]
struct VectorsArgs {
    /// Where to write the vectors (or which file to check).
    #[arg(long, default_value = "docs/vectors/core.json")]
    out: PathBuf,
    /// Do not write: regenerate in memory and exit non-zero if the file differs.
    #[arg(long)]
    check: bool,
}

#[derive(clap::Args)]
struct LiarArgs {
    /// How to lie (see above).
    #[arg(long, value_name = "KIND")]
    byzantine: Byzantine,
    #[command(flatten)]
    serve: bavl_cli::serve::ServeArgs,
}

fn serve_liar(args: &LiarArgs) -> anyhow::Result<ExitCode> {
    let kind = args.byzantine;
    let label = format!(", BYZANTINE: {kind}");
    bavl_cli::serve::serve_with(&args.serve, &label, |server| server.byzantine(kind))
}

fn main() -> ExitCode {
    #[cfg(feature = "mimalloc")]
    bavl_alloc::keep_freed_memory();
    bavl_cli::exit_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Crashtest(args) => crashtest::run(&args),
        Command::Loadtest(args) => loadtest::run(&args),
        Command::Vectors(args) => vectors::run(&args.out, args.check),
        Command::ServeLiar(args) => serve_liar(&args),
        Command::Serve(args) => bavl_cli::serve::serve(&args),
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
