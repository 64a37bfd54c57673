//! File names, the small framed files (`bavl.meta`, `HEAD`) and atomic replacement.

use std::io::Read;

use crate::backend::Backend;
use crate::error::{IoContext, StoreError};

/// The store's metadata file: format, hash function and chunk capacity.
pub const META_FILE: &str = "bavl.meta";
/// The durable-version marker (see `docs/design.md` §8.2).
pub const HEAD_FILE: &str = "HEAD";
/// Suffix of files being written; left-over ones of the store's own are deleted by a writable open.
pub const TMP_SUFFIX: &str = ".tmp";

const META_MAGIC: &[u8; 8] = b"BAVLMETA";
const HEAD_MAGIC: &[u8; 8] = b"BAVLHEAD";
/// On-disk format of the store's files.
pub const STORE_FORMAT: u32 = 1;
/// Hash function identifier: SHA-256.
pub const HASH_SHA256: u8 = 1;

/// Name of the log segment whose first record is `first_version`.
pub fn wal_name(first_version: u64) -> String {
    format!("wal-{first_version:020}.log")
}
/// Name of the checkpoint of `version`.
pub fn checkpoint_name(version: u64) -> String {
    format!("ckpt-{version:020}.bavl")
}

/// Name of the skeleton of a paged store's checkpoint of `version` (`docs/design.md`
/// §8.5.1).
pub fn skeleton_name(version: u64) -> String {
    format!("skel-{version:020}.bavl")
}
/// Name of a paged store's chunk file number `id`.
pub fn chunk_file_name(id: u64) -> String {
    format!("chunks-{id:020}.bavl")
}

/// What kind of store file a name is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileKind {
    Meta,
    Head,
    Wal(u64),
    Checkpoint(u64),
    /// A paged store's checkpoint: the skeleton of a version.
    Skeleton(u64),
    /// A paged store's file of chunk bodies, by number.
    Chunks(u64),
    Temporary,
    Unknown,
}

/// Whether `name` is a temporary file of the store's own (`bavl.meta.tmp`,
/// `wal-….log.tmp`, …): the only `*.tmp` files opening deletes.
pub fn is_own_temporary(name: &str) -> bool {
    name.strip_suffix(TMP_SUFFIX)
        .is_some_and(|stem| !matches!(classify(stem), FileKind::Unknown | FileKind::Temporary))
}

/// What kind of store file `name` is.
pub fn classify(name: &str) -> FileKind {
    let num = |s: &str| (s.len() == 20).then(|| s.parse::<u64>().ok()).flatten();
    if name == META_FILE {
        FileKind::Meta
    } else if name == HEAD_FILE {
        FileKind::Head
    } else if name.ends_with(TMP_SUFFIX) {
        FileKind::Temporary
    } else if let Some(v) = name.strip_prefix("wal-").and_then(|s| s.strip_suffix(".log")) {
        num(v).map_or(FileKind::Unknown, FileKind::Wal)
    } else if let Some(v) = name.strip_prefix("ckpt-").and_then(|s| s.strip_suffix(".bavl")) {
        num(v).map_or(FileKind::Unknown, FileKind::Checkpoint)
    } else if let Some(v) = name.strip_prefix("skel-").and_then(|s| s.strip_suffix(".bavl")) {
        num(v).map_or(FileKind::Unknown, FileKind::Skeleton)
    } else if let Some(v) = name.strip_prefix("chunks-").and_then(|s| s.strip_suffix(".bavl")) {
        num(v).map_or(FileKind::Unknown, FileKind::Chunks)
    } else {
        FileKind::Unknown
    }
}

/// Writes `bytes` to `name` atomically and durably: a temporary file, synced, renamed,
/// and the directory synced. After a crash at any point, `name` holds either its old
/// bytes or all of the new ones, and once this returns the new ones survive power loss.
/// This is bavl's one atomic write: [`write_file_atomic`] serves files outside a store.
pub fn write_atomic(backend: &dyn Backend, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = format!("{name}{TMP_SUFFIX}");
    let mut f = backend.create(&tmp).ctx(|| format!("creating {tmp}"))?;
    f.write_all(bytes).ctx(|| format!("writing {tmp}"))?;
    f.sync().ctx(|| format!("syncing {tmp}"))?;
    drop(f);
    backend.rename(&tmp, name).ctx(|| format!("renaming {tmp} to {name}"))?;
    backend.sync_dir().ctx(|| format!("syncing the directory after writing {name}"))
}

/// [`write_atomic`] for any file: `path`'s directory must exist; the temporary file is
/// `path` with `.tmp` appended, beside it. The directory is not locked (the caller
/// serialises writes to `path`). Errors keep the operating system's kind (a full disk is
/// `StorageFull`) and name the step that failed.
pub fn write_file_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    };
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(invalid)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let backend = crate::backend::DirBackend::unlocked(dir)?;
    write_atomic(&backend, name, bytes).map_err(|e| match e {
        StoreError::Io { context, source } => {
            std::io::Error::new(source.kind(), format!("{}: {context}: {source}", dir.display()))
        }
        other => std::io::Error::other(other.to_string()),
    })
}

