//! Defensive byte decoding: a bounded reader and canonical LEB128 varints.
//!
//! The reader never reads past its slice and never allocates; every length it returns has
//! been checked against the bytes remaining, so callers can slice without panicking.
//! Varints must be minimal (no redundant trailing zero groups), so every value has exactly
//! one encoding and any flipped byte changes either the value or the parse.

use crate::error::DecodeError;

/// Appends `v` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A cursor over untrusted bytes.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading `bytes` from the beginning.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The offset of the next byte, for error messages.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.bytes.get(self.pos).ok_or(DecodeError::Truncated { at: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads exactly `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated { at: self.pos });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads a 32-byte digest.
    pub fn digest(&mut self) -> Result<[u8; 32], DecodeError> {
        let mut d = [0u8; 32];
        d.copy_from_slice(self.take(32)?);
        Ok(d)
    }

    /// Reads a minimal LEB128 varint of at most 64 bits.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let low = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(DecodeError::BadVarint { at: start });
            }
            v |= low << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(DecodeError::BadVarint { at: start });
                }
                return Ok(v);
            }
        }
        Err(DecodeError::BadVarint { at: start })
    }

    /// Reads a varint that must lie in `min..=max`.
    pub fn varint_in(
        &mut self,
        min: u64,
        max: u64,
        what: &'static str,
    ) -> Result<u64, DecodeError> {
        let at = self.pos;
        let v = self.varint()?;
        if v < min || v > max {
            return Err(DecodeError::OutOfRange { what, value: v, at });
        }
        Ok(v)
    }

    /// Reads a length-prefixed byte string of at most `max` bytes.
    pub fn bytes(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let n = self.varint_in(0, max as u64, what)? as usize;
        self.take(n)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(DecodeError::TrailingBytes { at: self.pos });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_roundtrip_and_are_minimal() {
        for v in [0u64, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut r = Reader::new(&b);
            assert_eq!(r.varint().unwrap(), v);
            r.finish().unwrap();
        }
        // 0 encoded in two bytes is not minimal.
        assert!(Reader::new(&[0x80, 0x00]).varint().is_err());
        // Eleven bytes / overflow of the tenth.
        assert!(Reader::new(&[0xff; 10]).varint().is_err());
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02])
            .varint()
            .is_err());
        assert!(Reader::new(&[0x80]).varint().is_err());
    }

    #[test]
    fn take_never_reads_past_the_end() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert!(r.take(4).is_err());
        assert_eq!(r.take(3).unwrap(), &[1, 2, 3]);
        assert!(r.u8().is_err());
        assert!(Reader::new(&[5, 1]).bytes(10, "key").is_err());
        assert!(Reader::new(&[11]).bytes(10, "key").is_err());
    }
}
