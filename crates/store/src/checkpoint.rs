//! Checkpoint files: one retained version written whole, as its self-verifiable chunks.
//!
//! A checkpoint is the exported chunks of a snapshot (`Snapshot::export_chunk`, each
//! carrying its proof against the root), framed by a header and a trailer. Reading one
//! back verifies every chunk against the root in the header and rebuilds the identical
//! tree with `Restore`, so any damage is detected, whatever bytes it hits. Byte layout:
//! `docs/design.md` §7.3.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bavl_core::{Digest, Restore, Sha256, Snapshot, Tree};

use crate::backend::Backend;
use crate::error::{IoContext, StoreError};
use crate::meta::{checkpoint_name, TMP_SUFFIX};
use crate::pace::{Pacer, SLICE_BYTES};

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

/// A snapshot's checkpoint, encoded in memory: the header, then the chunk records in
/// slices of about [`SLICE_BYTES`], then the trailer.
struct Encoded {
    version: u64,
    /// How long encoding took.
    took: Duration,
    root: Digest,
    chunks: u64,
    /// Header, records and trailer, in order; the header and trailer are slices of their
    /// own.
    slices: Vec<Vec<u8>>,
    bytes: u64,
}

/// Encodes `snap` as the checkpoint of `version` in memory, then drops it. `None` if
/// `stop` became true meanwhile.
///
/// A checkpoint holds its snapshot only while it encodes (about 0.3 s at 1M keys), not
/// while its bytes trickle to the disk: a held version keeps every chunk the writer
/// replaces meanwhile alive, and the writer's copies then land in memory it has not just
/// recycled, which slows its blocks by about 10% (`docs/design.md` §8.7). The encoding is
/// about half the size of the chunks in memory.
fn encode(version: u64, snap: Snapshot, stop: &AtomicBool) -> Option<Encoded> {
    let start = Instant::now();
    let count = snap.chunk_count();
    let root = snap.root_hash();
    let header = encode_header(version, &root, snap.capacity(), snap.len(), count);
    let mut bytes = header.len() as u64;
    let mut slices = vec![header];
    let mut slice = Vec::with_capacity(SLICE_BYTES as usize + (64 << 10));
    for i in 0..count {
        if i % 256 == 0 && stop.load(Ordering::Relaxed) {
            return None;
        }
        let chunk = snap.export_chunk(i).expect("index below the chunk count");
        slice.extend_from_slice(&record_prefix(&chunk));
        slice.extend_from_slice(&chunk);
        if slice.len() as u64 >= SLICE_BYTES {
            bytes += slice.len() as u64;
            let next = Vec::with_capacity(SLICE_BYTES as usize + (64 << 10));
            slices.push(std::mem::replace(&mut slice, next));
        }
    }
    drop(snap);
    bytes += slice.len() as u64;
    slices.push(slice);
    let trailer = encode_trailer(count);
    bytes += trailer.len() as u64;
    slices.push(trailer);
    Some(Encoded { version, took: start.elapsed(), root, chunks: count, slices, bytes })
}

/// Writes `snap` as the checkpoint of `version`: encodes it ([`encode`], which lets the
/// snapshot go), then writes it to a temporary file, synced, renamed into place. If
/// `stop` becomes true the write is abandoned (`Ok(None)`). With a `pacer`, each slice
/// waits for its turn and is synced as it is written, and the rename waits until no
/// retained version is older than `version` ([`Pacer::wait_install`]).
pub fn write(
    backend: &dyn Backend,
    version: u64,
    snap: Snapshot,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
) -> Result<Option<CheckpointReport>, StoreError> {
    let start = Instant::now();
    let Some(encoded) = encode(version, snap, stop) else { return Ok(None) };
    write_encoded(backend, encoded, stop, pacer, start)
}

