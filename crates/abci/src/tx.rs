//! The transaction format: a batch of sets and deletes, applied in order, all or nothing.
//!
//! ```text
//! tx  = 0xB1                       version tag ("bavl tx, format 1")
//!       varint n                   number of operations, 1..=MAX_OPS
//!       op * n
//! op  = 0x01 bytes(key) bytes(value)   set key to value
//!     | 0x02 bytes(key)                delete key (absent: no effect)
//! bytes(x) = varint len || x       canonical (minimal) LEB128 varints
//! ```
//!
//! Keys are 1..=[`MAX_KEY_LEN`] bytes, values at most [`MAX_VALUE_LEN`], a whole
//! transaction at most [`MAX_TX_BYTES`]. [`Tx::decode`] reads untrusted bytes: it checks
//! every length against the bytes left and every limit before allocating, rejects
//! trailing bytes and non-minimal varints (so each transaction has exactly one encoding),
//! and never panics. A decoded [`Tx`] is valid in full, so applying it cannot fail
//! half-way on account of its contents. Each [`TxError`] has a stable ABCI code.

use bavl_core::codec::{put_bytes, put_varint, Reader};
use bavl_core::DecodeError;

/// The first byte of every transaction of this format.
pub const TX_TAG: u8 = 0xB1;
/// The largest transaction, in bytes (CometBFT's default `mempool.max_tx_bytes`).
pub const MAX_TX_BYTES: usize = 1 << 20;
/// The most operations in one transaction.
pub const MAX_OPS: u64 = 10_000;
/// The longest key (bavl's own limit).
pub const MAX_KEY_LEN: usize = bavl_core::MAX_KEY_LEN;
/// The longest value: 64 KiB, so that one bavl chunk of the default capacity (64 entries)
/// stays under 4.2 MiB and always fits in one ABCI snapshot chunk (16 MiB at most).
pub const MAX_VALUE_LEN: usize = 64 << 10;

const OP_SET: u8 = 0x01;
const OP_DELETE: u8 = 0x02;

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Set { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// A decoded, valid transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tx {
    pub ops: Vec<Op>,
}

/// Why a transaction was refused. [`TxError::code`] is its ABCI response code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    #[error("transaction of {len} bytes exceeds the limit of {max}")]
    Oversized { len: usize, max: usize },
    #[error("not a bavl transaction: first byte {found:#04x}, expected {TX_TAG:#04x}")]
    UnknownFormat { found: u8 },
    #[error("empty transaction")]
    Empty,
    #[error("malformed transaction: {0}")]
    Malformed(#[from] DecodeError),
    #[error("operation {op}: empty key")]
    EmptyKey { op: usize },
}

impl TxError {
    /// The ABCI code (0 is success): 1 oversized, 2 unknown format, 3 malformed (including
    /// a key or value over its limit), 4 empty key, 5 empty transaction.
    pub fn code(&self) -> u32 {
        match self {
            TxError::Oversized { .. } => 1,
            TxError::UnknownFormat { .. } => 2,
            TxError::Malformed(_) => 3,
            TxError::EmptyKey { .. } => 4,
            TxError::Empty => 5,
        }
    }
}

impl Tx {
    /// A transaction that sets one key.
    pub fn set(key: &[u8], value: &[u8]) -> Tx {
        Tx { ops: vec![Op::Set { key: key.to_vec(), value: value.to_vec() }] }
    }

