//! SHA-256 over domain-separated inputs, and the small byte codec the proofs share.
//!
//! Tags are distinct across structures (`0x1_` AVL*, `0x2_` Merkle B+tree, `0x3_` AVL+) so
//! no hash of one structure can be read as another's; every variable-length field is
//! length-prefixed; integers are big-endian. Value hashes are shared: `H(0x00 || value)`.

use sha2::Digest as _;

use crate::VerifyError;

/// A 32-byte SHA-256 digest.
pub type Digest = [u8; 32];

pub const TAG_VALUE: u8 = 0x00;

/// `H(parts[0] || parts[1] || ...)`.
pub fn h(parts: &[&[u8]]) -> Digest {
    let mut s = sha2::Sha256::new();
    for p in parts {
        s.update(p);
    }
    s.finalize().into()
}

/// `H(0x00 || value)`.
pub fn value_hash(value: &[u8]) -> Digest {
    h(&[&[TAG_VALUE], value])
}

/// `H(tag || u16(len key) || key || value_hash)`: an entry.
pub fn entry_hash(tag: u8, key: &[u8], value_hash: &Digest) -> Digest {
    h(&[&[tag], &(key.len() as u16).to_be_bytes(), key, value_hash])
}

/// Appends `u16(len) || bytes`.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Appends `u32(len) || bytes` (values may exceed 64 KiB).
pub fn put_long_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A bounds-checked reader over untrusted bytes: every read fails instead of panicking.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], VerifyError> {
        if self.buf.len() < n {
            return Err(VerifyError::Malformed("truncated"));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, VerifyError> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, VerifyError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self) -> Result<u32, VerifyError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Result<u64, VerifyError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub fn digest(&mut self) -> Result<Digest, VerifyError> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }
    /// `u16(len) || bytes` with `1 <= len <= 1024` (a key).
    pub fn key(&mut self) -> Result<&'a [u8], VerifyError> {
        let n = self.u16()? as usize;
        if n == 0 || n > 1024 {
            return Err(VerifyError::Malformed("key length"));
        }
        self.take(n)
    }
    /// `u32(len) || bytes` (a value).
    pub fn long_bytes(&mut self) -> Result<&'a [u8], VerifyError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), VerifyError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(VerifyError::Malformed("trailing bytes"))
        }
    }
}

/// Reads a count and checks it against what the remaining bytes could hold, so a claimed
/// count never sizes an allocation beyond the input.
pub fn bounded_count(r: &mut Reader<'_>, min_bytes_each: usize) -> Result<usize, VerifyError> {
    let n = r.u32()? as usize;
    if n.saturating_mul(min_bytes_each) > r.buf.len() {
        return Err(VerifyError::Malformed("count exceeds input"));
    }
    Ok(n)
}
