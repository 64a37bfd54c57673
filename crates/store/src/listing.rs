//! The files of a store directory, sorted by kind ([`list`]), and its metadata checked
//! against the options it is opened with ([`meta_for`]).

use bavl_core::{Tree, DEFAULT_CAPACITY};

use crate::backend::Backend;
use crate::durable::ChunkFiles;
use crate::error::{IoContext, StoreError};
use crate::meta::{self, classify, is_own_temporary, FileKind, Meta};
use crate::Options;

/// The store's files, sorted by kind.
pub(crate) struct Listing {
    pub names: Vec<String>,
    /// The versions of the checkpoints: full ones and skeletons (`skeletons`).
    pub checkpoints: Vec<u64>,
    pub skeletons: std::collections::BTreeSet<u64>,
    /// Chunk files (of a paged store's checkpoints) and their lengths.
    pub chunk_files: ChunkFiles,
    pub segments: Vec<u64>,
    pub temporary: Vec<String>,
    pub unknown: Vec<String>,
}

pub(crate) fn list(backend: &dyn Backend) -> Result<Listing, StoreError> {
    let names = backend.list().ctx(|| format!("listing {}", backend.describe()))?;
    // Never a store while an ingest is unfinished (`docs/design.md` §8.8).
    if names.iter().any(|n| n == crate::ingest::JOURNAL_FILE) {
        return Err(crate::ingest::refusal(backend));
    }
    let mut l = Listing {
        checkpoints: Vec::new(),
        skeletons: Default::default(),
        chunk_files: Default::default(),
        segments: Vec::new(),
        temporary: Vec::new(),
        unknown: Vec::new(),
        names: Vec::new(),
    };
    for name in &names {
        match classify(name) {
            FileKind::Checkpoint(v) => l.checkpoints.push(v),
            FileKind::Skeleton(v) => {
                l.checkpoints.push(v);
                l.skeletons.insert(v);
            }
            FileKind::Chunks(id) => {
                let len = backend.file_len(name).ctx(|| format!("reading {name}"))?;
                l.chunk_files.insert(id, len);
            }
            FileKind::Wal(v) => l.segments.push(v),
            FileKind::Temporary if is_own_temporary(name) => l.temporary.push(name.clone()),
            FileKind::Temporary => l.unknown.push(name.clone()),
            FileKind::Unknown => l.unknown.push(name.clone()),
            FileKind::Meta | FileKind::Head => {}
        }
    }
    l.checkpoints.sort_unstable();
    l.checkpoints.dedup();
    l.segments.sort_unstable();
    l.names = names;
    Ok(l)
}

impl Listing {
    /// Whether the directory holds any of a store's data files (checkpoints, skeletons,
    /// chunk files, log segments).
    pub fn has_data(&self) -> bool {
        !self.checkpoints.is_empty() || !self.segments.is_empty() || !self.chunk_files.is_empty()
    }

    /// The file of the checkpoint of version `v`: a skeleton or a full checkpoint.
    pub fn state_name(&self, v: u64) -> String {
        match self.skeletons.contains(&v) {
            true => meta::skeleton_name(v),
            false => meta::checkpoint_name(v),
        }
    }
}

/// `bavl.meta` missing beside data files: damage of the store, named against it.
fn missing_meta() -> StoreError {
    StoreError::corrupted(meta::META_FILE, 0, "missing, but data files exist")
}

/// Reads the metadata of an existing store (a read-only open, `check`): missing while
/// data files exist is damage naming it, as for a writable open; an unreadable one is
/// what [`meta::read_meta`] says (a length or checksum wrong is damage too).
pub(crate) fn existing_meta(backend: &dyn Backend, l: &Listing) -> Result<Meta, StoreError> {
    if l.has_data() && !l.names.iter().any(|n| n == meta::META_FILE) {
        return Err(missing_meta());
    }
    meta::read_meta(backend)
}

/// Reads or creates the metadata; checks it against the options.
pub(crate) fn meta_for(
    backend: &dyn Backend,
    l: &Listing,
    opts: &Options,
) -> Result<Meta, StoreError> {
    if !l.names.iter().any(|n| n == meta::META_FILE) {
        if l.has_data() {
            return Err(missing_meta());
        }
        // Only an empty directory becomes a store: nothing of another program's is
        // created, deleted or overwritten (left-over temporaries of an interrupted
        // creation of this store are the store's own).
        if !l.unknown.is_empty() || l.names.iter().any(|n| classify(n) == FileKind::Head) {
            let mut theirs: Vec<&str> = l.unknown.iter().map(String::as_str).collect();
            theirs.sort_unstable();
            let shown = theirs.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            return Err(StoreError::InvalidOption(format!(
                "{} is neither empty nor a bavl store (it holds {shown}{}): refusing to \
                 create a store there",
                backend.describe(),
                if theirs.len() > 3 { ", ..." } else { "" }
            )));
        }
        let meta = Meta { capacity: opts.capacity.unwrap_or(DEFAULT_CAPACITY) };
        Tree::with_capacity(meta.capacity)?;
        meta::write_meta(backend, meta)?;
        return Ok(meta);
    }
    let meta = meta::read_meta(backend)?;
    if let Some(c) = opts.capacity {
        if c != meta.capacity {
            return Err(StoreError::InvalidOption(format!(
                "the store has chunk capacity {}, not {c}",
                meta.capacity
            )));
        }
    }
    Ok(meta)
}
