//! `bavl-cluster`: run a cluster node over TCP, a local cluster of node processes on
//! loopback, a client, the status of the ranges, and a one-command demo.

mod admin;
mod cli;
mod demo;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(cli::run(cli))
}
