//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A directory path under the system's temporary directory (not created: opening a
/// store there creates it), removed with its siblings `<path>.*` when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("bavl-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(self.0.with_extension("moved"));
    }
}
