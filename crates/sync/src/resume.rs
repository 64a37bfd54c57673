//! The resume file: verified chunks appended as they are accepted, so a killed sync
//! restarts where it stopped.
//!
//! Pure encoding and decoding; the caller owns the file (appends each record from
//! [`crate::Action::Accepted`] and syncs it when it likes). Layout, integers little-endian:
//!
//! ```text
//! header: "BAVLSYN1" | u64 version | root[32] | u32 CRC-32 of the 48 bytes before it
//! record: u64 index | u32 len | body[len] | u32 CRC-32 of index ‖ len ‖ body
//! ```
//!
//! Reading stops at the first record that is cut short or fails its checksum (a write
//! torn by the kill) and reports where, so the caller can truncate there. The chunks read
//! back are not trusted: [`crate::Syncer::add_local_chunk`] verifies each against the
//! root, and one that fails is fetched again.

use bavl_core::Digest;

use crate::error::ResumeError;

const MAGIC: &[u8; 8] = b"BAVLSYN1";
/// Length of the header.
pub const HEADER_LEN: usize = 52;

/// The header of a resume file for `(root, version)`.
pub fn header(root: &Digest, version: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(root);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// One record.
pub fn record(index: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// What a resume file holds.
#[derive(Debug)]
pub struct ResumeFile<'a> {
    /// `(index, body)` of each intact record, in file order.
    pub chunks: Vec<(u64, &'a [u8])>,
    /// Bytes up to the end of the last intact record: truncate the file here before
    /// appending.
    pub valid_len: usize,
}

/// Reads a resume file written for `(root, version)`.
pub fn read<'a>(
    bytes: &'a [u8],
    root: &Digest,
    version: u64,
) -> Result<ResumeFile<'a>, ResumeError> {
    let head = bytes.get(..HEADER_LEN).ok_or(ResumeError::BadHeader)?;
    let crc = u32::from_le_bytes(head[48..52].try_into().map_err(|_| ResumeError::BadHeader)?);
    if &head[..8] != MAGIC || crc32fast::hash(&head[..48]) != crc {
        return Err(ResumeError::BadHeader);
    }
    if head[..48] != header(root, version)[..48] {
        return Err(ResumeError::OtherSync);
    }
    let mut at = HEADER_LEN;
    let mut chunks = Vec::new();
    while let Some((index, body, next)) = next_record(bytes, at) {
        chunks.push((index, body));
        at = next;
    }
    Ok(ResumeFile { chunks, valid_len: at })
}

fn next_record(bytes: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    let rest = bytes.get(at..)?;
    let index = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let len = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
    let end = 12usize.checked_add(len)?;
    let body = rest.get(12..end)?;
    let crc = u32::from_le_bytes(rest.get(end..end + 4)?.try_into().ok()?);
    if crc32fast::hash(&rest[..end]) != crc {
        return None;
    }
    Some((index, body, at + end + 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_torn_tail() {
        let root = [7u8; 32];
        let mut file = header(&root, 9);
        file.extend(record(3, b"abc"));
        file.extend(record(0, b""));
        let whole = file.len();
        file.extend(&record(5, b"torn")[..10]);
        let r = read(&file, &root, 9).unwrap();
        assert_eq!(r.chunks, vec![(3, &b"abc"[..]), (0, &b""[..])]);
        assert_eq!(r.valid_len, whole);
        assert_eq!(read(&file, &root, 8).unwrap_err(), ResumeError::OtherSync);
        assert_eq!(read(&file, &[0; 32], 9).unwrap_err(), ResumeError::OtherSync);
        assert_eq!(read(&file[..40], &root, 9).unwrap_err(), ResumeError::BadHeader);
        file[HEADER_LEN + 13] ^= 1; // damages the first record: nothing after it is read
        assert_eq!(read(&file, &root, 9).unwrap().chunks.len(), 0);
    }
}
