//! Helpers shared by the tests that run the `bavl` binary on real directories.

use std::process::{Command, Output};

pub use bavl_testutil::{start_until, stderr, stdout, Kill, TempDir};

/// Runs the real binary.
pub fn bavl<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bavl")).args(args).output().expect("run bavl")
}

/// `bavl serve` with these arguments on a free loopback port; the process and its URL.
pub fn serve<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Kill, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bavl"));
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    let (k, line) = start_until(cmd, "serving ");
    (k, line.trim_start_matches("serving ").trim().to_string())
}