fn framed(magic: &[u8; 8], payload: &[u8]) -> Vec<u8> {
    let mut out = magic.to_vec();
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn read_framed(
    backend: &dyn Backend,
    name: &str,
    magic: &[u8; 8],
    payload_len: usize,
) -> Result<Vec<u8>, StoreError> {
    let want = magic.len() + payload_len + 4;
    let len = backend.file_len(name).ctx(|| format!("reading {name}"))?;
    if len != want as u64 {
        return Err(StoreError::corrupted(name, 0, format!("{len} bytes, expected {want}")));
    }
    let mut buf = Vec::with_capacity(want);
    backend
        .open_read(name)
        .and_then(|r| r.take(want as u64).read_to_end(&mut buf))
        .ctx(|| format!("reading {name}"))?;
    if buf.len() != want {
        return Err(StoreError::corrupted(name, buf.len() as u64, "file shorter than its length"));
    }
    if &buf[..8] != magic {
        return Err(StoreError::corrupted(name, 0, "bad magic"));
    }
    let (body, crc) = buf.split_at(want - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(StoreError::corrupted(name, (want - 4) as u64, "checksum mismatch"));
    }
    Ok(body[8..].to_vec())
}

/// The store's fixed parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub capacity: u32,
}

pub fn write_meta(backend: &dyn Backend, meta: Meta) -> Result<(), StoreError> {
    let mut p = STORE_FORMAT.to_le_bytes().to_vec();
    p.push(HASH_SHA256);
    p.extend_from_slice(&meta.capacity.to_le_bytes());
    write_atomic(backend, META_FILE, &framed(META_MAGIC, &p))
}

pub fn read_meta(backend: &dyn Backend) -> Result<Meta, StoreError> {
    let p = read_framed(backend, META_FILE, META_MAGIC, 9)?;
    let format = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
    if format != STORE_FORMAT {
        return Err(StoreError::corrupted(META_FILE, 8, format!("unknown store format {format}")));
    }
    if p[4] != HASH_SHA256 {
        return Err(StoreError::corrupted(META_FILE, 12, format!("unknown hash id {}", p[4])));
    }
    let capacity = u32::from_le_bytes([p[5], p[6], p[7], p[8]]);
    if !(bavl_core::MIN_CAPACITY..=bavl_core::MAX_CAPACITY).contains(&capacity) {
        return Err(StoreError::corrupted(META_FILE, 13, format!("capacity {capacity}")));
    }
    Ok(Meta { capacity })
}

/// Records that every version up to `version` was durably committed, so that a log
/// later found to end earlier is reported as truncated.
pub fn write_head(backend: &dyn Backend, version: u64) -> Result<(), StoreError> {
    write_atomic(backend, HEAD_FILE, &framed(HEAD_MAGIC, &version.to_le_bytes()))
}

/// `HEAD`'s writers (the committing thread, the checkpoint thread, `close`), kept in
/// order: `HEAD` only ever moves forward, and never two writes of it at once.
pub(crate) struct HeadMark {
    written: std::sync::Mutex<u64>,
}

impl HeadMark {
    /// `HEAD` as opening found it (0 if missing).
    pub fn new(written: u64) -> Self {
        HeadMark { written: std::sync::Mutex::new(written) }
    }

    /// Records `version` (already durable in the log) in `HEAD`, unless it already names
    /// that version or a later one. Without `wait`, gives up at once (`Ok(false)`) if
    /// another thread is writing it.
    pub fn advance(
        &self,
        backend: &dyn Backend,
        version: u64,
        wait: bool,
    ) -> Result<bool, StoreError> {
        let mut written = match self.written.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if !wait => return Ok(false),
            Err(std::sync::TryLockError::WouldBlock) => {
                self.written.lock().unwrap_or_else(|p| p.into_inner())
            }
        };
        if *written >= version {
            return Ok(true);
        }
        write_head(backend, version)?;
        *written = version;
        Ok(true)
    }
}

/// The version recorded in `HEAD`, if the file exists.
pub fn read_head(backend: &dyn Backend, names: &[String]) -> Result<Option<u64>, StoreError> {
    if !names.iter().any(|n| n == HEAD_FILE) {
        return Ok(None);
    }
    let p = read_framed(backend, HEAD_FILE, HEAD_MAGIC, 8)?;
    Ok(Some(u64::from_le_bytes(p.try_into().expect("8 bytes"))))
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read};

    use super::*;
    use crate::memory::Recorder;

    /// The durability argument, step by step: the new bytes are synced before the rename
    /// makes them visible, and the directory is synced after it so the rename survives
    /// power loss. Dropping or reordering any step fails this test.
    #[test]
    fn an_atomic_write_syncs_the_file_then_renames_then_syncs_the_directory() {
        let b = Recorder::new();
        write_atomic(&b, "HEAD", b"new bytes").unwrap();
        assert_eq!(
            b.ops(),
            ["create HEAD.tmp", "write", "sync", "rename HEAD.tmp HEAD", "sync_dir"],
            "the steps of an atomic write"
        );
        let mut got = Vec::new();
        b.open_read("HEAD").unwrap().read_to_end(&mut got).unwrap();
        assert_eq!(got, b"new bytes");
    }
    #[test]
    fn write_file_atomic_replaces_a_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("bavl-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("descriptor.json");
        write_file_atomic(&path, b"one").unwrap();
        write_file_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["descriptor.json"]);
        let missing = dir.join("no-such-dir").join("f");
        assert_eq!(write_file_atomic(&missing, b"x").unwrap_err().kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
