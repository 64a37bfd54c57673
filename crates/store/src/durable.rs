//! Durable pages (`docs/design.md` §8.5.1): a paged store's checkpoint is a skeleton
//! file, `skel-<version>.bavl`, naming for each chunk where its body lies in the store's
//! chunk files, `chunks-<number>.bavl`. A checkpoint writes only the bodies that have no
//! durable location yet, and opening reads only the skeleton.
//!
//! Guarantees:
//! - a skeleton is accepted only if its checksums hold, every location names a record
//!   inside an existing chunk file, and the root recomputed from its chunk hashes is the
//!   root in its header (`Tree::from_skeleton`): the skeleton cannot lie about the state;
//! - a body read back is decoded defensively and verified against its page (count, first
//!   key, hash) before it is used: damage is `Corrupted`, never an answer;
//! - a skeleton is renamed into place only after every chunk file it names is synced.
//!
//! The caller guarantees that chunk files are deleted only under the deletion rule of
//! §8.5.1 (no retained version, no live skeleton names them).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};

use bavl_core::{Body, SkeletonEntry, Tree, MAX_KEY_LEN};

use crate::backend::Backend;
use crate::checkpoint::Header;
use crate::error::{IoContext, StoreError};
use crate::meta::chunk_file_name;
use crate::paging::{durable_id, durable_key, make_loc, split_loc};
pub(crate) use crate::skel_write::write_checkpoint;

const CHUNK_MAGIC: &[u8; 8] = b"BAVLCHK1";
const SKEL_MAGIC: &[u8; 8] = b"BAVLSKL1";
pub(crate) const END_MAGIC: &[u8; 8] = b"BAVLEND1";
/// Length of a chunk file's header: magic, number, CRC-32.
pub const CHUNK_HEADER_LEN: u64 = 20;
/// Length of a skeleton's header (the layout of a checkpoint's, another magic).
pub const SKEL_HEADER_LEN: usize = 72;
/// Length of a skeleton's trailer.
pub const SKEL_TRAILER_LEN: usize = 8 + 8 + 4 + 4;
/// Fixed bytes of a skeleton entry before its first key.
pub(crate) const ENTRY_FIXED: usize = 1 + 32 + 4 + 8 + 2;
/// Where an entry's location is, from its start.
pub(crate) const ENTRY_LOC_AT: usize = 1 + 32 + 4;

