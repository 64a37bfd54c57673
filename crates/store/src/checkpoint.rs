//! Checkpoint files: one retained version written whole, as its self-verifiable chunks.
//!
//! A checkpoint is the exported chunks of a snapshot (`Snapshot::export_chunk`, each
//! carrying its proof against the root), framed by a header and a trailer. Reading one
//! back verifies every chunk against the root in the header and rebuilds the identical
//! tree with `Restore`, so any damage is detected, whatever bytes it hits. Byte layout:
//! `docs/design.md` §8.3.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bavl_core::{Digest, Restore, Sha256, Snapshot, Tree};

use crate::backend::{Backend, WriteFile};
use crate::error::{IoContext, StoreError};
use crate::meta::{checkpoint_name, TMP_SUFFIX};
use crate::pace::{Pacer, SLICE_BYTES};
use crate::paging::PageSet;

const MAGIC: &[u8; 8] = b"BAVLCKP1";
const END_MAGIC: &[u8; 8] = b"BAVLEND1";
/// Length of a checkpoint's header.
pub const HEADER_LEN: usize = 8 + 8 + 32 + 4 + 8 + 8 + 4;
/// Length of a checkpoint's trailer.
pub const TRAILER_LEN: usize = 8 + 8 + 4;

/// A checkpoint's header. A file being filled (by `bavl sync`) starts with the counts at
/// zero and gets its final header when complete.
pub fn encode_header(
    version: u64,
    root: &Digest,
    capacity: u32,
    keys: u64,
    chunks: u64,
) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&version.to_le_bytes());
    header.extend_from_slice(root);
    header.extend_from_slice(&capacity.to_le_bytes());
    header.extend_from_slice(&keys.to_le_bytes());
    header.extend_from_slice(&chunks.to_le_bytes());
    let crc = crc32fast::hash(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    header
}

/// The version and root a header names, if it is a checkpoint header with a valid
/// checksum (whatever its counts).
pub fn decode_header_identity(bytes: &[u8]) -> Option<(u64, Digest)> {
    let h = bytes.get(..HEADER_LEN)?;
    if &h[..8] != MAGIC
        || crc32fast::hash(&h[..HEADER_LEN - 4]).to_le_bytes() != h[HEADER_LEN - 4..]
    {
        return None;
    }
    Some((u64::from_le_bytes(h[8..16].try_into().ok()?), h[16..48].try_into().ok()?))
}

/// The framing of one chunk record: its length, then the exported chunk.
pub fn record_prefix(chunk: &[u8]) -> [u8; 4] {
    (chunk.len() as u32).to_le_bytes()
}

/// A checkpoint's trailer.
pub fn encode_trailer(chunks: u64) -> Vec<u8> {
    let mut trailer = END_MAGIC.to_vec();
    trailer.extend_from_slice(&chunks.to_le_bytes());
    let crc = crc32fast::hash(&trailer);
    trailer.extend_from_slice(&crc.to_le_bytes());
    trailer
}

/// What writing a checkpoint did.
#[derive(Debug, Clone)]
pub struct CheckpointReport {
    pub version: u64,
    pub root: Digest,
    pub chunks: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Of which encoding, the time the snapshot was held.
    pub encoding: Duration,
}

/// How far a paced checkpoint's encoding may run ahead of the bytes handed to the disk.
///
/// The encoding goes to the file (the page cache) as fast as it is made, so the snapshot
/// is held only while it is encoded; the paced writeback follows behind. Up to this lead
/// nothing waits. It stays well below the kernel's threshold for background writeback
/// (`vm.dirty_background_ratio`, 10% of the available memory by default, 2.3 GB on the
/// 24 GiB machines measured here), beyond which the kernel would write the file back in
/// one burst itself. A larger checkpoint (over about 4M Workload B keys) paces its
/// encoding too, and holds its snapshot for that part of its writeback.
pub const MAX_LEAD: u64 = 512 << 20;

