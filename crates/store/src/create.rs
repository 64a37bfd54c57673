//! Making a new store from a state obtained elsewhere (`bavl sync`): from a tree in
//! memory, or by adopting a complete checkpoint file. Both refuse a directory that
//! already holds a store.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use bavl_core::Tree;

use crate::error::IoContext;
use crate::{checkpoint, meta, open, Backend, DirBackend, Store, StoreError};

impl Store {
    /// Writes `tree` as a new store at `dir` whose only version is `version` (a state
    /// synced from peers, for example): the metadata, a checkpoint of the tree at
    /// `version` and `HEAD`, each synced, in the formats `Store::open` reads. The store
    /// then opens at `version` with the tree's root, and commits continue at
    /// `version + 1`. `dir` must not hold a store (it may be missing or empty); on error,
    /// what was written is left for the caller to remove (write into a fresh directory
    /// and rename it into place for an atomic result).
    pub fn create_from_tree(
        dir: impl AsRef<Path>,
        tree: &mut Tree,
        version: u64,
    ) -> Result<(), StoreError> {
        let dir = dir.as_ref();
        let backend =
            DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        ensure_no_store(&backend, dir)?;
        meta::write_meta(&backend, meta::Meta { capacity: tree.capacity() })?;
        let never = AtomicBool::new(false);
        checkpoint::write(&backend, version, tree.snapshot(), &never, None)?;
        meta::write_head(&backend, version)
    }

    /// Makes a new store at `dir` whose only version is `version`, from a complete
    /// checkpoint file written elsewhere (by `bavl sync`, which fills one as chunks arrive
    /// and verify, in arrival order): writes the metadata, moves `file` into `dir` as the
    /// checkpoint of `version` (a rename, or a copy across file systems), then `HEAD`,
    /// each synced. Only the file's header is read here (it must be a checkpoint of
    /// `version`); the caller vouches for the chunks, and `Store::open` verifies every one
    /// against the header's root anyway. `dir` must not hold a store; on error, what was
    /// written is left for the caller to remove.
    pub fn adopt_checkpoint(
        dir: impl AsRef<Path>,
        file: impl AsRef<Path>,
        version: u64,
    ) -> Result<(), StoreError> {
        let (dir, file) = (dir.as_ref(), file.as_ref());
        let backend =
            DirBackend::open(dir).ctx(|| format!("opening the store at {}", dir.display()))?;
        ensure_no_store(&backend, dir)?;
        let header = checkpoint::read_header_file(file)?;
        if header.version != version {
            return Err(StoreError::corrupted(
                &file.display().to_string(),
                8,
                format!("a checkpoint of version {}, not {version}", header.version),
            ));
        }
        meta::write_meta(&backend, meta::Meta { capacity: header.capacity })?;
        let target = dir.join(meta::checkpoint_name(version));
        if let Err(e) = std::fs::rename(file, &target) {
            if e.kind() != std::io::ErrorKind::CrossesDevices {
                return Err(StoreError::io(format!("moving {} into the store", file.display()), e));
            }
            // Another file system: copy, sync, then remove the original.
            std::fs::copy(file, &target)
                .and_then(|_| std::fs::File::open(&target)?.sync_all())
                .and_then(|()| std::fs::remove_file(file))
                .ctx(|| format!("copying {} into the store", file.display()))?;
        }
        backend.sync_dir().ctx(|| format!("syncing {}", dir.display()))?;
        meta::write_head(&backend, version)
    }
}

/// Refuses a directory that already holds (part of) a store.
fn ensure_no_store(backend: &DirBackend, dir: &Path) -> Result<(), StoreError> {
    let l = open::list(backend)?;
    if l.names.iter().any(|n| n == meta::META_FILE || n == meta::HEAD_FILE)
        || !l.checkpoints.is_empty()
        || !l.segments.is_empty()
    {
        return Err(StoreError::InvalidOption(format!("{} already holds a store", dir.display())));
    }
    Ok(())
}
