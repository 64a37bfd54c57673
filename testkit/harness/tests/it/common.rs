//! Helpers shared by the tests: they run `bavl-harness` and the shipped `bavl` on real
//! directories. `bavl` is the one cargo built beside `bavl-harness` (the same profile's
//! directory): run these tests with bavl-cli's, `cargo test -p bavl-cli -p bavl-harness`,
//! so that it is there and current.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use bavl_testutil::{start_until, stderr, stdout, Kill, TempDir};

/// The harness's commands; every other command is `bavl`'s.
const HARNESS_COMMANDS: [&str; 5] = ["demo", "crashtest", "loadtest", "vectors", "serve-liar"];

/// The `bavl-harness` binary under test.
pub fn harness() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bavl-harness"))
}

/// The shipped `bavl`, beside `bavl-harness`.
pub fn bavl_bin() -> PathBuf {
    let bin = harness().with_file_name(format!("bavl{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: these tests run the shipped `bavl` too; build it with the same \
         profile (`cargo test -p bavl-cli -p bavl-harness` does)",
        bin.display()
    );
    bin
}

/// The binary that has `command`: `bavl-harness` for the harness's, `bavl` otherwise.
pub fn bin_for(command: &str) -> PathBuf {
    if HARNESS_COMMANDS.contains(&command) {
        harness()
    } else {
        bavl_bin()
    }
}

/// Runs `args` with the binary that has its first word as a command ([`bin_for`]).
pub fn bavl<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    let first = args.first().map(|a| a.as_ref().to_string_lossy().into_owned()).unwrap_or_default();
    Command::new(bin_for(&first)).args(args).output().expect("run the binary")
}

/// Panics with both outputs unless the exit code is `code`.
pub fn expect_code(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: expected exit {code}\nstdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `bavl serve` with these arguments on a free loopback port (`bavl-harness serve-liar
/// --byzantine KIND` if `liar`); the process and its URL.
pub fn serve<S: AsRef<std::ffi::OsStr>>(args: &[S], liar: Option<&str>) -> (Kill, String) {
    let mut cmd = match liar {
        Some(kind) => {
            let mut cmd = Command::new(harness());
            cmd.args(["serve-liar", "--byzantine", kind]);
            cmd
        }
        None => {
            let mut cmd = Command::new(bavl_bin());
            cmd.arg("serve");
            cmd
        }
    };
    cmd.args(["--listen", "127.0.0.1:0"]).args(args);
    let (k, line) = start_until(cmd, "serving ");
    (k, line.trim_start_matches("serving ").trim().to_string())
}
