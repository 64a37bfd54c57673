//! Helpers of the integration tests that run bavl's binaries on real directories and
//! sockets (bavl-cli's and bavl-harness's): a temporary directory removed on drop, a child
//! process killed and reaped on drop, and starting a server until it prints its address.
#![forbid(unsafe_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A directory under the system's temporary directory, created empty and removed when
/// dropped. Its name has the test's tag and the process id, so tests running in parallel
/// in one binary need distinct tags.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/<prefix>-<tag>-<pid>`, emptied if it exists.
    pub fn new(prefix: &str, tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create the test directory");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
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

/// A child process killed (and reaped) when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` and waits for the first line of its stdout containing `marker`; the rest
/// of its stdout is drained on a thread. Panics if the process ends before saying it.
pub fn start_until(mut cmd: Command, marker: &str) -> (Kill, String) {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let mut child = Kill(child);
    let out = child.0.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    let line = lines.find_map(|l| l.ok().filter(|l| l.contains(marker))).expect("the marker line");
    std::thread::spawn(move || lines.for_each(drop));
    (child, line)
}

/// A finished process's stdout, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A finished process's stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
