//! The application's directory: which store is live, switched atomically by a restore.
//!
//! ```text
//! <home>/CURRENT                  the live store's directory name and a newline
//! <home>/state-<h>-<tag>/         a bavl store; <h> is the height it was created at
//! <home>/restore-<h>-<root16>/    a state sync's unfinished store (a bavl_store::Ingest)
//! <home>/snapshots/               the snapshots served (crate::snapshots)
//! ```
//!
//! `CURRENT` is replaced by [`bavl_store::write_file_atomic`] (write to a temporary, fsync,
//! rename, fsync of the directory), so after a crash it names either the old store or the
//! new one, never a half-written one.
//! A restore writes the new store completely (synced) before switching, and the old
//! directory is deleted only after the switch; [`Home::open`] deletes any other `state-*`
//! directory (what an interrupted restore or deletion left).
//!
//! A state sync builds its store in `restore-<h>-<root16>` (`<root16>`: the first 8 bytes
//! of the trusted root in hex), which never opens as a store before it is finished (the
//! ingest's journal), then renames it to a `state-*` name, syncs `<home>` and switches
//! `CURRENT`. An unfinished one is kept across a restart while the live store is at height
//! 0 (CometBFT state-syncs only a node with no state), so that an offer of the same
//! snapshot resumes it; any other is deleted when a snapshot is accepted, and all of them
//! once the live store is past height 0.

use std::fs;
use std::path::{Path, PathBuf};

use bavl_core::{Digest, Tree};
use bavl_store::{Ingest, IngestOptions, Options, Store, StoreError};

const CURRENT: &str = "CURRENT";

/// Errors of the application's directory.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{path}: CURRENT names {name:?}, which is not a state directory")]
    BadCurrent { path: String, name: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HomeError {
    let what = what.into();
    move |source| HomeError::Io { what, source }
}

/// The application's directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// Opens (creating if needed) the directory and the live store in it.
    pub fn open(root: &Path, opts: &Options) -> Result<(Home, Store), HomeError> {
        fs::create_dir_all(root).map_err(io(format!("creating {}", root.display())))?;
        let home = Home { root: root.to_path_buf() };
        let name = match fs::read_to_string(root.join(CURRENT)) {
            Ok(s) => {
                let name = s.trim_end_matches('\n').to_string();
                if !valid_name(&name) {
                    let path = root.join(CURRENT).display().to_string();
                    return Err(HomeError::BadCurrent { path, name });
                }
                name
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let name = "state-0-genesis".to_string();
                // A store made before CURRENT was written is an empty one: start afresh.
                let _ = fs::remove_dir_all(root.join(&name));
                fs::create_dir_all(root.join(&name))
                    .map_err(io(format!("creating {}", root.join(&name).display())))?;
                home.write_current(&name)?;
                name
            }
            Err(e) => return Err(io(format!("reading {}", root.join(CURRENT).display()))(e)),
        };
        home.remove_others(&name)?;
        let store = Store::open(root.join(&name), opts.clone())?;
        Ok((home, store))
    }

    /// The directory of the live store.
    pub fn current(&self) -> Result<PathBuf, HomeError> {
        let path = self.root.join(CURRENT);
        let name = fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
        Ok(self.root.join(name.trim_end_matches('\n')))
    }

    /// Writes `tree` as a new store at `height` (synced), makes it the live one, and
    /// opens it. The previous store's directory is deleted afterwards; the caller must
    /// have dropped its `Store` first.
    pub fn install(
        &self,
        tree: &mut Tree,
        height: u64,
        opts: &Options,
    ) -> Result<Store, HomeError> {
        let old = self.current()?;
        let name = format!("state-{height}-{}", tag());
        let dir = self.root.join(&name);
        let _ = fs::remove_dir_all(&dir);
        Store::create_from_tree(&dir, tree, height)?;
        self.write_current(&name)?;
        let store = Store::open(&dir, opts.clone())?;
        if old != dir {
            fs::remove_dir_all(&old).map_err(io(format!("removing {}", old.display())))?;
        }
        Ok(store)
    }

    /// Starts, or resumes, the state sync of the snapshot of `height` with trusted root
    /// `root`: deletes every other unfinished restore, then opens the ingest of this one
    /// (one that cannot be resumed, such as a damaged journal, is deleted and started
    /// afresh). It makes what it holds durable every `flush_bytes` of bodies.
    pub fn begin_restore(
        &self,
        height: u64,
        root: &Digest,
        flush_bytes: u64,
    ) -> Result<Ingest, HomeError> {
        let name = restore_name(height, root);
        self.remove_restores(Some(&name))?;
        let dir = self.root.join(&name);
        let opts = || IngestOptions { flush_bytes, ..IngestOptions::default() };
        match Ingest::open(&dir, *root, height, opts()) {
            Ok(ingest) => Ok(ingest),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "starting the restore afresh: {e}");
                fs::remove_dir_all(&dir).map_err(io(format!("removing {}", dir.display())))?;
                Ok(Ingest::open(&dir, *root, height, opts())?)
            }
        }
    }

    /// Finishes the restore `ingest` (every chunk held; the skeleton's root is checked),
    /// makes it the live store and opens it with `opts`; the previous store's directory
    /// is deleted afterwards. The caller must have dropped its `Store` first.
    pub fn finish_restore(&self, ingest: Ingest, opts: &Options) -> Result<Store, HomeError> {
        let (height, root) = (ingest.version(), ingest.root());
        let from = self.root.join(restore_name(height, &root));
        ingest.finish()?;
        let old = self.current()?;
        let name = format!("state-{height}-{}", tag());
        let dir = self.root.join(&name);
        fs::rename(&from, &dir).map_err(io(format!("renaming {}", from.display())))?;
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("syncing {}", self.root.display())))?;
        self.write_current(&name)?;
        let store = Store::open(&dir, opts.clone())?;
        if old != dir {
            fs::remove_dir_all(&old).map_err(io(format!("removing {}", old.display())))?;
        }
        Ok(store)
    }

    /// Deletes every unfinished restore but `keep`.
    pub fn remove_restores(&self, keep: Option<&str>) -> Result<(), HomeError> {
        let entries =
            fs::read_dir(&self.root).map_err(io(format!("listing {}", self.root.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_restore_name(&name) && Some(name.as_str()) != keep {
                fs::remove_dir_all(entry.path())
                    .map_err(io(format!("removing {}", entry.path().display())))?;
            }
        }
        Ok(())
    }

    fn write_current(&self, name: &str) -> Result<(), HomeError> {
        let path = self.root.join(CURRENT);
        bavl_store::write_file_atomic(&path, format!("{name}\n").as_bytes())
            .map_err(io(format!("replacing {}", path.display())))
    }

    fn remove_others(&self, keep: &str) -> Result<(), HomeError> {
        let entries =
            fs::read_dir(&self.root).map_err(io(format!("listing {}", self.root.display())))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if valid_name(&name) && name != keep {
                fs::remove_dir_all(entry.path())
                    .map_err(io(format!("removing {}", entry.path().display())))?;
            }
        }
        Ok(())
    }
}

