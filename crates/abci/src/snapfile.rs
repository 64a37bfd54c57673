//! A served snapshot on disk: a format-1 snapshot's bundles, written once by an export
//! and served by `pread`, so that snapshots survive a restart and serving one holds only
//! its index in memory (`docs/chain.md` §5).
//!
//! ```text
//! <home>/snapshots/snap-<height, 20 digits>.bavl
//! header  (84 bytes): "BAVLSNF1" | u64 height | u64 taken (Unix ms) | metadata[56]
//!                     | u32 CRC-32(the 80 bytes before)
//! bundles:            bundle 0 | bundle 1 | ...        the exact bytes of ABCI chunk i
//! index:              per bundle: u32 len | u32 CRC-32(bundle)
//! trailer (24 bytes): "BAVLEND1" | u64 bundles | u32 CRC-32(index) | u32 CRC-32(the 20 bytes before)
//! ```
//!
//! Integers little-endian, CRC-32 as in `docs/design.md` §8.1. Guarantees: a file is
//! written as `*.tmp`, synced, renamed into place and the directory synced
//! ([`write`]), so a name without `.tmp` is a complete file; [`SnapFile::open`] checks
//! both checksums, the metadata's shape, the bundle count against the metadata, every
//! length (at most 16 MiB, CometBFT's limit) and that the bundles fill the file exactly;
//! [`SnapFile::bundle`] checks the bundle's own checksum before it is served. The
//! checksums guard the disk only: a joiner verifies every chunk against the trusted app
//! hash whatever this node serves.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bavl_store::{Backend, DirBackend};

use crate::snapshot::{
    encode_bundle_into, plan, Metadata, Source, SourceError, MAX_BUNDLE_BYTES, METADATA_LEN,
};

const MAGIC: &[u8; 8] = b"BAVLSNF1";
const END_MAGIC: &[u8; 8] = b"BAVLEND1";
/// The header's length.
pub const HEADER_LEN: usize = 8 + 8 + 8 + METADATA_LEN + 4;
/// The trailer's length.
pub const TRAILER_LEN: usize = 8 + 8 + 4 + 4;
/// How much an export gathers before writing it and handing it to the disk.
const WRITE_BYTES: usize = 1 << 20;

/// The file name of the snapshot of `height`.
pub fn file_name(height: u64) -> String {
    format!("snap-{height:020}.bavl")
}

/// The height a snapshot file's name carries, if it is one (not a temporary).
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("snap-")?.strip_suffix(".bavl")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Errors of snapshot files.
#[derive(Debug, thiserror::Error)]
pub enum SnapFileError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{file}: {what}")]
    Corrupted { file: String, what: String },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("bundle {index} is {len} bytes, over CometBFT's 16 MiB")]
    Oversized { index: u64, len: usize },
    #[error("stopped")]
    Stopped,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SnapFileError {
    let what = what.into();
    move |source| SnapFileError::Io { what, source }
}

/// A complete snapshot file, with its index in memory (16 bytes a bundle, at most
/// 100,000 bundles).
pub struct SnapFile {
    dir: Arc<DirBackend>,
    name: String,
    pub height: u64,
    /// When the snapshot was taken (Unix ms).
    pub taken_ms: u64,
    pub meta: Metadata,
    /// Per bundle: offset in the file, length, CRC-32.
    index: Vec<(u64, u32, u32)>,
}