/// The checkpoint file being written, and how much of it was handed to the disk.
struct Out<'a> {
    file: Box<dyn WriteFile>,
    tmp: &'a str,
    pacer: Option<&'a Pacer>,
    written: u64,
    handed: u64,
}

impl Out<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.file
            .write_all(bytes)
            .map_err(|e| StoreError::io(format!("writing {}", self.tmp), e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Waits for the pacer's leave to hand the next slice of what was written to the
    /// disk (of a file of about `total` bytes), and hands it; false if `stop` was set.
    fn hand_one(&mut self, total: u64, stop: &AtomicBool) -> bool {
        let Some(pacer) = self.pacer else { return true };
        pacer.wait(self.handed, total, stop);
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let len = SLICE_BYTES.min(self.written - self.handed);
        self.file.start_writeback(self.handed, len);
        self.handed += len;
        true
    }
}

/// Writes `snap` as the checkpoint of `version` to a temporary file, synced, renamed into
/// place. If `stop` becomes true the write is abandoned (`Ok(None)`).
///
/// The snapshot is encoded straight into the file (its chunks exported into one reused
/// buffer of about [`SLICE_BYTES`]) and then let go: a held version keeps every chunk the
/// writer replaces meanwhile alive, and the writer's copies then land in memory it has
/// not just recycled (`docs/design.md` §8.7). With a `pacer`, the file then goes to the
/// disk slice by slice in step with the log ([`WriteFile::start_writeback`], which
/// neither waits nor syncs the journal), is synced once at the end, and is renamed only
/// when no retained version is older than `version` ([`Pacer::wait_install`]).
///
pub fn write(
    backend: &dyn Backend,
    version: u64,
    snap: Snapshot,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
) -> Result<Option<CheckpointReport>, StoreError> {
    write_with_lead(backend, version, snap, stop, pacer, MAX_LEAD, None)
}

/// [`write`] of a paged store's version: its absent chunks are read back from `pages`
/// (each verified against its page) as they are exported.
pub(crate) fn write_paged(
    backend: &dyn Backend,
    version: u64,
    snap: Snapshot,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
    pages: Option<&PageSet>,
) -> Result<Option<CheckpointReport>, StoreError> {
    write_with_lead(backend, version, snap, stop, pacer, MAX_LEAD, pages)
}

fn write_with_lead(
    backend: &dyn Backend,
    version: u64,
    snap: Snapshot,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
    lead: u64,
    pages: Option<&PageSet>,
) -> Result<Option<CheckpointReport>, StoreError> {
    let start = Instant::now();
    let name = checkpoint_name(version);
    let tmp = format!("{name}{TMP_SUFFIX}");
    let file = backend.create(&tmp).ctx(|| format!("creating {tmp}"))?;
    // Only a paced checkpoint hands its file over slice by slice; any pacer still decides
    // when the file may be installed (below).
    let paced = pacer.filter(|p| p.sliced());
    let mut out = Out { file, tmp: &tmp, pacer: paced, written: 0, handed: 0 };
    let abandon = |out: Out| {
        drop(out);
        let _ = backend.remove(&tmp);
        Ok(None)
    };

    let count = snap.chunk_count();
    let root = snap.root_hash();
    let mut buf = Vec::with_capacity(SLICE_BYTES as usize + (64 << 10));
    buf.extend_from_slice(&encode_header(version, &root, snap.capacity(), snap.len(), count));
    for i in 0..count {
        if i % 256 == 0 && stop.load(Ordering::Relaxed) {
            return abandon(out);
        }
        let at = buf.len();
        buf.extend_from_slice(&[0; 4]);
        let loaded;
        let from = match pages.and_then(|pf| Some((pf, snap.absent_chunk(i)?))) {
            Some((pf, page)) => {
                loaded = pf.materialize(&snap, &[page])?;
                &loaded
            }
            None => &snap,
        };
        if let Err(e) = from.export_chunk_into(i, &mut buf) {
            return Err(StoreError::InvalidOption(format!(
                "chunk {i} of version {version} cannot be written ({e}) and there is no page file"
            )));
        }
        let len = (buf.len() - at - 4) as u32;
        buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        if buf.len() as u64 >= SLICE_BYTES {
            out.write(&buf)?;
            buf.clear();
            // A checkpoint larger than the lead paces its encoding as well, against the
            // size its encoding so far suggests.
            while out.written - out.handed > lead {
                let total = (out.written as u128 * count as u128 / (i + 1) as u128) as u64;
                if !out.hand_one(total.max(out.written), stop) {
                    return abandon(out);
                }
            }
        }
    }
    drop(snap);
    buf.extend_from_slice(&encode_trailer(count));
    out.write(&buf)?;
    drop(buf);
    let encoding = start.elapsed();

    while out.pacer.is_some() && out.handed < out.written {
        if !out.hand_one(out.written, stop) {
            return abandon(out);
        }
    }
    if stop.load(Ordering::Relaxed) {
        return abandon(out);
    }
    out.file.sync().ctx(|| format!("syncing {tmp}"))?;
    let bytes = out.written;
    drop(out);
    if !install(backend, &tmp, &name, version, stop, pacer)? {
        return Ok(None);
    }
    Ok(Some(CheckpointReport {
        version,
        root,
        chunks: count,
        bytes,
        elapsed: start.elapsed(),
        encoding,
    }))
}

/// The header of a checkpoint file.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub version: u64,
    pub root: Digest,
    pub capacity: u32,
    pub keys: u64,
    pub chunks: u64,
}

