//! The write-ahead log: one record per committed version, holding that version's
//! operations and its root hash. Byte layouts: `docs/design.md` §8.2.

use std::io::{self, Read};

use bavl_core::{Digest, InputError, PageRef, Tree, MAX_KEY_LEN, MAX_VALUE_LEN};

use crate::error::StoreError;

const SEGMENT_MAGIC: &[u8; 8] = b"BAVLWAL1";
/// Bytes of a segment header: magic, first version (u64), capacity (u32), and the CRC-32
/// (IEEE, `crc32fast`) of those 20 bytes (u32).
pub const SEGMENT_HEADER_LEN: u64 = 24;
/// Bytes of a record header: body length (u32), version (u64), CRC-32 of both (u32).
pub const RECORD_HEADER_LEN: usize = 16;
/// Bytes after the body: its CRC-32.
const RECORD_TRAILER_LEN: usize = 4;
/// Root (32) and operation count (u32) at the start of every body.
const BODY_PREFIX_LEN: usize = 36;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// What a record deleting a key that is not there is reported as.
pub const ABSENT_DELETE: &str = "delete of an absent key";
/// Largest body a record may have (its length is a u32).
pub const MAX_BODY_LEN: usize = u32::MAX as usize;

/// The header of a new segment.
pub fn segment_header(first_version: u64, capacity: u32) -> Vec<u8> {
    let mut h = SEGMENT_MAGIC.to_vec();
    h.extend_from_slice(&first_version.to_le_bytes());
    h.extend_from_slice(&capacity.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// The operations of the version being built, already laid out as a log record.
pub struct RecordBuf {
    buf: Vec<u8>,
    ops: u32,
}

impl Default for RecordBuf {
    fn default() -> Self {
        RecordBuf { buf: vec![0; RECORD_HEADER_LEN + BODY_PREFIX_LEN], ops: 0 }
    }
}

impl RecordBuf {
    /// Number of operations recorded since the last commit.
    pub fn ops(&self) -> u32 {
        self.ops
    }
    /// Refuses an operation that would not fit in one record.
    pub fn check_room(&self, key: &[u8], value_len: usize) -> Result<(), StoreError> {
        let need = 1 + 2 + key.len() + 4 + value_len + RECORD_TRAILER_LEN;
        if self.buf.len() - RECORD_HEADER_LEN + need > MAX_BODY_LEN || self.ops == u32::MAX {
            return Err(StoreError::InvalidOption(
                "one version's operations exceed 4 GiB: commit more often".into(),
            ));
        }
        Ok(())
    }
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.buf.push(OP_PUT);
        self.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(value);
        self.ops += 1;
    }
    pub fn delete(&mut self, key: &[u8]) {
        self.buf.push(OP_DELETE);
        self.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(key);
        self.ops += 1;
    }
    /// Completes the record for `version` with its root; returns the bytes to append.
    pub fn seal(&mut self, version: u64, root: &Digest) -> &[u8] {
        let h = RECORD_HEADER_LEN;
        self.buf[h..h + 32].copy_from_slice(root);
        self.buf[h + 32..h + 36].copy_from_slice(&self.ops.to_le_bytes());
        let body_len = (self.buf.len() - h) as u32;
        self.buf[0..4].copy_from_slice(&body_len.to_le_bytes());
        self.buf[4..12].copy_from_slice(&version.to_le_bytes());
        let hcrc = crc32fast::hash(&self.buf[0..12]);
        self.buf[12..16].copy_from_slice(&hcrc.to_le_bytes());
        let bcrc = crc32fast::hash(&self.buf[h..]);
        self.buf.extend_from_slice(&bcrc.to_le_bytes());
        &self.buf
    }
    /// Starts the next version's record.
    pub fn clear(&mut self) {
        self.buf.truncate(RECORD_HEADER_LEN + BODY_PREFIX_LEN);
        self.ops = 0;
    }
}

/// What reading the next record of a segment found.
pub enum Next {
    /// A complete record whose checksums hold.
    Record { version: u64, offset: u64, body: Vec<u8> },
    /// The end of the segment, exactly at a record boundary.
    End,
    /// An incomplete record at the end: a write cut short by a crash, never acknowledged.
    /// Everything from `offset` on is to be discarded.
    Torn { offset: u64 },
}

/// Reads a segment's records one by one, checking each.
pub struct SegmentReader {
    r: io::BufReader<Box<dyn Read + Send>>,
    name: String,
    len: u64,
    pos: u64,
    pub first_version: u64,
    pub capacity: u32,
}

impl SegmentReader {
    /// Reads the header. `Ok(None)` means the segment is shorter than its header (cut
    /// short while being created).
    pub fn open(
        r: Box<dyn Read + Send>,
        name: &str,
        len: u64,
    ) -> Result<Option<SegmentReader>, StoreError> {
        let mut r = io::BufReader::with_capacity(1 << 20, r);
        if len < SEGMENT_HEADER_LEN {
            return Ok(None);
        }
        let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
        read_exact(&mut r, &mut h, name, 0)?;
        if &h[..8] != SEGMENT_MAGIC {
            return Err(StoreError::corrupted(name, 0, "bad segment magic"));
        }
        if crc32fast::hash(&h[..20]).to_le_bytes() != h[20..24] {
            return Err(StoreError::corrupted(name, 20, "segment header checksum mismatch"));
        }
        let first_version = u64::from_le_bytes(h[8..16].try_into().expect("8"));
        let capacity = u32::from_le_bytes(h[16..20].try_into().expect("4"));
        Ok(Some(SegmentReader {
            r,
            name: name.to_string(),
            len,
            pos: SEGMENT_HEADER_LEN,
            first_version,
            capacity,
        }))
    }

    /// Bytes read so far (the end of the last complete record).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reads the next record.
    pub fn next_record(&mut self) -> Result<Next, StoreError> {
        let offset = self.pos;
        let remaining = self.len - offset;
        if remaining == 0 {
            return Ok(Next::End);
        }
        if remaining < RECORD_HEADER_LEN as u64 {
            return Ok(Next::Torn { offset });
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        read_exact(&mut self.r, &mut h, &self.name, offset)?;
        if crc32fast::hash(&h[..12]).to_le_bytes() != h[12..16] {
            if h.iter().all(|&b| b == 0) && self.rest_is_zero()? {
                return Ok(Next::Torn { offset });
            }
            return Err(StoreError::corrupted(
                &self.name,
                offset,
                "record header checksum mismatch",
            ));
        }
        let body_len = u32::from_le_bytes(h[0..4].try_into().expect("4")) as u64;
        let version = u64::from_le_bytes(h[4..12].try_into().expect("8"));
        if body_len < BODY_PREFIX_LEN as u64 {
            return Err(StoreError::corrupted(&self.name, offset, "record body too short"));
        }
        let total = RECORD_HEADER_LEN as u64 + body_len + RECORD_TRAILER_LEN as u64;
        if total > remaining {
            return Ok(Next::Torn { offset });
        }
        // Bounded by the file's length, checked just above.
        let mut body = vec![0u8; body_len as usize + RECORD_TRAILER_LEN];
        read_exact(&mut self.r, &mut body, &self.name, offset)?;
        let crc = body.split_off(body_len as usize);
        if crc32fast::hash(&body).to_le_bytes()[..] != crc[..] {
            return Err(StoreError::corrupted(
                &self.name,
                offset + RECORD_HEADER_LEN as u64,
                format!("record body checksum mismatch (version {version})"),
            ));
        }
        self.pos += total;
        Ok(Next::Record { version, offset, body })
    }

    fn rest_is_zero(&mut self) -> Result<bool, StoreError> {
        let mut buf = [0u8; 8192];
        loop {
            let n = self
                .r
                .read(&mut buf)
                .map_err(|e| StoreError::io(format!("reading {}", self.name), e))?;
            if n == 0 {
                return Ok(true);
            }
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
    }
}

fn read_exact(
    r: &mut impl Read,
    buf: &mut [u8],
    name: &str,
    offset: u64,
) -> Result<(), StoreError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            StoreError::corrupted(name, offset, "file changed length while being read")
        } else {
            StoreError::io(format!("reading {name}"), e)
        }
    })
}

