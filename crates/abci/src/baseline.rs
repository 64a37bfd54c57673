//! Snapshot format 2, the baseline: state sync the Cosmos SDK's way, on the same chain,
//! for comparison with format 1 (`docs/chain.md` §5). Not for production.
//!
//! ```text
//! stream    = ( len:u32le bavl-chunk )*   every chunk's export, in order (the tree's shape
//!             depends on its history, so the state is moved as its structure, as IAVL
//!             exports its nodes, not as bare entries)
//! chunks    = zlib(stream) cut every 10 MiB
//! metadata  = "BAVLBAS1" count:u32le sha256(chunk i)[32] * count
//! hash      = SHA-256(metadata)
//! ```
//!
//! Taking a snapshot serialises and compresses the whole state at the snapshot height,
//! on the committing thread (as the AVL* paper's Tendermint baseline did). A restore
//! checks each chunk only against the checksum in the untrusted metadata (a mismatch:
//! `RETRY`, the chunk refetched and its sender rejected, as the SDK does), keeps the
//! compressed stream, and only after the last chunk decompresses it and rebuilds the tree
//! against the trusted app hash: a forged snapshot whose checksums agree with its chunks
//! is found only then, and costs the whole snapshot (`REJECT_SNAPSHOT`).

use std::io::{Read, Write};

use bavl_core::codec::Reader;
use bavl_core::{Restore, Sha256 as Bavl, Tree};
use sha2::{Digest as _, Sha256};

use crate::restore::Applied;
use crate::snapshot::{Source, SourceError};

/// The format number in `Snapshot.format`.
pub const FORMAT_BASELINE: u32 = 2;
const MAGIC: &[u8; 8] = b"BAVLBAS1";
/// The Cosmos SDK's chunk size.
pub const CHUNK_BYTES: usize = 10 << 20;
/// How much larger than its compressed form a stream may be (chunk exports compress
/// 2-4x): a zlib bomb stops there instead of filling memory.
const MAX_EXPANSION: u64 = 16;

/// A snapshot of format 2, exported whole.
pub struct Export {
    pub chunks: Vec<Vec<u8>>,
    pub metadata: Vec<u8>,
}

impl Export {
    /// Serialises and compresses `snap` (O(state)); an error if a chunk cannot be read.
    pub fn new(snap: &Source) -> Result<Export, SourceError> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        let mut buf = Vec::new();
        for j in 0..snap.snapshot().chunk_count() {
            let at = buf.len();
            buf.extend_from_slice(&[0; 4]);
            snap.export_into(j, &mut buf)?;
            let len = (buf.len() - at - 4) as u32;
            buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
            if buf.len() >= 1 << 20 {
                z.write_all(&buf).expect("writing to memory");
                buf.clear();
            }
        }
        z.write_all(&buf).expect("writing to memory");
        let stream = z.finish().expect("writing to memory");
        let chunks: Vec<Vec<u8>> = stream.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect();
        let mut metadata = MAGIC.to_vec();
        metadata.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
        for c in &chunks {
            metadata.extend_from_slice(&Sha256::digest(c));
        }
        Ok(Export { chunks, metadata })
    }

    /// `Snapshot.hash`.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(&self.metadata).into()
    }
}

/// A baseline restore in progress.
pub struct BaselineRestoring {
    pub height: u64,
    app_hash: Vec<u8>,
    checksums: Vec<[u8; 32]>,
    stream: Vec<u8>,
    /// Chunks kept (CometBFT applies them in order).
    done: usize,
    /// Bytes of the chunks kept so far.
    pub bytes: u64,
}

impl BaselineRestoring {
    /// Accepts any well-formed offer: the metadata says nothing the app hash could check.
    pub fn offer(
        height: u64,
        chunks: u32,
        metadata: &[u8],
        app_hash: &[u8],
    ) -> Result<Self, String> {
        let mut r = Reader::new(metadata);
        let magic = r.take(8).map_err(|e| e.to_string())?;
        let count = r.take(4).map_err(|e| e.to_string())?;
        let count = u32::from_le_bytes(count.try_into().expect("4 bytes"));
        if magic != MAGIC || count != chunks || count == 0 {
            return Err("bad baseline metadata".into());
        }
        let mut checksums = Vec::with_capacity((count as usize).min(r.remaining() / 32));
        for _ in 0..count {
            checksums.push(r.digest().map_err(|e| e.to_string())?);
        }
        r.finish().map_err(|e| e.to_string())?;
        let app_hash = app_hash.to_vec();
        Ok(BaselineRestoring { height, app_hash, checksums, stream: Vec::new(), done: 0, bytes: 0 })
    }

    /// Keeps chunk `index` if its checksum matches; rebuilds and checks at the last.
    pub fn apply(&mut self, index: u32, bytes: &[u8]) -> Applied {
        let i = index as usize;
        let kept = self.done;
        if i < kept {
            return Applied::Duplicate;
        }
        if i != kept || i >= self.checksums.len() {
            return Applied::Retry { reason: format!("chunk {i} out of order (next {kept})") };
        }
        if Sha256::digest(bytes)[..] != self.checksums[i] {
            return Applied::Retry { reason: format!("chunk {i}: checksum mismatch") };
        }
        self.stream.extend_from_slice(bytes);
        self.bytes += bytes.len() as u64;
        self.done += 1;
        if self.done < self.checksums.len() {
            let bundles_left = (self.checksums.len() - self.done) as u64;
            return Applied::Accepted { bundles_left };
        }
        match rebuild(&self.stream, &self.app_hash) {
            Ok(tree) => Applied::Complete(Box::new(tree)),
            Err(e) => Applied::RejectSnapshot { reason: format!("after the last chunk: {e}") },
        }
    }
}

/// Decompresses the stream and rebuilds the tree, checking it against `app_hash`.
fn rebuild(compressed: &[u8], app_hash: &[u8]) -> Result<Tree, String> {
    let mut stream = Vec::new();
    flate2::read::ZlibDecoder::new(compressed)
        .take((compressed.len() as u64).saturating_mul(MAX_EXPANSION).max(1 << 20))
        .read_to_end(&mut stream)
        .map_err(|e| format!("decompressing: {e}"))?;
    let root: [u8; 32] = app_hash.try_into().map_err(|_| "an app hash of 32 bytes".to_string())?;
    let mut restore = Restore::<Bavl>::new(root);
    let mut r = Reader::new(&stream);
    let mut j = 0u64;
    while r.remaining() > 0 {
        let len = r.take(4).map_err(|e| e.to_string())?;
        let chunk = r.take(u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize);
        restore.add_chunk(j, chunk.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        j += 1;
    }
    restore.finish(bavl_core::DEFAULT_CAPACITY).map_err(|e| e.to_string())
}