/// Reads the header of the checkpoint file at `path` (nothing else: the chunks are
/// verified when the store opens). A header with zero counts (a file still being filled)
/// or one that does not check is `Corrupted`.
pub fn read_header_file(path: &std::path::Path) -> Result<Header, StoreError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).ctx(|| format!("opening {name}"))?;
    header_of(f, &name)
}

/// Reads the header of the store's checkpoint `name` (nothing else).
pub fn read_header(backend: &dyn Backend, name: &str) -> Result<Header, StoreError> {
    let f = backend.open_read(name).ctx(|| format!("opening {name}"))?;
    header_of(f, name)
}

fn header_of(mut f: impl Read, name: &str) -> Result<Header, StoreError> {
    let mut h = [0u8; HEADER_LEN];
    f.read_exact(&mut h).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => StoreError::corrupted(name, 0, "shorter than a header"),
        _ => StoreError::io(format!("reading {name}"), e),
    })?;
    let header = parse_header(&h).ok_or_else(|| {
        StoreError::corrupted(name, 0, "not a checkpoint header, or its checksum fails")
    })?;
    if header.capacity == 0 {
        return Err(StoreError::corrupted(name, 48, "the header's counts are not filled in"));
    }
    Ok(header)
}

fn parse_header(h: &[u8; HEADER_LEN]) -> Option<Header> {
    let (version, root) = decode_header_identity(h)?;
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
    Some(Header {
        version,
        root,
        capacity: u32::from_le_bytes(h[48..52].try_into().expect("4")),
        keys: u64_at(52),
        chunks: u64_at(60),
    })
}

/// Reads and verifies the checkpoint `name`, rebuilding its tree. Every chunk is checked
/// against the header's root; any mismatch, truncation or malformation is `Corrupted`.
/// The chunks may come in any order (a store writes them in index order, `bavl sync` as
/// they arrived): each one's index is derived from its proof, and a duplicate is
/// `Corrupted` like a missing one.
pub fn read(backend: &dyn Backend, name: &str) -> Result<(Header, Tree), StoreError> {
    let mut restore = None;
    let header = read_chunks(backend, name, |header, verified, offset, i| {
        let r = restore.get_or_insert_with(|| Restore::<Sha256>::new(header.root));
        r.add_verified(verified)
            .map(drop)
            .map_err(|e| StoreError::corrupted(name, offset, format!("chunk record {i}: {e}")))
    })?;
    let restore = restore.unwrap_or_else(|| Restore::<Sha256>::new(header.root));
    let corrupt = |offset: u64, what: &str| StoreError::corrupted(name, offset, what.to_string());
    let mut tree = restore
        .finish(header.capacity)
        .map_err(|e| corrupt(HEADER_LEN as u64, &format!("rebuilding: {e}")))?;
    if tree.capacity() != header.capacity || tree.len() != header.keys {
        return Err(corrupt(0, "header's capacity or key count differs from the chunks"));
    }
    debug_assert_eq!(tree.root_hash(), header.root);
    Ok((header, tree))
}