/// Applies a record's operations to `tree`; returns the root the record says they lead
/// to and the number of operations. Any malformation is `Corrupted`.
pub fn apply(
    tree: &mut Tree,
    body: &[u8],
    name: &str,
    offset: u64,
) -> Result<(Digest, u32), StoreError> {
    apply_loading(tree, body, name, offset, &mut |_, _| Ok(()))
}

/// Makes the chunks of a list resident in a tree (the paged store's loader).
pub(crate) type Loader<'a> = dyn FnMut(&mut Tree, Vec<PageRef>) -> Result<(), StoreError> + 'a;

/// One operation of a record.
#[derive(Clone, Copy)]
pub(crate) enum Op<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

impl<'a> Op<'a> {
    pub(crate) fn key(&self) -> &'a [u8] {
        match *self {
            Op::Put(k, _) | Op::Delete(k) => k,
        }
    }
    /// Bytes of key and value.
    pub(crate) fn bytes(&self) -> u64 {
        match *self {
            Op::Put(k, v) => (k.len() + v.len()) as u64,
            Op::Delete(k) => k.len() as u64,
        }
    }
}

/// The operations of a record's body, decoded one at a time; any malformation is
/// `Corrupted` at the record (an iterator, so a large record is applied in slices).
pub(crate) struct Ops<'a> {
    body: &'a [u8],
    pos: usize,
    left: u32,
    name: &'a str,
    offset: u64,
}

