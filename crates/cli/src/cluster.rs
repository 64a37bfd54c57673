//! `bavl cluster …`: the key-range cluster's commands (docs/cluster.md), delegated to the
//! `bavl-cluster` binary of `crates/cluster`, which owns their arguments and behaviour.
//!
//! This crate lists the commands (so `bavl cluster --help` shows them) and passes every
//! argument after the command's name through unchanged, `--help` included; it runs
//! `bavl-cluster` from `$BAVL_CLUSTER_BIN`, else next to this executable (where cargo and
//! `cargo install` put both), else from `$PATH`, and exits with its status. Keeping the
//! cluster out of this binary keeps openraft out of its build.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};

pub const CLUSTER_HELP: &str = "Every argument after the command is passed to the \
`bavl-cluster` binary (crates/cluster): `bavl cluster status --help` shows its options.
It is looked for in $BAVL_CLUSTER_BIN, next to `bavl`, then on $PATH
(build it with `cargo build -p bavl-cluster`).

Examples:
  bavl cluster demo --dir /tmp/bc            a local 3-node cluster, loaded, a node killed
  bavl cluster local --nodes 3 --dir /tmp/bc  3 node processes on loopback until Ctrl-C
  bavl cluster status --peers 1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403";

/// Key ranges of bavl trees, each replicated by its own Raft group.
#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
}

/// The commands of `bavl-cluster`; their options are its own.
#[derive(clap::Subcommand)]
enum ClusterCmd {
    /// Run one node (a process hosting replicas of many groups) until killed.
    #[command(disable_help_flag = true)]
    Node(Pass),
    /// Start N node processes on loopback ports and wait for Ctrl-C.
    #[command(disable_help_flag = true)]
    Local(Pass),
    /// One client operation: get, put, delete, scan, prove.
    #[command(disable_help_flag = true)]
    Client(Pass),
    /// Every range (fence keys, epochs, leader, replicas, keys), then the nodes.
    #[command(disable_help_flag = true)]
    Status(Pass),
    /// Register a started node in the directory; the rebalancer moves ranges to it.
    #[command(disable_help_flag = true)]
    AddNode(Pass),
    /// Mark a node as draining: the rebalancer moves every range replica away from it.
    #[command(disable_help_flag = true)]
    Drain(Pass),
    /// Forget a drained node that no range names any more.
    #[command(disable_help_flag = true)]
    RemoveNode(Pass),
    /// A local cluster loaded with keys, splitting, a node killed and restarted.
    #[command(disable_help_flag = true)]
    Demo(Pass),
}

/// The arguments passed through.
#[derive(clap::Args)]
struct Pass {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

/// Runs `bavl-cluster <command> <args…>` and exits with its status.
pub fn run(a: &ClusterArgs) -> anyhow::Result<ExitCode> {
    let (name, pass) = match &a.cmd {
        ClusterCmd::Node(p) => ("node", p),
        ClusterCmd::Local(p) => ("local", p),
        ClusterCmd::Client(p) => ("client", p),
        ClusterCmd::Status(p) => ("status", p),
        ClusterCmd::AddNode(p) => ("add-node", p),
        ClusterCmd::Drain(p) => ("drain", p),
        ClusterCmd::RemoveNode(p) => ("remove-node", p),
        ClusterCmd::Demo(p) => ("demo", p),
    };
    let exe = locate()?;
    let status = std::process::Command::new(&exe)
        .arg(name)
        .args(&pass.args)
        .status()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    // A status beyond a byte, or none (killed by a signal), is reported as 1.
    let code = status.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1);
    Ok(ExitCode::from(code))
}

fn locate() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("BAVL_CLUSTER_BIN") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("BAVL_CLUSTER_BIN names {}, which is not a file", p.display());
        }
        return Ok(p);
    }
    let name = format!("bavl-cluster{}", std::env::consts::EXE_SUFFIX);
    let beside = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.join(&name)));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(&name));
    match beside.into_iter().chain(on_path).find(|p| p.is_file()) {
        Some(p) => Ok(p),
        None => bail!(
            "{name} not found next to bavl or on PATH (build it with `cargo build -p \
             bavl-cluster`, or set BAVL_CLUSTER_BIN)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// `AddNode` → `add-node`, as clap names a variant's command.
    fn kebab(name: &str) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    /// The commands listed here are exactly `bavl-cluster`'s, read from its source (the
    /// variants of its `enum Cmd`): this test keeps the two lists in step.
    #[test]
    fn the_commands_listed_are_bavl_clusters() {
        use clap::Subcommand;
        let ours: BTreeSet<String> = ClusterCmd::augment_subcommands(clap::Command::new("c"))
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        let src = include_str!("../../cluster/src/bin/bavl-cluster/cli.rs");
        let body = src.split("enum Cmd {").nth(1).expect("enum Cmd").split("\n}\n").next();
        let theirs: BTreeSet<String> = body
            .expect("its end")
            .lines()
            .filter_map(|l| l.strip_prefix("    "))
            .filter(|t| t.starts_with(|c: char| c.is_ascii_uppercase()))
            .map(|t| kebab(&t.chars().take_while(|c| c.is_alphanumeric()).collect::<String>()))
            .collect();
        assert!(theirs.len() >= 8, "{theirs:?}");
        assert_eq!(ours, theirs);
        assert_eq!(kebab("RemoveNode"), "remove-node");
    }
}