fn write_encoded(
    backend: &dyn Backend,
    encoded: Encoded,
    stop: &AtomicBool,
    pacer: Option<&Pacer>,
    start: Instant,
) -> Result<Option<CheckpointReport>, StoreError> {
    let Encoded { version, took: encoding, root, chunks, slices, bytes } = encoded;
    let name = checkpoint_name(version);
    let tmp = format!("{name}{TMP_SUFFIX}");
    let mut file = backend.create(&tmp).ctx(|| format!("creating {tmp}"))?;
    let werr = |e: io::Error| StoreError::io(format!("writing {tmp}"), e);
    let sliced = pacer.is_some_and(Pacer::sliced);
    let mut written = 0;
    // Each slice is freed once written, so the memory goes as the file grows.
    for slice in slices {
        if let Some(p) = pacer {
            p.wait(written, bytes, stop);
        }
        if stop.load(Ordering::Relaxed) {
            drop(file);
            let _ = backend.remove(&tmp);
            return Ok(None);
        }
        file.write_all(&slice).map_err(werr)?;
        written += slice.len() as u64;
        if sliced && slice.len() as u64 >= SLICE_BYTES {
            // Hand this slice to the disk now, so that the final sync (and the log's
            // syncs meanwhile) never wait behind the whole checkpoint.
            file.sync().ctx(|| format!("syncing {tmp}"))?;
        }
    }
    file.sync().ctx(|| format!("syncing {tmp}"))?;
    drop(file);
    if let Some(p) = pacer {
        p.wait_install(version, stop);
    }
    if stop.load(Ordering::Relaxed) {
        let _ = backend.remove(&tmp);
        return Ok(None);
    }
    backend.rename(&tmp, &name).ctx(|| format!("renaming {tmp} to {name}"))?;
    backend.sync_dir().ctx(|| format!("syncing the directory after writing {name}"))?;
    Ok(Some(CheckpointReport { version, root, chunks, bytes, elapsed: start.elapsed(), encoding }))
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
    let mut restore = Restore::<Sha256>::new(header.root);
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
        restore
            .add_verified(verified)
            .map_err(|e| corrupt(offset + 4, &format!("chunk record {i}: {e}")))?;
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
    let mut tree = restore
        .finish(header.capacity)
        .map_err(|e| corrupt(HEADER_LEN as u64, &format!("rebuilding: {e}")))?;
    if tree.capacity() != header.capacity || tree.len() != header.keys {
        return Err(corrupt(0, "header's capacity or key count differs from the chunks"));
    }
    debug_assert_eq!(tree.root_hash(), header.root);
    Ok((header, tree))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    fn tree(keys: u32) -> Tree {
        let mut t = Tree::with_capacity(16).unwrap();
        for i in 0..keys {
            t.insert(&i.to_be_bytes(), &[i as u8; 40]).unwrap();
        }
        t
    }

    #[test]
    fn the_encoding_is_the_file_and_reads_back_as_the_tree() {
        let mut t = tree(60_000);
        let never = AtomicBool::new(false);
        let enc = encode(7, t.snapshot(), &never).unwrap();
        assert_eq!(enc.chunks, t.chunk_count());
        assert!(enc.bytes > 2 * SLICE_BYTES, "several slices: {}", enc.bytes);
        // Header, full slices, the last partial slice, trailer.
        let n = enc.slices.len();
        assert_eq!(enc.slices[0].len(), HEADER_LEN);
        assert_eq!(enc.slices[n - 1].len(), TRAILER_LEN);
        assert!(enc.slices[1..n - 2].iter().all(|s| s.len() as u64 >= SLICE_BYTES));
        let joined: Vec<u8> = enc.slices.concat();
        assert_eq!(joined.len() as u64, enc.bytes);

        let b = MemBackend::new();
        let rep = write(&b, 7, t.snapshot(), &never, None).unwrap().unwrap();
        assert_eq!(rep.bytes, enc.bytes);
        assert!(rep.encoding <= rep.elapsed);
        let name = checkpoint_name(7);
        let mut file = Vec::new();
        b.open_read(&name).unwrap().read_to_end(&mut file).unwrap();
        assert!(file == joined, "the file is the encoding");
        let (h, mut back) = read(&b, &name).unwrap();
        assert_eq!((h.version, h.keys, back.root_hash()), (7, 60_000, t.root_hash()));
    }

    #[test]
    fn a_stopped_checkpoint_leaves_nothing() {
        let mut t = tree(2_000);
        let stop = AtomicBool::new(true);
        assert!(encode(3, t.snapshot(), &stop).is_none());
        let b = MemBackend::new();
        assert!(write(&b, 3, t.snapshot(), &stop, None).unwrap().is_none());
        assert!(b.list().unwrap().is_empty(), "{:?}", b.list());
    }
}