/// The header of chunk file `id`.
pub(crate) fn chunk_file_header(id: u64) -> Vec<u8> {
    let mut h = CHUNK_MAGIC.to_vec();
    h.extend_from_slice(&id.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Reads the record `u32 len | body` at `at` of a file of `end` bytes named `name`,
/// through `read`; every length is checked against `end` before anything is allocated.
pub(crate) fn read_record(
    name: &str,
    end: u64,
    at: u64,
    read: impl Fn(&mut [u8], u64) -> io::Result<()>,
) -> Result<Vec<u8>, StoreError> {
    let bad = |what: &str| StoreError::corrupted(name, at, what);
    if at.checked_add(4).is_none_or(|e| e > end) {
        return Err(bad("a location beyond the end of the file"));
    }
    // One read for most records: the length and the first `GUESS` bytes of the body
    // (never past the end of the file), then the rest if the body is longer.
    let first = (end - at).min(4 + GUESS) as usize;
    let mut buf = vec![0; first];
    read(&mut buf, at).ctx(|| format!("reading {name}"))?;
    let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as u64;
    if at + 4 + len > end {
        return Err(bad("a record running past the end of the file"));
    }
    let len = len as usize;
    buf.drain(..4);
    if len <= buf.len() {
        buf.truncate(len);
    } else {
        let have = buf.len();
        buf.resize(len, 0);
        read(&mut buf[have..], at + 4 + have as u64).ctx(|| format!("reading {name}"))?;
    }
    Ok(buf)
}

/// Bytes of a body read together with its length (a chunk of 64 Workload B entries holds
/// about 7.5 KB: one read of two or three pages).
const GUESS: u64 = 8 * 1024 - 4;

pub(crate) fn encode_header(h: &Header) -> Vec<u8> {
    let mut out =
        crate::checkpoint::encode_header(h.version, &h.root, h.capacity, h.keys, h.chunks);
    out[..8].copy_from_slice(SKEL_MAGIC);
    let crc = crc32fast::hash(&out[..SKEL_HEADER_LEN - 4]);
    out[SKEL_HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_header(h: &[u8]) -> Option<Header> {
    if h.len() != SKEL_HEADER_LEN
        || &h[..8] != SKEL_MAGIC
        || crc32fast::hash(&h[..SKEL_HEADER_LEN - 4]).to_le_bytes() != h[SKEL_HEADER_LEN - 4..]
    {
        return None;
    }
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
    Some(Header {
        version: u64_at(8),
        root: h[16..48].try_into().ok()?,
        capacity: u32::from_le_bytes(h[48..52].try_into().expect("4")),
        keys: u64_at(52),
        chunks: u64_at(60),
    })
}

pub(crate) fn encode_entry(out: &mut Vec<u8>, e: &SkeletonEntry) {
    out.push(e.key_height);
    out.extend_from_slice(&e.hash);
    out.extend_from_slice(&e.len.to_le_bytes());
    out.extend_from_slice(&e.loc.to_le_bytes());
    out.extend_from_slice(&(e.first_key.len() as u16).to_le_bytes());
    out.extend_from_slice(&e.first_key);
}

/// A skeleton read from its file, its checksums checked (not yet its root).
pub(crate) struct SkeletonFile {
    pub header: Header,
    pub entries: Vec<SkeletonEntry>,
    /// Per chunk file named: the entries ever written to it (for compaction).
    pub files: BTreeMap<u64, u64>,
}

impl SkeletonFile {
    /// The chunk files its locations name.
    pub fn named(&self) -> BTreeSet<u64> {
        self.entries.iter().filter_map(|e| durable_id(e.loc)).collect()
    }
}

/// Reads skeleton `name`: header, entries and trailer, every checksum and bound checked.
pub(crate) fn read_skeleton_file(
    backend: &dyn Backend,
    name: &str,
) -> Result<SkeletonFile, StoreError> {
    let len = backend.file_len(name).ctx(|| format!("reading {name}"))?;
    let corrupt = |offset: u64, what: &str| StoreError::corrupted(name, offset, what.to_string());
    let min = (SKEL_HEADER_LEN + SKEL_TRAILER_LEN) as u64;
    if len < min {
        return Err(corrupt(0, "shorter than a skeleton's header and trailer"));
    }
    let mut bytes = Vec::with_capacity(len.min(1 << 30) as usize);
    backend
        .open_read(name)
        .and_then(|r| r.take(len).read_to_end(&mut bytes))
        .ctx(|| format!("reading {name}"))?;
    if (bytes.len() as u64) < len {
        return Err(corrupt(bytes.len() as u64, "file ends early (truncated)"));
    }
    let header = decode_header(&bytes[..SKEL_HEADER_LEN])
        .ok_or_else(|| corrupt(0, "not a skeleton header, or its checksum fails"))?;
    let t = &bytes[bytes.len() - SKEL_TRAILER_LEN..];
    let body = &bytes[SKEL_HEADER_LEN..bytes.len() - SKEL_TRAILER_LEN];
    let trailer_at = (bytes.len() - SKEL_TRAILER_LEN) as u64;
    if &t[..8] != END_MAGIC
        || t[8..16] != header.chunks.to_le_bytes()
        || crc32fast::hash(&t[..20]).to_le_bytes() != t[20..]
    {
        return Err(corrupt(trailer_at, "bad skeleton trailer"));
    }
    if crc32fast::hash(body).to_le_bytes() != t[16..20] {
        return Err(corrupt(SKEL_HEADER_LEN as u64, "the entries' checksum fails"));
    }
    // Every entry takes at least ENTRY_FIXED + 1 bytes: the count is bounded first.
    if header.chunks > (body.len() / (ENTRY_FIXED + 1)) as u64 {
        return Err(corrupt(60, "more chunks than the file can hold"));
    }
    let mut entries = Vec::with_capacity(header.chunks as usize);
    let mut p = 0;
    for i in 0..header.chunks {
        let at = SKEL_HEADER_LEN as u64 + p as u64;
        let fixed = body
            .get(p..p + ENTRY_FIXED)
            .ok_or_else(|| corrupt(at, &format!("entry {i} runs past the entries")))?;
        let klen = u16::from_le_bytes([fixed[45], fixed[46]]) as usize;
        let key = body
            .get(p + ENTRY_FIXED..p + ENTRY_FIXED + klen)
            .filter(|_| (1..=MAX_KEY_LEN).contains(&klen))
            .ok_or_else(|| corrupt(at, &format!("entry {i}: bad first key length")))?;
        entries.push(SkeletonEntry {
            key_height: fixed[0],
            hash: fixed[1..33].try_into().expect("32"),
            len: u32::from_le_bytes(fixed[33..37].try_into().expect("4")),
            loc: u64::from_le_bytes(fixed[37..45].try_into().expect("8")),
            first_key: key.into(),
        });
        p += ENTRY_FIXED + klen;
    }
    let at = SKEL_HEADER_LEN as u64 + p as u64;
    let table = &body[p..];
    let n = table.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize);
    let files = match n.filter(|&n| table.len() == 4 + 16 * n) {
        Some(_) => table[4..]
            .chunks_exact(16)
            .map(|r| {
                let id = u64::from_le_bytes(r[..8].try_into().expect("8"));
                (id, u64::from_le_bytes(r[8..].try_into().expect("8")))
            })
            .collect(),
        None => return Err(corrupt(at, "bad chunk file table")),
    };
    Ok(SkeletonFile { header, entries, files })
}

/// The store's chunk files and their lengths.
pub(crate) type ChunkFiles = BTreeMap<u64, u64>;

/// Reads skeleton `name` into a tree whose chunks are all absent: every location must
/// name a record inside one of `files`, and the root recomputed from the chunk hashes
/// must be the header's. Returns the header, the tree and the entries' locations in
/// chunk order (for [`load_bodies`]) and the chunk files named.
pub(crate) fn load(
    backend: &dyn Backend,
    name: &str,
    files: &ChunkFiles,
) -> Result<(Header, Tree, SkeletonFile), StoreError> {
    let skel = read_skeleton_file(backend, name)?;
    for (i, e) in skel.entries.iter().enumerate() {
        let (id, at) = (durable_id(e.loc), split_loc(e.loc).1);
        let inside = id.and_then(|id| files.get(&id)).is_some_and(|&len| {
            id.is_some_and(|id| make_loc(durable_key(id), at) == e.loc)
                && at >= CHUNK_HEADER_LEN
                && at + 4 <= len
        });
        if !inside {
            let what = match id.map(|id| (id, files.contains_key(&id))) {
                Some((id, false)) => {
                    format!("chunk {i} is in {}, which is missing", chunk_file_name(id))
                }
                _ => format!("chunk {i} has a location outside every chunk file"),
            };
            return Err(StoreError::corrupted(name, SKEL_HEADER_LEN as u64, what));
        }
    }
    let named: ChunkFiles = skel.named().into_iter().map(|id| (id, files[&id])).collect();
    check_chunk_headers(backend, &named)?;
    let h = skel.header;
    let tree = Tree::from_skeleton(h.capacity, h.root, skel.entries.iter().cloned())
        .map_err(|e| StoreError::corrupted(name, 0, format!("rebuilding: {e}")))?;
    if tree.len() != h.keys || tree.chunk_count() != h.chunks {
        return Err(StoreError::corrupted(name, 0, "the header's counts differ from the entries"));
    }
    Ok((h, tree, skel))
}

/// Reads every body `skel` names and verifies each against its page in `tree` (which
/// `load` built from it); with `keep`, the bodies stay resident (an unpaged open),
/// otherwise each is dropped once verified. Stops at the first damaged body.
pub(crate) fn load_bodies(
    backend: &dyn Backend,
    tree: &mut Tree,
    skel: &SkeletonFile,
    files: &ChunkFiles,
    keep: bool,
) -> Result<(), StoreError> {
    (0..skel.entries.len()).try_for_each(|i| load_body(backend, tree, skel, i, files, keep))
}

/// Reads body `i` of `skel` and verifies it against its page in `tree`; see
/// [`load_bodies`].
pub(crate) fn load_body(
    backend: &dyn Backend,
    tree: &mut Tree,
    skel: &SkeletonFile,
    i: usize,
    files: &ChunkFiles,
    keep: bool,
) -> Result<(), StoreError> {
    let e = &skel.entries[i];
    let id = durable_id(e.loc).expect("checked by load");
    let name = chunk_file_name(id);
    let at = split_loc(e.loc).1;
    let end = files[&id];
    let raw = read_record(&name, end, at, |buf, off| backend.read_at(&name, off, buf))?;
    let body = Body::decode(&raw).map_err(|err| {
        StoreError::corrupted(&name, at, format!("undecodable chunk body: {err}"))
    })?;
    tree.page_in(i as u64, body)
        .map_err(|err| StoreError::corrupted(&name, at, err.to_string()))?;
    if !keep {
        tree.page_out(i as u64);
    }
    Ok(())
}

/// Checks the header of every chunk file in `files`.
pub(crate) fn check_chunk_headers(
    backend: &dyn Backend,
    files: &ChunkFiles,
) -> Result<(), StoreError> {
    for (&id, &len) in files {
        let name = chunk_file_name(id);
        let mut h = [0u8; CHUNK_HEADER_LEN as usize];
        if len < CHUNK_HEADER_LEN {
            return Err(StoreError::corrupted(&name, 0, "shorter than its header"));
        }
        backend.read_at(&name, 0, &mut h).ctx(|| format!("reading {name}"))?;
        if h[..] != chunk_file_header(id)[..] {
            return Err(StoreError::corrupted(&name, 0, "bad chunk file header"));
        }
    }
    Ok(())
}

/// Which chunk files a cleanup keeps: those numbered `below` or more (still being
/// written, or newer than every skeleton), and those a live skeleton names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ChunkKeep {
    pub named: BTreeSet<u64>,
    pub below: u64,
}

impl ChunkKeep {
    /// After a full checkpoint of an unpaged store: no chunk file is needed.
    pub fn none() -> Self {
        ChunkKeep { named: BTreeSet::new(), below: u64::MAX }
    }

    pub fn obsolete(&self, id: u64) -> bool {
        id < self.below && !self.named.contains(&id)
    }
}