impl<'a> Ops<'a> {
    /// The record's root and its operations.
    pub(crate) fn parse(
        body: &'a [u8],
        name: &'a str,
        offset: u64,
    ) -> Result<(Digest, u32, Ops<'a>), StoreError> {
        let bad = || StoreError::corrupted(name, offset, "short body");
        let root: Digest = body.get(..32).ok_or_else(bad)?.try_into().expect("32");
        let count = u32::from_le_bytes(body.get(32..36).ok_or_else(bad)?.try_into().expect("4"));
        Ok((root, count, Ops { body, pos: BODY_PREFIX_LEN, left: count, name, offset }))
    }

    fn bad(&self, what: &str) -> StoreError {
        StoreError::corrupted(self.name, self.offset, what.to_string())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let s = self
            .body
            .get(self.pos..self.pos + n)
            .ok_or_else(|| self.bad("operation runs past the record"))?;
        self.pos += n;
        Ok(s)
    }

    fn decode(&mut self) -> Result<Op<'a>, StoreError> {
        let op = self.take(1)?[0];
        let klen = u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize;
        if klen == 0 || klen > MAX_KEY_LEN {
            return Err(self.bad("key length out of bounds"));
        }
        let key = self.take(klen)?;
        match op {
            OP_PUT => {
                let vlen = u32::from_le_bytes(self.take(4)?.try_into().expect("4")) as usize;
                if vlen > MAX_VALUE_LEN {
                    return Err(self.bad("value length out of bounds"));
                }
                Ok(Op::Put(key, self.take(vlen)?))
            }
            OP_DELETE => Ok(Op::Delete(key)),
            _ => Err(self.bad("unknown operation")),
        }
    }

    /// After the last operation: nothing may follow it.
    pub(crate) fn finish(&self) -> Result<(), StoreError> {
        if self.left != 0 || self.pos != self.body.len() {
            return Err(self.bad("trailing bytes after the operations"));
        }
        Ok(())
    }

    /// Applies `op` to `tree`, `load` first making the chunks it needs resident
    /// (`docs/design.md` §8.5.1).
    pub(crate) fn apply(
        &self,
        tree: &mut Tree,
        op: Op<'_>,
        load: &mut Loader<'_>,
    ) -> Result<(), StoreError> {
        match op {
            Op::Put(key, value) => {
                if tree.is_paged() {
                    let needs = tree.absent_for_insert(key);
                    load(tree, needs)?;
                }
                tree.insert(key, value).map_err(|e: InputError| self.bad(&e.to_string()))?;
            }
            Op::Delete(key) => {
                // The store logs a delete only of a key that was present (`Store::remove`);
                // a delete of an absent key is not a record it writes.
                if tree.is_paged() {
                    let needs = tree.absent_for_remove(key);
                    load(tree, needs)?;
                }
                let removed = tree.try_remove(key).map_err(|e| self.bad(&e.to_string()))?;
                if removed.is_none() {
                    return Err(self.bad(ABSENT_DELETE));
                }
            }
        }
        Ok(())
    }
}

impl<'a> Iterator for Ops<'a> {
    type Item = Result<Op<'a>, StoreError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = self.decode();
        if r.is_err() {
            self.left = 0;
        }
        Some(r)
    }
}

/// [`apply`] on a tree that may have absent chunks: `load` makes the chunks each
/// operation needs resident before it is applied (`docs/design.md` §8.5.1).
pub(crate) fn apply_loading(
    tree: &mut Tree,
    body: &[u8],
    name: &str,
    offset: u64,
    load: &mut Loader<'_>,
) -> Result<(Digest, u32), StoreError> {
    let (root, count, mut ops) = Ops::parse(body, name, offset)?;
    while let Some(op) = ops.next() {
        ops.apply(tree, op?, load)?;
    }
    ops.finish()?;
    Ok((root, count))
}