/// A unique suffix for a new store's directory.
fn tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}

/// The directory of the restore of the snapshot of `height` with root `root`.
fn restore_name(height: u64, root: &Digest) -> String {
    format!("restore-{height}-{}", hex::encode(&root[..8]))
}

/// Whether `name` is a restore's directory name (`restore-<digits>-<16 hex digits>`).
fn is_restore_name(name: &str) -> bool {
    let Some((height, root)) = name.strip_prefix("restore-").and_then(|r| r.split_once('-')) else {
        return false;
    };
    !height.is_empty()
        && height.bytes().all(|b| b.is_ascii_digit())
        && root.len() == 16
        && root.bytes().all(|b| b.is_ascii_hexdigit())
}

fn valid_name(name: &str) -> bool {
    name.starts_with("state-")
        && !name.contains('/')
        && name.len() < 100
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_switches_atomically_and_open_finds_it() {
        let dir = std::env::temp_dir().join(format!("bavl-abci-home-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let opts = Options::default();
        let (home, mut store) = Home::open(&dir, &opts).unwrap();
        store.insert(b"a", b"1").unwrap();
        store.commit().unwrap();
        let old = home.current().unwrap();
        drop(store);
        let mut tree = Tree::new();
        tree.insert(b"b", b"2").unwrap();
        let root = tree.root_hash();
        let store = home.install(&mut tree, 7, &opts).unwrap();
        assert_eq!((store.version(), store.root()), (7, root));
        assert!(!old.exists());
        drop(store);
        // A leftover of an interrupted restore is removed at the next open.
        fs::create_dir_all(dir.join("state-9-dead")).unwrap();
        let (_, mut store) = Home::open(&dir, &opts).unwrap();
        assert_eq!((store.version(), store.get(b"b").unwrap()), (7, Some(&b"2"[..])));
        assert!(!dir.join("state-9-dead").exists());
        fs::write(dir.join(CURRENT), "../etc\n").unwrap();
        assert!(matches!(Home::open(&dir, &opts), Err(HomeError::BadCurrent { .. })));
        fs::remove_dir_all(&dir).unwrap();
    }
}
