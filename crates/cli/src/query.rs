//! `bavl query`: one key of a CometBFT chain running `bavl-abci`, read from any node and
//! trusted only as far as it verifies: the node's value and bavl proof, the header that
//! carries the app hash checked against the genesis validators' signatures, the proof
//! against that app hash (`bavl_abci::trustless`; `docs/chain.md` §3).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bavl_abci::trustless::{self, TrustlessError};

pub const QUERY_HELP: &str = "Examples:
  bavl query --rpc http://127.0.0.1:26657 --key 6b6579 --genesis ~/.cometbft/config/genesis.json
  bavl query --rpc http://node.example:26657 --key 00ff --genesis genesis.json   (absence, proved)

Prints key=, value= (or absent=true), height=, app_hash= and a `verified:` line.
Exit status: 0 verified; 1 the node's answer did not verify (a lying or faulty node: the
header's signatures, or the proof against its app hash); 2 bad arguments, an unreadable
genesis, or a node that could not be asked.";

#[derive(clap::Args)]
pub struct QueryArgs {
    /// A node's RPC address (any node: nothing it says is trusted).
    #[arg(long, default_value = "http://127.0.0.1:26657")]
    rpc: String,
    /// The key, in hex.
    #[arg(long)]
    key: String,
    /// The chain's genesis file: the trusted chain ID and validator set (a chain whose
    /// validators never change, as bavl-abci's).
    #[arg(long)]
    genesis: PathBuf,
}

pub fn run(a: &QueryArgs) -> Result<ExitCode> {
    let key = hex::decode(&a.key).context("--key must be hex")?;
    let text = std::fs::read_to_string(&a.genesis)
        .with_context(|| format!("reading {}", a.genesis.display()))?;
    let trusted = trustless::trusted_from_genesis(&text)
        .with_context(|| format!("reading the validators of {}", a.genesis.display()))?;
    match trustless::read(&a.rpc, &trusted, &key) {
        Ok(v) => {
            println!("{}", v.lines(&a.key));
            Ok(ExitCode::SUCCESS)
        }
        Err(
            e @ (TrustlessError::Header { .. }
            | TrustlessError::Proof { .. }
            | TrustlessError::Mismatch { .. }),
        ) => {
            eprintln!("rejected: {e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e).with_context(|| format!("asking {}", a.rpc)),
    }
}