impl SnapFile {
    /// Opens and checks snapshot file `name` in `dir`.
    pub fn open(dir: Arc<DirBackend>, name: &str) -> Result<SnapFile, SnapFileError> {
        let bad = |what: String| SnapFileError::Corrupted { file: name.to_string(), what };
        let len = dir.file_len(name).map_err(io(format!("reading {name}")))?;
        if len < (HEADER_LEN + TRAILER_LEN) as u64 {
            return Err(bad(format!("{len} bytes: shorter than a header and a trailer")));
        }
        let mut header = [0u8; HEADER_LEN];
        dir.read_at(name, 0, &mut header).map_err(io(format!("reading {name}")))?;
        let crc_at = HEADER_LEN - 4;
        if &header[..8] != MAGIC || crc32fast::hash(&header[..crc_at]) != le32(&header[crc_at..]) {
            return Err(bad("bad header (magic or checksum)".into()));
        }
        let height = le64(&header[8..16]);
        let taken_ms = le64(&header[16..24]);
        let meta = Metadata::decode(&header[24..24 + METADATA_LEN])
            .map_err(|e| bad(format!("metadata: {e}")))?;
        if parse_name(name) != Some(height) {
            return Err(bad(format!("holds the snapshot of height {height}")));
        }
        let mut trailer = [0u8; TRAILER_LEN];
        dir.read_at(name, len - TRAILER_LEN as u64, &mut trailer)
            .map_err(io(format!("reading {name}")))?;
        if &trailer[..8] != END_MAGIC || crc32fast::hash(&trailer[..20]) != le32(&trailer[20..]) {
            return Err(bad("bad trailer (magic or checksum)".into()));
        }
        let bundles = le64(&trailer[8..16]);
        if bundles != meta.bundles() {
            return Err(bad(format!("{bundles} bundles, its metadata {}", meta.bundles())));
        }
        let body = len - (HEADER_LEN + TRAILER_LEN) as u64;
        let index_len = bundles.checked_mul(8).filter(|&l| l <= body);
        let Some(index_len) = index_len else {
            return Err(bad(format!("an index of {bundles} bundles does not fit")));
        };
        let index_at = len - TRAILER_LEN as u64 - index_len;
        let mut raw = vec![0u8; index_len as usize];
        dir.read_at(name, index_at, &mut raw).map_err(io(format!("reading {name}")))?;
        if crc32fast::hash(&raw) != le32(&trailer[16..20]) {
            return Err(bad("bad index checksum".into()));
        }
        let mut index = Vec::with_capacity(bundles as usize);
        let mut at = HEADER_LEN as u64;
        for e in raw.chunks_exact(8) {
            let (n, crc) = (le32(&e[..4]), le32(&e[4..]));
            if n as usize > MAX_BUNDLE_BYTES {
                return Err(bad(format!("bundle {} is {n} bytes", index.len())));
            }
            index.push((at, n, crc));
            at += u64::from(n);
        }
        if at != index_at {
            return Err(bad(format!("bundles end at {at}, the index starts at {index_at}")));
        }
        Ok(SnapFile { dir, name: name.to_string(), height, taken_ms, meta, index })
    }

    /// The number of bundles.
    pub fn bundles(&self) -> u64 {
        self.index.len() as u64
    }

    /// The file's name in the snapshots directory.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bundle `i`, read and checked against its checksum; `Ok(None)` past the end.
    pub fn bundle(&self, i: u64) -> Result<Option<Vec<u8>>, SnapFileError> {
        let Some(&(at, len, crc)) = usize::try_from(i).ok().and_then(|i| self.index.get(i)) else {
            return Ok(None);
        };
        let mut buf = vec![0u8; len as usize];
        self.dir.read_at(&self.name, at, &mut buf).map_err(io(format!("reading {}", self.name)))?;
        if crc32fast::hash(&buf) != crc {
            let what = format!("bundle {i} at offset {at} fails its checksum");
            return Err(SnapFileError::Corrupted { file: self.name.clone(), what });
        }
        Ok(Some(buf))
    }

