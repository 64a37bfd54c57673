//! The physical floors quoted beside the import: the disk's sequential write rate (a
//! `dd`-like write of fresh bytes in 1 MiB blocks, then `fsync`, timed to the end of the
//! sync) and SHA-256's rate over bulk bytes (1 MiB messages) and over 64-byte messages
//! (hashes per second), with the `sha2` crate the product hashes with (SHA extensions
//! when the CPU has them).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The floors measured in one run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Floors {
    /// Bytes written by the disk measurement.
    pub disk_bytes: u64,
    /// Sequential write of `disk_bytes` and `fsync`, bytes per second.
    pub disk_write_bytes_per_s: f64,
    /// SHA-256 over 1 MiB messages, bytes per second (one core).
    pub sha256_bytes_per_s: f64,
    /// SHA-256 of 64-byte messages, hashes per second (one core).
    pub sha256_64b_hashes_per_s: f64,
}

/// Measures the floors: `disk_bytes` written into a file in `dir` (removed after), and
/// SHA-256 over `hash_bytes`.
pub fn measure(dir: &Path, disk_bytes: u64, hash_bytes: u64) -> Result<Floors> {
    Ok(Floors {
        disk_bytes,
        disk_write_bytes_per_s: disk_write(dir, disk_bytes)?,
        sha256_bytes_per_s: sha256_bulk(hash_bytes),
        sha256_64b_hashes_per_s: sha256_small(hash_bytes / 64 / 16),
    })
}

/// A block of bytes no file system compresses or deduplicates away.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes `bytes` to a new file in `dir` in 1 MiB blocks and syncs it: bytes per second.
pub fn disk_write(dir: &Path, bytes: u64) -> Result<f64> {
    let path = dir.join("joinlab-dd.tmp");
    let block = noise(1 << 20);
    let start = Instant::now();
    let mut f =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    let secs = start.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(bytes as f64 / secs.max(1e-9))
}

/// SHA-256 over `bytes` in 1 MiB messages: bytes per second.
pub fn sha256_bulk(bytes: u64) -> f64 {
    let block = noise(1 << 20);
    let rounds = (bytes / block.len() as u64).max(1);
    let start = Instant::now();
    let mut acc = 0u8;
    for _ in 0..rounds {
        acc ^= Sha256::digest(&block)[0];
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(acc);
    (rounds * block.len() as u64) as f64 / secs.max(1e-9)
}

/// `count` SHA-256 hashes of 64-byte messages: hashes per second.
pub fn sha256_small(count: u64) -> f64 {
    let mut msg = [7u8; 64];
    let count = count.max(1);
    let start = Instant::now();
    for i in 0..count {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        let d = Sha256::digest(msg);
        msg[8] ^= d[0];
    }
    let secs = start.elapsed().as_secs_f64();
    std::hint::black_box(msg);
    count as f64 / secs.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_positive_and_the_file_is_gone() {
        let dir = std::env::temp_dir().join(format!("bavl-joinlab-dd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = measure(&dir, 4 << 20, 4 << 20).unwrap();
        assert!(f.disk_write_bytes_per_s > 0.0 && f.sha256_bytes_per_s > 0.0, "{f:?}");
        assert!(f.sha256_64b_hashes_per_s > 0.0, "{f:?}");
        assert!(!dir.join("joinlab-dd.tmp").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
