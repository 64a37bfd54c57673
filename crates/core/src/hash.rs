//! Hash functions and the domain-separated hash inputs of every bavl node.
//!
//! Every hash bavl computes starts with a one-byte domain tag, and every variable-length
//! field is preceded by its length, so no input of one kind can be read as another
//! (see `docs/design.md`, "Hash inputs"). The hash function is a type parameter
//! ([`Hasher`]); SHA-256 is the default, BLAKE3 is available behind the `blake3` feature.

use crate::error::InputError;

/// A 32-byte digest.
pub type Digest = [u8; 32];

/// Domain tags: the first byte of every hash input.
pub mod tag {
    /// `H(VALUE || value)`.
    pub const VALUE: u8 = 0x00;
    /// `H(LEAF || u16be(key_len) || key || value_hash)`.
    pub const LEAF: u8 = 0x01;
    /// `H(CHUNK_NODE || left || right)`: a node of the in-chunk hash tree.
    pub const CHUNK_NODE: u8 = 0x02;
    /// `H(CHUNK || u32be(key_count) || in_chunk_root)`: a chunk, a leaf of the AVL tree.
    pub const CHUNK: u8 = 0x03;
    /// `H(INNER || u8 height || u64be(key_count) || u64be(chunk_count) || left || right)`.
    pub const INNER: u8 = 0x04;
    /// `H(ROOT || u8 format || u32be(capacity) || top)`: the tree's commitment.
    pub const ROOT: u8 = 0x05;
}

/// The version of the hashed format, committed in every root.
pub const FORMAT_VERSION: u8 = 1;

const _: () =
    assert!(crate::MAX_KEY_LEN <= u16::MAX as usize, "leaf hashes encode key lengths in 2 bytes");

/// A 256-bit hash function usable by the tree.
pub trait Hasher: Default + Clone + Send + Sync + 'static {
    /// A short name, recorded in vectors and reports.
    const NAME: &'static str;
    /// Appends bytes to the input.
    fn update(&mut self, bytes: &[u8]);
    /// Returns the digest of everything appended.
    fn finalize(self) -> Digest;
    /// The digest of the concatenation of `parts`. Every node hash goes through here, so a
    /// hash function may give it a faster path for short inputs.
    #[inline]
    fn digest_parts(parts: &[&[u8]]) -> Digest {
        let mut h = Self::default();
        for p in parts {
            h.update(p);
        }
        h.finalize()
    }
    /// `H(tag || left || right)`: the most frequent input, given its own entry point so a
    /// hash function can lay it out at fixed offsets.
    #[inline]
    fn digest_pair(tag: u8, left: &Digest, right: &Digest) -> Digest {
        Self::digest_parts(&[&[tag], left, right])
    }
}

/// SHA-256 (uses the CPU's SHA extensions when present).
#[derive(Default, Clone)]
pub struct Sha256(sha2::Sha256);

const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Longest input the one-shot path takes: three blocks less the padding's 9 bytes.
const SHA256_ONE_SHOT_MAX: usize = 3 * 64 - 9;