    /// Deletes the file.
    pub fn remove(&self) -> Result<(), SnapFileError> {
        self.dir.remove(&self.name).map_err(io(format!("deleting {}", self.name)))
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Now, in Unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Exports `src` as the snapshot of `height` into `dir` (`*.tmp`, synced, renamed into
/// place, the directory synced) and opens it. `Ok(None)` for an empty state. Memory: one
/// MiB of gathered bytes, the bundle being encoded and the index. Checks `stop` between
/// bundles (and then leaves its temporary behind, which [`crate::snapshots`] deletes at
/// the next open). The plan is the state's alone ([`plan`]), so every honest node writes
/// the same bundles.
pub fn write(
    dir: &Arc<DirBackend>,
    height: u64,
    taken_ms: u64,
    src: &Source,
    bundle_bytes: u64,
    stop: &AtomicBool,
) -> Result<Option<SnapFile>, SnapFileError> {
    let Some(meta) = plan(src, bundle_bytes)? else { return Ok(None) };
    let name = file_name(height);
    let tmp = format!("{name}.tmp");
    let mut file = dir.create(&tmp).map_err(io(format!("creating {tmp}")))?;
    let mut out = Vec::with_capacity(WRITE_BYTES + (4 << 20));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&height.to_le_bytes());
    out.extend_from_slice(&taken_ms.to_le_bytes());
    out.extend_from_slice(&meta.encode());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    let mut written = 0u64;
    let mut index = Vec::with_capacity(meta.bundles() as usize);
    let mut raw_index = Vec::with_capacity(meta.bundles() as usize * 8);
    // Written a MiB at a time and handed to the disk at once, so the log's fdatasync of
    // a commit does not wait behind a burst of dirty pages (`docs/design.md` §8.3).
    let flush = |out: &mut Vec<u8>,
                 file: &mut Box<dyn bavl_store::WriteFile>,
                 written: &mut u64|
     -> Result<(), SnapFileError> {
        file.write_all(out).map_err(io(format!("writing {tmp}")))?;
        file.start_writeback(*written, out.len() as u64);
        *written += out.len() as u64;
        out.clear();
        Ok(())
    };
    for i in 0..meta.bundles() {
        if stop.load(Ordering::Relaxed) {
            return Err(SnapFileError::Stopped);
        }
        let at = written + out.len() as u64;
        let start = out.len();
        encode_bundle_into(src, &meta, i, &mut out)?;
        let len = out.len() - start;
        if len > MAX_BUNDLE_BYTES {
            return Err(SnapFileError::Oversized { index: i, len });
        }
        let crc = crc32fast::hash(&out[start..]);
        index.push((at, len as u32, crc));
        raw_index.extend_from_slice(&(len as u32).to_le_bytes());
        raw_index.extend_from_slice(&crc.to_le_bytes());
        if out.len() >= WRITE_BYTES {
            flush(&mut out, &mut file, &mut written)?;
        }
    }
    out.extend_from_slice(&raw_index);
    let mut trailer = END_MAGIC.to_vec();
    trailer.extend_from_slice(&meta.bundles().to_le_bytes());
    trailer.extend_from_slice(&crc32fast::hash(&raw_index).to_le_bytes());
    let crc = crc32fast::hash(&trailer);
    trailer.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&trailer);
    flush(&mut out, &mut file, &mut written)?;
    file.sync().map_err(io(format!("syncing {tmp}")))?;
    drop(file);
    dir.rename(&tmp, &name).map_err(io(format!("renaming {tmp}")))?;
    dir.sync_dir().map_err(io("syncing the snapshots directory"))?;
    let dir = dir.clone();
    Ok(Some(SnapFile { dir, name, height, taken_ms, meta, index }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bavl_core::Tree;

    fn source(keys: u32) -> Source {
        let mut t = Tree::with_capacity(8).unwrap();
        for i in 0..keys {
            t.insert(format!("key{i:06}").as_bytes(), &[i as u8; 100]).unwrap();
        }
        Source::new(t.snapshot(), None)
    }

    fn dir(name: &str) -> (std::path::PathBuf, Arc<DirBackend>) {
        let p =
            std::env::temp_dir().join(format!("bavl-abci-snapfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        let d = Arc::new(DirBackend::open(&p).unwrap());
        (p, d)
    }

    #[test]
    fn written_bundles_read_back_as_encoded_and_damage_is_caught() {
        let (path, d) = dir("roundtrip");
        let src = source(3000);
        let f = write(&d, 7, 1234, &src, 16 << 10, &AtomicBool::new(false)).unwrap().unwrap();
        assert!(f.bundles() > 3);
        let again = SnapFile::open(d.clone(), &file_name(7)).unwrap();
        assert_eq!((again.height, again.taken_ms, again.meta), (7, 1234, f.meta));
        for i in 0..f.bundles() {
            let want = crate::snapshot::encode_bundle(&src, &f.meta, i).unwrap().unwrap();
            assert_eq!(again.bundle(i).unwrap().unwrap(), want);
        }
        assert!(again.bundle(f.bundles()).unwrap().is_none());
        // A flipped byte anywhere is refused: at open (header, index, trailer) or when
        // the bundle holding it is read.
        let bytes = std::fs::read(path.join(file_name(7))).unwrap();
        for at in (0..bytes.len()).step_by(97).chain([0, 30, bytes.len() - 1]) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            std::fs::write(path.join(file_name(7)), &bad).unwrap();
            let caught = match SnapFile::open(d.clone(), &file_name(7)) {
                Err(_) => true,
                Ok(f) => (0..f.bundles()).any(|i| f.bundle(i).is_err()),
            };
            assert!(caught, "byte {at}");
        }
        // Cut short, or named for another height: refused.
        std::fs::write(path.join(file_name(7)), &bytes[..bytes.len() - 1]).unwrap();
        assert!(SnapFile::open(d.clone(), &file_name(7)).is_err());
        std::fs::write(path.join(file_name(8)), &bytes).unwrap();
        assert!(SnapFile::open(d.clone(), &file_name(8)).is_err());
        assert_eq!(parse_name(&file_name(8)), Some(8));
        assert_eq!(parse_name("snap-7.bavl"), None);
        assert_eq!(parse_name(&format!("{}.tmp", file_name(8))), None);
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_stopped_export_leaves_only_its_temporary() {
        let (path, d) = dir("stopped");
        let r = write(&d, 3, 0, &source(3000), 16 << 10, &AtomicBool::new(true));
        assert!(matches!(r, Err(SnapFileError::Stopped)));
        assert!(!path.join(file_name(3)).exists());
        assert!(write(&d, 3, 0, &source(0), 16 << 10, &AtomicBool::new(false)).unwrap().is_none());
        std::fs::remove_dir_all(&path).unwrap();
    }
}
