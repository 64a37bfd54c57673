//! Where the lab's default outputs go: the repository's `docs/results/` and `target/`,
//! whatever the working directory, so every lab command runs the same way from `lab/`
//! (`cd lab && cargo run --release -p <pkg> -- ...`) or from anywhere else.
//!
//! Only defaults are resolved here: a path the user passes on the command line stays
//! relative to the working directory, as usual.

use std::path::{Path, PathBuf};

/// The repository's root: the directory holding `lab/Cargo.toml`.
///
/// The tree this crate was compiled from (its `CARGO_MANIFEST_DIR` is `<root>/lab/labkit`)
/// when it is still there; otherwise the nearest ancestor of the working directory that
/// holds `lab/Cargo.toml` (a binary moved to another checkout); otherwise the working
/// directory itself.
pub fn repo_root() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if is_root(&built) {
        return built.canonicalize().unwrap_or(built);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors().find(|d| is_root(d)).map_or_else(|| cwd.clone(), Path::to_path_buf)
}

/// `rel` under the repository's root, e.g. `repo_path("target/chainlab")`.
pub fn repo_path(rel: impl AsRef<Path>) -> PathBuf {
    repo_root().join(rel)
}

/// `rel` under the repository's `docs/results/`, e.g. `results_path("core.json")`.
pub fn results_path(rel: impl AsRef<Path>) -> PathBuf {
    repo_root().join("docs/results").join(rel)
}

fn is_root(dir: &Path) -> bool {
    dir.join("lab/Cargo.toml").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_lab_and_the_results() {
        let root = repo_root();
        assert!(root.is_absolute(), "{}", root.display());
        assert!(root.join("lab/Cargo.toml").is_file());
        assert!(root.join("crates").is_dir());
        assert_eq!(results_path("core.json"), root.join("docs/results/core.json"));
        assert_eq!(repo_path("target/x"), root.join("target/x"));
    }
}