/// Reads checkpoint `name` record by record: the header, every chunk verified against
/// the header's root and handed to `each` (with its offset and record number), the
/// trailer. Any mismatch, truncation or malformation is `Corrupted`.
pub(crate) fn read_chunks(
    backend: &dyn Backend,
    name: &str,
    mut each: impl FnMut(&Header, bavl_core::VerifiedChunk, u64, u64) -> Result<(), StoreError>,
) -> Result<Header, StoreError> {
    let len = backend.file_len(name).ctx(|| format!("reading {name}"))?;
    let r = backend.open_read(name).ctx(|| format!("opening {name}"))?;
    let mut r = io::BufReader::with_capacity(1 << 20, r);
    let corrupt = |offset: u64, what: &str| StoreError::corrupted(name, offset, what.to_string());
    let mut read_exact = |buf: &mut [u8], offset: u64| -> Result<(), StoreError> {
        r.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => corrupt(offset, "file ends early (truncated)"),
            _ => StoreError::io(format!("reading {name}"), e),
        })
    };
    let mut h = [0u8; HEADER_LEN];
    read_exact(&mut h, 0)?;
    if &h[..8] != MAGIC {
        return Err(corrupt(0, "bad checkpoint magic"));
    }
    let header = parse_header(&h)
        .ok_or_else(|| corrupt(HEADER_LEN as u64 - 4, "checkpoint header checksum mismatch"))?;
    let mut offset = HEADER_LEN as u64;
    let mut chunk = Vec::new();
    for i in 0..header.chunks {
        let mut l = [0u8; 4];
        read_exact(&mut l, offset)?;
        let clen = u32::from_le_bytes(l) as u64;
        if clen > len.saturating_sub(offset + 4) {
            return Err(corrupt(offset, "chunk length runs past the end of the file"));
        }
        chunk.resize(clen as usize, 0);
        read_exact(&mut chunk, offset + 4)?;
        let verified = bavl_core::verify_chunk_unindexed::<Sha256>(&header.root, &chunk)
            .map_err(|e| corrupt(offset + 4, &format!("chunk record {i}: {e}")))?;
        each(&header, verified, offset + 4, i)?;
        offset += 4 + clen;
    }
    let mut t = [0u8; TRAILER_LEN];
    read_exact(&mut t, offset)?;
    if &t[..8] != END_MAGIC
        || t[8..16] != header.chunks.to_le_bytes()
        || crc32fast::hash(&t[..16]).to_le_bytes() != t[16..]
    {
        return Err(corrupt(offset, "bad checkpoint trailer"));
    }
    if offset + TRAILER_LEN as u64 != len {
        return Err(corrupt(offset + TRAILER_LEN as u64, "bytes after the trailer"));
    }
    Ok(header)
}

/// Installs a written and synced file `tmp` as `name` once the pacer allows (a rename and
/// a sync of the directory); false, with `tmp` removed, if `stop` became true first.
pub(crate) fn install(
    backend: &dyn Backend,
    tmp: &str,
    name: &str,
    version: u64,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
) -> Result<bool, StoreError> {
    if let Some(p) = pacer {
        p.wait_install(version, stop);
    }
    if stop.load(Ordering::Relaxed) {
        let _ = backend.remove(tmp);
        return Ok(false);
    }
    backend.rename(tmp, name).ctx(|| format!("renaming {tmp} to {name}"))?;
    backend.sync_dir().ctx(|| format!("syncing the directory after writing {name}"))?;
    Ok(true)
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
