//! The import's input: the first `n` pairs of Workload A (`bavl_workload::initial(seed)`:
//! 20-byte random keys, 100-byte random values, the state every sync experiment of the
//! lab uses) in increasing key order, as `bavl import --format bin --sorted` reads them
//! (`docs/design.md` §8.9: `u32 klen | key | u32 vlen | value`, little-endian).
//!
//! The pairs come from one ChaCha8 stream in which pair `i` is the 30 words at word
//! `30 i` (5 of key, 25 of value). So the keys are generated once, sorted with their index
//! (24 bytes a pair in memory: 2.4 GB at 100M), and each value is generated again by
//! seeking its pair's word in the stream: the file is written in key order without ever
//! holding the values. A test checks the pairs against `bavl_workload::initial` itself.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use bavl_workload::{KEY_LEN, VALUE_LEN};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Stream words per pair: 20 key bytes and 100 value bytes, 4 bytes a word.
const WORDS: u128 = ((KEY_LEN + VALUE_LEN) / 4) as u128;
/// Bytes of one `bin` record: two u32 lengths, the key and the value.
pub const RECORD_BYTES: u64 = (8 + KEY_LEN + VALUE_LEN) as u64;

/// The stream `bavl_workload::initial(seed)` draws from.
fn stream(seed: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(0);
    r
}

/// The first `n` keys with their pair's index, sorted by key.
pub fn sorted_keys(seed: u64, n: u32) -> Vec<([u8; KEY_LEN], u32)> {
    let mut rng = stream(seed);
    let mut keys = Vec::with_capacity(n as usize);
    let mut skip = [0u8; VALUE_LEN];
    for i in 0..n {
        let mut k = [0u8; KEY_LEN];
        rng.fill_bytes(&mut k);
        rng.fill_bytes(&mut skip);
        keys.push((k, i));
    }
    keys.sort_unstable();
    keys
}

/// The value of pair `index`.
fn value(rng: &mut ChaCha8Rng, index: u32) -> [u8; VALUE_LEN] {
    rng.set_word_pos(WORDS * u128::from(index) + (KEY_LEN / 4) as u128);
    let mut v = [0u8; VALUE_LEN];
    rng.fill_bytes(&mut v);
    v
}

/// What [`write_sorted`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub bytes: u64,
    pub seconds: f64,
}

/// Writes the first `n` pairs of `seed` to `out` in key order as `bin` records, synced
/// (so the import that follows does not share the disk with their write-back).
pub fn write_sorted(out: &Path, seed: u64, n: u32) -> Result<Written> {
    let start = Instant::now();
    let keys = sorted_keys(seed, n);
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut rng = stream(seed);
    for (k, i) in &keys {
        w.write_all(&(KEY_LEN as u32).to_le_bytes())?;
        w.write_all(k)?;
        w.write_all(&(VALUE_LEN as u32).to_le_bytes())?;
        w.write_all(&value(&mut rng, *i))?;
    }
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all().with_context(|| format!("syncing {}", out.display()))?;
    Ok(Written { bytes: RECORD_BYTES * u64::from(n), seconds: start.elapsed().as_secs_f64() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pairs_are_workload_a_in_key_order() {
        let n = 2000;
        let mut want: Vec<_> = bavl_workload::initial(1).take(n as usize).collect();
        want.sort();
        let dir = std::env::temp_dir().join(format!("bavl-joinlab-pairs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pairs.bin");
        let w = write_sorted(&path, 1, n).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(w.bytes, bytes.len() as u64);
        assert_eq!(bytes.len() as u64, RECORD_BYTES * u64::from(n));
        for (rec, (k, v)) in bytes.chunks(RECORD_BYTES as usize).zip(&want) {
            assert_eq!(rec[..4], 20u32.to_le_bytes());
            assert_eq!(&rec[4..24], k);
            assert_eq!(rec[24..28], 100u32.to_le_bytes());
            assert_eq!(&rec[28..], v);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
