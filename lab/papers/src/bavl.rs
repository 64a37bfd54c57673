//! bavl itself (`bavl_core::Tree`, SHA-256) behind the comparison trait.
//!
//! Proofs and chunks are bavl's own encodings (`docs/design.md`, section 3); the hash
//! count of a proof is read back from its encoding (pruned subtrees and in-chunk hashes).

use bavl_core::codec::Reader;
use bavl_core::{Restore, Sha256, Tree};

use crate::hash::Digest;
use crate::{AuthStructure, Proof, Space, VerifyError};

/// bavl's B+AVL tree, wrapped.
#[derive(Clone)]
pub struct Bavl {
    tree: Tree<Sha256>,
}

impl Bavl {
    /// The wrapped tree.
    pub fn tree(&self) -> &Tree<Sha256> {
        &self.tree
    }
}

fn decode_err(_: bavl_core::DecodeError) -> VerifyError {
    VerifyError::Malformed("bavl encoding")
}

/// Counts the hashes in a bavl proof (pruned subtrees and in-chunk hashes).
pub fn count_hashes(proof: &[u8]) -> Result<usize, VerifyError> {
    let mut r = Reader::new(proof);
    r.u8().map_err(decode_err)?;
    r.u8().map_err(decode_err)?;
    r.varint().map_err(decode_err)?;
    let mut hashes = 0;
    match r.u8().map_err(decode_err)? {
        0 => {}
        tag => node_tagged(&mut r, tag, &mut hashes, 0)?,
    }
    Ok(hashes)
}

fn node(r: &mut Reader<'_>, hashes: &mut usize, depth: u32) -> Result<(), VerifyError> {
    if depth > 200 {
        return Err(VerifyError::Malformed("depth"));
    }
    let tag = r.u8().map_err(decode_err)?;
    node_tagged(r, tag, hashes, depth)
}

fn node_tagged(
    r: &mut Reader<'_>,
    tag: u8,
    hashes: &mut usize,
    depth: u32,
) -> Result<(), VerifyError> {
    match tag {
        0x01 => {
            r.u8().map_err(decode_err)?;
            node(r, hashes, depth + 1)?;
            node(r, hashes, depth + 1)
        }
        0x02 => {
            let n = r.varint().map_err(decode_err)?;
            let p = r.varint().map_err(decode_err)?;
            let q = r.varint().map_err(decode_err)?;
            in_chunk(r, 0, n, p, p + q, hashes)
        }
        0x03 => {
            r.varint().map_err(decode_err)?;
            r.varint().map_err(decode_err)?;
            r.digest().map_err(decode_err)?;
            *hashes += 1;
            Ok(())
        }
        _ => Err(VerifyError::Malformed("bavl node tag")),
    }
}

fn in_chunk(
    r: &mut Reader<'_>,
    a: u64,
    b: u64,
    p: u64,
    e: u64,
    hashes: &mut usize,
) -> Result<(), VerifyError> {
    if b <= p || a >= e {
        r.digest().map_err(decode_err)?;
        *hashes += 1;
        return Ok(());
    }
    if b - a == 1 {
        match r.u8().map_err(decode_err)? {
            0x00 => {
                r.bytes(1024, "key").map_err(decode_err)?;
                r.digest().map_err(decode_err)?;
            }
            0x01 => {
                r.bytes(1024, "key").map_err(decode_err)?;
                r.bytes(16 << 20, "value").map_err(decode_err)?;
            }
            0x02 => {}
            _ => return Err(VerifyError::Malformed("bavl leaf tag")),
        }
        return Ok(());
    }
    let k = 1u64 << (63 - (b - a - 1).leading_zeros());
    in_chunk(r, a, a + k, p, e, hashes)?;
    in_chunk(r, a + k, b, p, e, hashes)
}

impl AuthStructure for Bavl {
    const NAME: &'static str = "B+AVL (bavl)";
    const SELF_VERIFIABLE_CHUNKS: bool = true;

    fn with_capacity(capacity: usize) -> Self {
        Bavl { tree: Tree::with_capacity(capacity as u32).expect("capacity within 4..=65536") }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> bool {
        self.tree.insert(key, value).expect("key and value within bavl's limits")
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.tree.remove(key)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.tree.get(key).expect("the lab's trees are never paged")
    }

    fn len(&self) -> u64 {
        self.tree.len()
    }

    fn root_hash(&mut self) -> Digest {
        self.tree.root_hash()
    }

    fn prove(&mut self, key: &[u8]) -> Option<Proof> {
        let bytes = self.tree.snapshot().prove_membership(key).ok()?;
        let hashes = count_hashes(&bytes).expect("bavl's own proof decodes");
        Some(Proof { bytes, hashes })
    }

    fn verify(root: &Digest, key: &[u8], value: &[u8], proof: &[u8]) -> Result<(), VerifyError> {
        match bavl_core::verify_membership::<Sha256>(root, key, value, proof) {
            Ok(_) => Ok(()),
            Err(bavl_core::ProofError::RootMismatch) => Err(VerifyError::RootMismatch),
            Err(bavl_core::ProofError::Decode(_)) => Err(VerifyError::Malformed("bavl proof")),
            Err(_) => Err(VerifyError::Inconsistent("bavl proof")),
        }
    }

    fn export_chunks(&mut self) -> Vec<Vec<u8>> {
        let snap = self.tree.snapshot();
        (0..snap.chunk_count()).map(|i| snap.export_chunk(i).expect("in range")).collect()
    }

    fn verify_chunk(root: &Digest, index: u64, bytes: &[u8]) -> Result<(), VerifyError> {
        match bavl_core::verify_chunk::<Sha256>(root, index, bytes) {
            Ok(_) => Ok(()),
            Err(bavl_core::ProofError::RootMismatch) => Err(VerifyError::RootMismatch),
            Err(bavl_core::ProofError::Decode(_)) => Err(VerifyError::Malformed("bavl chunk")),
            Err(_) => Err(VerifyError::Inconsistent("bavl chunk")),
        }
    }

    fn restore(root: &Digest, capacity: usize, chunks: &[Vec<u8>]) -> Result<Self, VerifyError> {
        let mut restore = Restore::<Sha256>::new(*root);
        for (i, c) in chunks.iter().enumerate() {
            restore.add_chunk(i as u64, c).map_err(|_| VerifyError::RootMismatch)?;
        }
        let tree =
            restore.finish(capacity as u32).map_err(|_| VerifyError::Inconsistent("restore"))?;
        Ok(Bavl { tree })
    }

    fn space(&self) -> Space {
        // Not `Tree::stats`, which also sums payload bytes over every chunk.
        let (keys, chunks) = (self.tree.len(), self.tree.chunk_count());
        Space { keys, chunks, capacity: u64::from(self.tree.capacity()) }
    }

    fn check(&self) -> Result<(), String> {
        self.tree.check()
    }
}