    /// Encodes the transaction (the caller keeps it within the limits; [`Tx::decode`] of
    /// the result checks them).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![TX_TAG];
        put_varint(&mut out, self.ops.len() as u64);
        for op in &self.ops {
            match op {
                Op::Set { key, value } => {
                    out.push(OP_SET);
                    put_bytes(&mut out, key);
                    put_bytes(&mut out, value);
                }
                Op::Delete { key } => {
                    out.push(OP_DELETE);
                    put_bytes(&mut out, key);
                }
            }
        }
        out
    }

    /// Decodes and validates untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Tx, TxError> {
        if bytes.len() > MAX_TX_BYTES {
            return Err(TxError::Oversized { len: bytes.len(), max: MAX_TX_BYTES });
        }
        let mut r = Reader::new(bytes);
        let tag = r.u8().map_err(|_| TxError::Empty)?;
        if tag != TX_TAG {
            return Err(TxError::UnknownFormat { found: tag });
        }
        let n = r.varint_in(1, MAX_OPS, "operation count")?;
        // Each operation takes at least 3 bytes: no allocation beyond the input's size.
        let mut ops = Vec::with_capacity((n as usize).min(r.remaining() / 3));
        for i in 0..n as usize {
            let at = r.position();
            let op = match r.u8()? {
                OP_SET => {
                    let key = r.bytes(MAX_KEY_LEN, "key length")?.to_vec();
                    let value = r.bytes(MAX_VALUE_LEN, "value length")?.to_vec();
                    Op::Set { key, value }
                }
                OP_DELETE => Op::Delete { key: r.bytes(MAX_KEY_LEN, "key length")?.to_vec() },
                tag => return Err(DecodeError::BadTag { what: "operation", tag, at }.into()),
            };
            let key = match &op {
                Op::Set { key, .. } | Op::Delete { key } => key,
            };
            if key.is_empty() {
                return Err(TxError::EmptyKey { op: i });
            }
            ops.push(op);
        }
        r.finish()?;
        Ok(Tx { ops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tx {
        Tx {
            ops: vec![
                Op::Set { key: b"alice".to_vec(), value: b"10".to_vec() },
                Op::Delete { key: b"bob".to_vec() },
                Op::Set { key: vec![7; MAX_KEY_LEN], value: vec![1; MAX_VALUE_LEN] },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let tx = sample();
        assert_eq!(Tx::decode(&tx.encode()).unwrap(), tx);
        let empty_value = Tx::set(b"k", b"");
        assert_eq!(Tx::decode(&empty_value.encode()).unwrap(), empty_value);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            let err = Tx::decode(&bytes[..len]).unwrap_err();
            assert!(err.code() != 0, "{len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(Tx::decode(&longer), Err(TxError::Malformed(_))));
    }

    #[test]
    fn limits_have_their_codes() {
        assert_eq!(Tx::decode(&[]).unwrap_err().code(), 5);
        assert_eq!(Tx::decode(&[0x00, 1]).unwrap_err().code(), 2);
        assert_eq!(Tx::decode(&[TX_TAG, 0]).unwrap_err().code(), 3);
        assert_eq!(Tx::decode(&vec![TX_TAG; MAX_TX_BYTES + 1]).unwrap_err().code(), 1);
        let long_key = Tx::set(&vec![1; MAX_KEY_LEN + 1], b"v").encode();
        assert_eq!(Tx::decode(&long_key).unwrap_err().code(), 3);
        let long_value = Tx::set(b"k", &vec![1; MAX_VALUE_LEN + 1]).encode();
        assert_eq!(Tx::decode(&long_value).unwrap_err().code(), 3);
        assert_eq!(Tx::decode(&Tx::set(b"", b"v").encode()).unwrap_err().code(), 4);
        let unknown_op = [TX_TAG, 1, 0x09, 1, b'k'];
        assert_eq!(Tx::decode(&unknown_op).unwrap_err().code(), 3);
        // A count larger than the bytes present fails without allocating for it.
        let mut huge = vec![TX_TAG];
        put_varint(&mut huge, MAX_OPS);
        assert_eq!(Tx::decode(&huge).unwrap_err().code(), 3);
    }

    #[test]
    fn non_minimal_varints_are_refused() {
        // n = 1 written in two bytes.
        let bytes = [TX_TAG, 0x81, 0x00, OP_DELETE, 1, b'k'];
        assert_eq!(Tx::decode(&bytes).unwrap_err().code(), 3);
    }
}
