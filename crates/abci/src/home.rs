//! The application's directory: which store is live, switched atomically by a restore.
//!
//! ```text
//! <home>/CURRENT          the live store's directory name and a newline
//! <home>/state-<h>-<tag>/ a bavl store; <h> is the height it was created at
//! ```
//!
//! `CURRENT` is replaced by [`bavl_store::write_file_atomic`] (write to a temporary, fsync,
//! rename, fsync of the directory), so after a crash it names either the old store or the
//! new one, never a half-written one.
//! A restore writes the new store completely (synced) before switching, and the old
//! directory is deleted only after the switch; [`Home::open`] deletes any other `state-*`
//! directory (what an interrupted restore or deletion left).

use std::fs;
use std::path::{Path, PathBuf};

use bavl_core::Tree;
use bavl_store::{Options, Store, StoreError};

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
        let tag = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("state-{height}-{tag:x}");
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
