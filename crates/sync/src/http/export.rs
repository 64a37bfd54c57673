//! The static export: a version's manifest and chunks written as files at exactly the
//! paths of the HTTP API, so any plain file server, object store or CDN serving the
//! directory is a source.
//!
//! `DIR/v1/snapshots/index.json` lists every version exported into `DIR` (an existing
//! listing is merged with the new version); `DIR/v1/snapshots/V/manifest.json`;
//! `DIR/v1/chunks/<root>/<i>`. Each file is written to a temporary name and renamed, the
//! chunks first and the listing last, so a server never shows a version whose files are
//! not all in place. The manifest and the listing, the files an export replaces, are
//! written by [`bavl_store::write_file_atomic`] (file synced, renamed, directory synced),
//! after the chunks' directories are synced. The chunk files themselves are not synced
//! one by one (an fsync per chunk made the demo's export of 100,000 keys take 5.8 s, a
//! million keys about a minute): after a power cut, a listed version may lack chunk
//! files or hold short ones. That costs availability, not safety: a client verifies
//! every chunk against the root and drops a source that serves a wrong one.
//!
//! [`ExportDir`] serves such a directory with the crate's own server (`bavl serve --dir`).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bavl_core::{Digest, Snapshot};

use super::server::Objects;

use crate::protocol::{self, ChunkLoader, ListedSnapshot, Listing, Manifest, PROTOCOL_VERSION};

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct ExportReport {
    pub manifest: Manifest,
    /// Files and bytes written (chunks, manifest, listing).
    pub files: u64,
    pub bytes: u64,
}

/// Writes `snap` as `version` below `out`. `on_chunk(i)` is called after each chunk.
pub fn export(
    snap: &Snapshot,
    version: u64,
    out: &Path,
    on_chunk: &mut dyn FnMut(u64),
) -> io::Result<ExportReport> {
    export_loading(snap, version, out, None, on_chunk)
}

/// [`export`] of a version whose absent chunks (a paged store's) `load` reads back, one
/// at a time: the version is never loaded whole.
pub fn export_loading(
    snap: &Snapshot,
    version: u64,
    out: &Path,
    load: Option<&ChunkLoader>,
    on_chunk: &mut dyn FnMut(u64),
) -> io::Result<ExportReport> {
    let root = snap.root_hash();
    let mut report = ExportReport {
        manifest: Manifest {
            format: PROTOCOL_VERSION,
            version,
            root: hex::encode(root),
            capacity: snap.capacity(),
            chunk_count: snap.chunk_count(),
            key_count: snap.len(),
            chunk_sizes: Vec::with_capacity(snap.chunk_count() as usize),
        },
        files: 0,
        bytes: 0,
    };
    let chunk_dir = file(out, &protocol::chunk_path(&root, 0)).parent().unwrap_or(out).to_owned();
    fs::create_dir_all(&chunk_dir)?;
    for i in 0..snap.chunk_count() {
        let count = snap.chunk_count();
        let chunk = protocol::export_chunk(snap, i, load)?.ok_or_else(|| {
            io::Error::other(bavl_core::ChunkError::OutOfRange { index: i, count })
        })?;
        write_chunk(&file(out, &protocol::chunk_path(&root, i)), &chunk)?;
        report.manifest.chunk_sizes.push(chunk.len() as u64);
        report.files += 1;
        report.bytes += chunk.len() as u64;
        on_chunk(i);
    }
    // The chunks' names, and the directories made for them, durable before the manifest.
    for dir in chunk_dir.ancestors().take_while(|d| d.starts_with(out)) {
        sync_dir(dir)?;
    }
    let manifest_path = file(out, &protocol::manifest_path(version));
    fs::create_dir_all(manifest_path.parent().unwrap_or(out))?;
    let json = report.manifest.to_json();
    bavl_store::write_file_atomic(&manifest_path, &json)?;
    // The listing's directory holds the manifest's: syncing it (below) makes that durable.
    let listing = merged_listing(out, version, &report.manifest)?;
    bavl_store::write_file_atomic(&file(out, &protocol::listing_path()), &listing)?;
    report.files += 2;
    report.bytes += (json.len() + listing.len()) as u64;
    Ok(report)
}

/// A directory written by [`export`], served by a [`super::Server`]: every object is read
/// from its file when asked (the page cache is shared by every process serving it).
#[derive(Debug, Clone)]
pub struct ExportDir {
    dir: PathBuf,
}

impl ExportDir {
    /// Serves `dir`; fails unless it holds a listing.
    pub fn open(dir: &Path) -> io::Result<ExportDir> {
        let listing = file(dir, &protocol::listing_path());
        Listing::decode(&fs::read(&listing)?).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", listing.display()))
        })?;
        Ok(ExportDir { dir: dir.to_path_buf() })
    }

    /// The versions listed, oldest first.
    pub fn versions(&self) -> io::Result<Vec<u64>> {
        let l = Listing::decode(&self.listing()?).map_err(io::Error::other)?;
        Ok(l.snapshots.iter().map(|s| s.version).collect())
    }

    fn read(&self, api_path: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(file(&self.dir, api_path)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Objects for ExportDir {
    fn listing(&self) -> io::Result<Vec<u8>> {
        self.read(&protocol::listing_path())?.ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn manifest(&self, version: u64) -> io::Result<Option<Arc<Vec<u8>>>> {
        Ok(self.read(&protocol::manifest_path(version))?.map(Arc::new))
    }

    fn chunk(&self, root: &Digest, index: u64) -> io::Result<Option<Vec<u8>>> {
        self.read(&protocol::chunk_path(root, index))
    }
}

/// The file below `out` for an API path.
fn file(out: &Path, api_path: &str) -> PathBuf {
    out.join(api_path.trim_start_matches('/'))
}

/// The listing already in `out` (if it decodes) with this version added or replaced.
fn merged_listing(out: &Path, version: u64, m: &Manifest) -> io::Result<Vec<u8>> {
    let existing = match fs::read(file(out, &protocol::listing_path())) {
        Ok(bytes) => Listing::decode(&bytes).ok(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut snapshots = existing.map_or_else(Vec::new, |l| l.snapshots);
    snapshots.retain(|s| s.version != version);
    snapshots.push(ListedSnapshot { version, root: m.root.clone(), chunk_count: m.chunk_count });
    snapshots.sort_by_key(|s| s.version);
    let listing = Listing { format: PROTOCOL_VERSION, snapshots };
    serde_json::to_vec(&listing).map_err(io::Error::other)
}

/// A new chunk file: written under a temporary name and renamed, not synced (see the
/// module's documentation; its directory is synced once, after every chunk:
/// [`sync_dir`]). Chunk files are never replaced by other bytes (their path names the
/// root).
fn write_chunk(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp-export");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    fs::rename(&tmp, path)
}

/// Makes the names in `dir` durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
