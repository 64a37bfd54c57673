//! Helpers shared by the tests that run the `bavl` binary on real directories.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A directory under the system's temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("bavl-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create the test directory");
        TempDir(p)
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the real binary.
pub fn bavl<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bavl")).args(args).output().expect("run bavl")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A child process killed (and reaped) when dropped.
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and waits for the first line of its stdout containing `marker`; the rest
/// of its stdout is drained on a thread.
pub fn start_until(mut cmd: Command, marker: &str) -> (Kill, String) {
    use std::io::BufRead;
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let mut child = Kill(child);
    let out = child.0.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    let line = lines.find_map(|l| l.ok().filter(|l| l.contains(marker))).expect("the marker line");
    std::thread::spawn(move || lines.for_each(drop));
    (child, line)
}

/// `bavl serve` with these arguments on a free loopback port; the process and its URL.
pub fn serve<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Kill, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bavl"));
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    let (k, line) = start_until(cmd, "serving ");
    (k, line.trim_start_matches("serving ").trim().to_string())
}
