//! The resume file: the store's checkpoint of the synced version, filled as chunks verify,
//! so a killed sync restarts where it stopped and a finished one *is* the new store's
//! checkpoint (moved into place, not written a second time).
//!
//! Pure encoding and decoding; the caller owns the file (appends each record from
//! [`crate::Action::Accepted`], syncs it when it likes, and seals it at the end). The
//! layout is a store checkpoint's (`docs/design.md` §8.3, `bavl_store::checkpoint`):
//!
//! ```text
//! header:  "BAVLCKP1" | u64 version | root[32] | u32 capacity | u64 keys | u64 chunks | u32 CRC-32
//!          -- written with capacity, keys and chunks at 0 while the file fills
//! record:  u32 len | export_chunk(i)      -- in the order the chunks verified
//! trailer: "BAVLEND1" | u64 chunks | u32 CRC-32   -- [`seal`]: with the final header
//! ```
//!
//! A record carries neither its index nor a checksum: the chunk is self-verifying, and its
//! index is derived from its proof ([`bavl_core::verify_chunk_unindexed`]). Reading stops
//! at the first record cut short (a write torn by the kill); the chunks read back are not
//! trusted: [`crate::Syncer::add_local_chunk_unindexed`] verifies each against the root,
//! and the caller keeps the file only up to the first one that fails (or repeats one).

use bavl_core::Digest;
use bavl_store::checkpoint;

use crate::error::ResumeError;

/// Length of the header.
pub const HEADER_LEN: usize = checkpoint::HEADER_LEN;

/// The header of a resume file for `(root, version)` while it fills (counts at zero).
pub fn header(root: &Digest, version: u64) -> Vec<u8> {
    checkpoint::encode_header(version, root, 0, 0, 0)
}

/// What precedes a record's body: its length.
pub fn record_prefix(body: &[u8]) -> [u8; 4] {
    checkpoint::record_prefix(body)
}

/// One record (prefix and body).
pub fn record(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&record_prefix(body));
    out.extend_from_slice(body);
    out
}

/// What completes a file holding every chunk: the final header (to write at offset 0)
/// and the trailer (to append).
pub fn seal(
    root: &Digest,
    version: u64,
    capacity: u32,
    keys: u64,
    chunks: u64,
) -> (Vec<u8>, Vec<u8>) {
    (
        checkpoint::encode_header(version, root, capacity, keys, chunks),
        checkpoint::encode_trailer(chunks),
    )
}

/// What a resume file holds.
#[derive(Debug)]
pub struct ResumeFile<'a> {
    /// `(offset, body)` of each complete record, in file order.
    pub chunks: Vec<(usize, &'a [u8])>,
    /// Bytes up to the end of the last complete record.
    pub valid_len: usize,
}

/// Reads a resume file written for `(root, version)` (filling, or sealed: the trailer
/// reads as a cut-off record and is dropped).
pub fn read<'a>(
    bytes: &'a [u8],
    root: &Digest,
    version: u64,
) -> Result<ResumeFile<'a>, ResumeError> {
    let (v, r) = checkpoint::decode_header_identity(bytes).ok_or(ResumeError::BadHeader)?;
    if (v, r) != (version, *root) {
        return Err(ResumeError::OtherSync);
    }
    let mut at = HEADER_LEN;
    let mut chunks = Vec::new();
    while let Some((body, next)) = next_record(bytes, at) {
        chunks.push((at, body));
        at = next;
    }
    Ok(ResumeFile { chunks, valid_len: at })
}

fn next_record(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = bytes.get(at..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let body = rest.get(4..4usize.checked_add(len)?)?;
    Some((body, at + 4 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_torn_tail() {
        let root = [7u8; 32];
        let mut file = header(&root, 9);
        file.extend(record(b"abc"));
        file.extend(record(b""));
        let whole = file.len();
        file.extend(&record(b"torn")[..6]);
        let r = read(&file, &root, 9).unwrap();
        let bodies: Vec<&[u8]> = r.chunks.iter().map(|(_, b)| *b).collect();
        assert_eq!(bodies, vec![&b"abc"[..], &b""[..]]);
        assert_eq!(r.chunks[1].0, HEADER_LEN + 7);
        assert_eq!(r.valid_len, whole);
        assert_eq!(read(&file, &root, 8).unwrap_err(), ResumeError::OtherSync);
        assert_eq!(read(&file, &[0; 32], 9).unwrap_err(), ResumeError::OtherSync);
        assert_eq!(read(&file[..40], &root, 9).unwrap_err(), ResumeError::BadHeader);
        let mut bad = file.clone();
        bad[20] ^= 1; // the header's checksum fails
        assert_eq!(read(&bad, &root, 9).unwrap_err(), ResumeError::BadHeader);
    }

    #[test]
    fn a_sealed_file_reads_back_its_records_and_not_the_trailer() {
        let root = [3u8; 32];
        let mut file = header(&root, 4);
        file.extend(record(b"one"));
        file.extend(record(b"two"));
        let whole = file.len();
        let (head, trailer) = seal(&root, 4, 64, 10, 2);
        file[..HEADER_LEN].copy_from_slice(&head);
        file.extend(trailer);
        let r = read(&file, &root, 4).unwrap();
        assert_eq!(r.chunks.len(), 2);
        assert_eq!(r.valid_len, whole);
    }
}
