//! The binary encoding of everything a node writes to its Raft log or sends over the wire:
//! [postcard](https://postcard.jamesmunns.com/wire-format) 1.x over our serde types
//! (`docs/cluster.md` sections 2 and 3).
//!
//! Why not JSON, as first built: a Raft entry of batched writes carried its keys and values
//! as hex strings inside JSON, so every byte was written as two characters, formatted and
//! parsed, on the leader, on each follower and in each log file; encoding and decoding
//! took about a tenth of a node's CPU under a write load, with the allocations beside it.
//! Postcard writes the same serde data model with varint lengths, enum variants as varint
//! indexes and struct fields in order, without names.
//!
//! Decoding is defensive: a length is checked against the bytes that remain before
//! anything is borrowed or copied, a sequence preallocates at most what serde's cautious
//! size hint allows, and bytes left over after the value are an error, as is any
//! malformed input (never a panic). Callers bound the input first (a frame or a record of
//! at most 64 MiB).
//!
//! Keys, values and hashes go through [`bytes`]: raw bytes here, hex where the format is
//! human-readable (the JSON of descriptors, snapshot files and status output stays as it
//! was).

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A value that would not encode (a sequence of unknown length; none of ours) or input that
/// does not decode to the expected type.
#[derive(Debug)]
pub struct CodecError(pub postcard::Error);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "binary encoding: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

/// Encodes `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_stdvec(value).map_err(CodecError)
}

/// Decodes one `T` that must take every byte of `bytes`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes).map_err(CodecError)?;
    if !rest.is_empty() {
        return Err(CodecError(postcard::Error::DeserializeBadEncoding));
    }
    Ok(value)
}

/// `#[serde(with = "crate::codec::bytes")]` for a `Vec<u8>`: raw bytes in a binary format,
/// a lowercase hex string in a human-readable one (as `hex::serde`, which it replaces).
pub mod bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&hex::encode(v))
        } else {
            s.serialize_bytes(v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if d.is_human_readable() {
            d.deserialize_str(HexVisitor)
        } else {
            d.deserialize_byte_buf(BytesVisitor)
        }
    }

    struct HexVisitor;

    impl Visitor<'_> for HexVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a hex string")
        }

        fn visit_str<E: Error>(self, v: &str) -> Result<Vec<u8>, E> {
            hex::decode(v).map_err(E::custom)
        }
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Kv {
        #[serde(with = "bytes")]
        key: Vec<u8>,
        #[serde(with = "bytes")]
        value: Vec<u8>,
        n: u64,
    }

    fn kv() -> Kv {
        Kv { key: b"key".to_vec(), value: vec![0, 255, 7], n: 300 }
    }

    #[test]
    fn bytes_are_raw_in_binary_and_hex_in_json() {
        let bin = encode(&kv()).unwrap();
        assert_eq!(bin, [3, b'k', b'e', b'y', 3, 0, 255, 7, 0xac, 0x02]);
        assert_eq!(decode::<Kv>(&bin).unwrap(), kv());
        let json = serde_json::to_string(&kv()).unwrap();
        assert_eq!(json, r#"{"key":"6b6579","value":"00ff07","n":300}"#);
        assert_eq!(serde_json::from_str::<Kv>(&json).unwrap(), kv());
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        let bin = encode(&kv()).unwrap();
        for cut in 0..bin.len() {
            assert!(decode::<Kv>(&bin[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = bin.clone();
        long.push(0);
        assert!(decode::<Kv>(&long).is_err(), "trailing bytes");
        // A length far beyond the input is refused before anything is allocated.
        assert!(decode::<Kv>(&[0xff, 0xff, 0xff, 0xff, 0x0f, 1]).is_err());
        assert!(decode::<Vec<Kv>>(&[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