impl Hasher for Sha256 {
    const NAME: &'static str = "sha256";
    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(&mut self.0, bytes);
    }
    #[inline]
    fn finalize(self) -> Digest {
        sha2::Digest::finalize(self.0).into()
    }

    /// 65 bytes at fixed offsets: two blocks, no copy of runtime length.
    #[inline]
    fn digest_pair(tag: u8, left: &Digest, right: &Digest) -> Digest {
        use sha2::digest::generic_array::GenericArray;
        let mut b = [0u8; 128];
        b[0] = tag;
        b[1..33].copy_from_slice(left);
        b[33..65].copy_from_slice(right);
        b[65] = 0x80;
        b[120..128].copy_from_slice(&(65u64 * 8).to_be_bytes());
        let mut state = SHA256_IV;
        sha2::compress256(&mut state, std::slice::from_ref(GenericArray::from_slice(&b[..64])));
        sha2::compress256(&mut state, std::slice::from_ref(GenericArray::from_slice(&b[64..])));
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// Node inputs are short (38 to 183 bytes), so they are laid out with their padding
    /// in one stack buffer and compressed in a single call, without the streaming
    /// hasher's buffering. Same function, same digests (tested against the stream).
    #[inline]
    fn digest_parts(parts: &[&[u8]]) -> Digest {
        use sha2::digest::generic_array::GenericArray;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > SHA256_ONE_SHOT_MAX {
            let mut h = Self::default();
            parts.iter().for_each(|p| h.update(p));
            return h.finalize();
        }
        let mut buf = [0u8; 3 * 64];
        let mut at = 0;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        buf[at] = 0x80;
        let blocks = (total + 9).div_ceil(64);
        buf[blocks * 64 - 8..blocks * 64].copy_from_slice(&(total as u64 * 8).to_be_bytes());
        let mut state = SHA256_IV;
        for block in buf.chunks_exact(64).take(blocks) {
            sha2::compress256(&mut state, std::slice::from_ref(GenericArray::from_slice(block)));
        }
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

/// BLAKE3 in its 256-bit mode.
#[cfg(feature = "blake3")]
#[derive(Default, Clone)]
pub struct Blake3(blake3::Hasher);

#[cfg(feature = "blake3")]
impl Hasher for Blake3 {
    const NAME: &'static str = "blake3";
    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    #[inline]
    fn finalize(self) -> Digest {
        self.0.finalize().into()
    }
}

/// Hash of a value: `H(VALUE || value)`.
#[inline]
pub fn value_hash<H: Hasher>(value: &[u8]) -> Digest {
    H::digest_parts(&[&[tag::VALUE], value])
}

/// A key known to be 1..=[`crate::MAX_KEY_LEN`] bytes long: the only key a leaf hash takes,
/// so the two-byte length in the leaf's hash input can never wrap (a 64 KiB key would
/// otherwise hash like a key with a 0-byte length prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key<'a>(&'a [u8]);

impl<'a> Key<'a> {
    /// Checks the length (`docs/design.md` §1, Limits).
    pub fn new(bytes: &'a [u8]) -> Result<Self, InputError> {
        check_key(bytes)?;
        Ok(Key(bytes))
    }

    /// A key of a chunk in a tree: every such key passed [`Key::new`]'s check when it was
    /// inserted or decoded.
    #[inline]
    pub(crate) fn in_tree(bytes: &'a [u8]) -> Self {
        debug_assert!(check_key(bytes).is_ok(), "a tree holds a key of {} bytes", bytes.len());
        Key(bytes)
    }

    /// The key's bytes.
    pub fn as_bytes(self) -> &'a [u8] {
        self.0
    }
}

/// A caller's key: 1..=[`crate::MAX_KEY_LEN`] bytes.
pub(crate) fn check_key(key: &[u8]) -> Result<(), InputError> {
    if key.is_empty() {
        return Err(InputError::EmptyKey);
    }
    if key.len() > crate::MAX_KEY_LEN {
        return Err(InputError::KeyTooLong { len: key.len(), max: crate::MAX_KEY_LEN });
    }
    Ok(())
}

/// Hash of a key/value leaf given the value's hash.
#[inline]
pub fn leaf_hash<H: Hasher>(key: Key<'_>, value_hash: &Digest) -> Digest {
    // `Key` holds at most `MAX_KEY_LEN` (1024) bytes, so the length fits two bytes; with a
    // 20-byte key the input is 55 bytes: one SHA-256 compression instead of two.
    let len = key.0.len() as u16;
    H::digest_parts(&[&[tag::LEAF], &len.to_be_bytes(), key.0, value_hash])
}

/// Hash of a key/value leaf.
#[inline]
pub fn leaf_hash_of<H: Hasher>(key: Key<'_>, value: &[u8]) -> Digest {
    leaf_hash::<H>(key, &value_hash::<H>(value))
}

/// Hash of an in-chunk tree node.
#[inline]
pub fn chunk_node_hash<H: Hasher>(left: &Digest, right: &Digest) -> Digest {
    H::digest_pair(tag::CHUNK_NODE, left, right)
}

/// Hash of a chunk with `key_count` keys whose in-chunk tree has root `in_chunk_root`.
#[inline]
pub fn chunk_hash<H: Hasher>(key_count: u32, in_chunk_root: &Digest) -> Digest {
    H::digest_parts(&[&[tag::CHUNK], &key_count.to_be_bytes(), in_chunk_root])
}

/// Hash of an inner node of the AVL tree over chunks.
#[inline]
pub fn inner_hash<H: Hasher>(
    height: u8,
    key_count: u64,
    chunk_count: u64,
    left: &Digest,
    right: &Digest,
) -> Digest {
    H::digest_parts(&[
        &[tag::INNER, height],
        &key_count.to_be_bytes(),
        &chunk_count.to_be_bytes(),
        left,
        right,
    ])
}

/// The root commitment: binds the format version, the chunk capacity and the top node
/// (32 zero bytes for the empty tree).
#[inline]
pub fn root_hash<H: Hasher>(capacity: u32, top: &Digest) -> Digest {
    H::digest_parts(&[&[tag::ROOT, FORMAT_VERSION], &capacity.to_be_bytes(), top])
}

/// The top hash of an empty tree.
pub const EMPTY_TOP: Digest = [0u8; 32];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_known_answer() {
        // SHA-256("abc")
        let mut h = Sha256::default();
        h.update(b"abc");
        assert_eq!(h.finalize()[..4], [0xba, 0x78, 0x16, 0xbf], "SHA-256 backend is not SHA-256");
    }

    #[test]
    fn one_shot_path_equals_the_stream_at_every_length() {
        let data: Vec<u8> = (0..400u32).map(|i| (i * 37 % 251) as u8).collect();
        for len in 0..data.len() {
            let (a, b) = data[..len].split_at(len / 3);
            let mut h = Sha256::default();
            h.update(&data[..len]);
            assert_eq!(Sha256::digest_parts(&[a, b]), h.finalize(), "length {len}");
        }
    }

    #[test]
    fn pair_path_equals_the_stream() {
        let (l, r) = ([3u8; 32], [250u8; 32]);
        let mut h = Sha256::default();
        h.update(&[tag::CHUNK_NODE]);
        h.update(&l);
        h.update(&r);
        assert_eq!(Sha256::digest_pair(tag::CHUNK_NODE, &l, &r), h.finalize());
    }

    #[test]
    fn domains_are_separated() {
        let d = [7u8; 32];
        let a = chunk_node_hash::<Sha256>(&d, &d);
        let b = inner_hash::<Sha256>(1, 0, 0, &d, &d);
        let c = value_hash::<Sha256>(&[d, d].concat());
        assert_ne!(a, b);
        assert_ne!(a, c);
        let k = |b: &'static [u8]| Key::new(b).unwrap();
        assert_ne!(leaf_hash::<Sha256>(k(b"k"), &d), leaf_hash::<Sha256>(k(b"kk"), &d));
    }

    #[test]
    fn keys_outside_the_limits_cannot_be_hashed() {
        assert_eq!(Key::new(b""), Err(InputError::EmptyKey));
        let long = vec![7u8; crate::MAX_KEY_LEN + 1];
        assert_eq!(Key::new(&long), Err(InputError::KeyTooLong { len: 1025, max: 1024 }));
        // 64 KiB would wrap a u16 length to 0.
        let huge = vec![7u8; 1 << 16];
        assert!(Key::new(&huge).is_err());
        assert!(Key::new(&long[..crate::MAX_KEY_LEN]).is_ok());
    }
}
