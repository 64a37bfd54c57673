//! The genesis state: an empty store, or a deterministic state of `keys` Workload B
//! entries (20-byte keys, 100-byte values, from `bavl_workload::initial(seed)`) named in
//! the genesis file's `app_state`, so that every validator starts from the same large
//! state without millions of transactions (the chain experiments of
//! `docs/results/chain.json` start from 1M keys this way).
//!
//! [`build`] makes the state in memory (the reference); [`build_paged`] makes the same
//! tree in a paged store within a budget, which is what `InitChain` does.
//!
//! `app_state` is untrusted input as far as this module is concerned: it is parsed
//! strictly (an object with at most the one key `bavl_preload`, itself holding exactly
//! `keys` and `seed`), and the key count is bounded before anything is allocated.

use std::path::Path;

use bavl_core::Tree;
use bavl_store::{CheckpointPolicy, Options, Store, StoreError};

/// The most entries a genesis may ask for: 200M (about 55 GB of state in memory).
pub const MAX_PRELOAD_KEYS: u64 = 200_000_000;

/// What the genesis `app_state` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preload {
    pub keys: u64,
    pub seed: u64,
}

/// Why an `app_state` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenesisError {
    #[error("genesis app_state is not JSON: {0}")]
    Json(String),
    #[error("genesis app_state: {0}")]
    Shape(String),
}

/// Parses `app_state` (the bytes of `RequestInitChain.app_state_bytes`): empty, `{}` or
/// `null` mean an empty state.
pub fn parse(app_state: &[u8]) -> Result<Option<Preload>, GenesisError> {
    let text = std::str::from_utf8(app_state).map_err(|e| GenesisError::Json(e.to_string()))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| GenesisError::Json(e.to_string()))?;
    let shape = |what: &str| GenesisError::Shape(what.to_string());
    let obj = match v {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::Object(o) => o,
        _ => return Err(shape("must be an object")),
    };
    if let Some(other) = obj.keys().find(|k| *k != "bavl_preload") {
        return Err(GenesisError::Shape(format!("unknown field {other:?} (only bavl_preload)")));
    }
    let Some(p) = obj.get("bavl_preload") else { return Ok(None) };
    let p = p.as_object().ok_or_else(|| shape("bavl_preload must be an object"))?;
    if p.len() != 2 {
        return Err(shape("bavl_preload holds exactly `keys` and `seed`"));
    }
    let num = |name: &str| {
        p.get(name)
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| GenesisError::Shape(format!("bavl_preload.{name}: an unsigned integer")))
    };
    let (keys, seed) = (num("keys")?, num("seed")?);
    if keys > MAX_PRELOAD_KEYS {
        return Err(GenesisError::Shape(format!("{keys} keys (at most {MAX_PRELOAD_KEYS})")));
    }
    Ok(Some(Preload { keys, seed }))
}

/// Builds the preloaded state: `keys` distinct entries (a repeated random key, which
/// 20 random bytes make vanishingly rare, is skipped and another drawn).
pub fn build(p: Preload, capacity: Option<u32>) -> Result<Tree, String> {
    let mut tree = match capacity {
        Some(c) => Tree::with_capacity(c).map_err(|e| e.to_string())?,
        None => Tree::new(),
    };
    for (k, v) in bavl_workload::initial(p.seed) {
        if tree.len() >= p.keys {
            break;
        }
        tree.insert(&k, &v).map_err(|e| e.to_string())?;
    }
    Ok(tree)
}

/// Builds the preloaded state in a paged store at `dir` (which must be missing or empty)
/// with `cache_bytes` of bodies in memory: the same operations as [`build`], hence the
/// same tree and root, committed every so many inserts that a commit's written chunks
/// (about 8 KiB each at most) fill at most half the budget. The store's version numbers
/// count those commits; the caller copies its last version into the live store at height
/// 0 (`crate::block`). Memory: the budget and the skeleton, whatever `p.keys`.
pub fn build_paged(
    p: Preload,
    capacity: Option<u32>,
    cache_bytes: u64,
    dir: &Path,
) -> Result<Store, StoreError> {
    let opts = Options {
        capacity,
        keep_recent: 1,
        cache_bytes: Some(cache_bytes),
        // A checkpoint when the log reaches the last checkpoint's size (64 MiB at least):
        // the log stays about the state's size, and the checkpoints' skeletons do not
        // add up to the square of it.
        checkpoint: CheckpointPolicy::UNPAGED,
        ..Options::default()
    };
    let mut store = Store::open(dir, opts)?;
    let per_commit = (cache_bytes / 2 / (8 << 10)).max(1);
    let (mut keys, mut pending) = (0u64, 0u64);
    for (k, v) in bavl_workload::initial(p.seed) {
        if keys >= p.keys {
            break;
        }
        keys += u64::from(store.insert(&k, &v)?);
        pending += 1;
        if pending >= per_commit {
            store.commit()?;
            pending = 0;
        }
    }
    store.commit()?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_preload_and_refuses_anything_else() {
        assert_eq!(parse(b"").unwrap(), None);
        assert_eq!(parse(b"{}").unwrap(), None);
        assert_eq!(parse(b"null").unwrap(), None);
        let p = parse(br#"{"bavl_preload":{"keys":1000,"seed":7}}"#).unwrap();
        assert_eq!(p, Some(Preload { keys: 1000, seed: 7 }));
        for bad in [
            &br#"{"bavl_preload":{"keys":-1,"seed":7}}"#[..],
            br#"{"bavl_preload":{"keys":1000}}"#,
            br#"{"bavl_preload":{"keys":1,"seed":2,"x":3}}"#,
            br#"{"bavl_preload":{"keys":1e30,"seed":7}}"#,
            br#"{"bavl_preload":{"keys":300000000,"seed":7}}"#,
            br#"{"accounts":[]}"#,
            br#"[1,2]"#,
            b"{",
            b"\xff",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_preload_is_deterministic_and_exact() {
        let p = Preload { keys: 5000, seed: 3 };
        let (mut a, mut b) = (build(p, Some(16)).unwrap(), build(p, Some(16)).unwrap());
        assert_eq!(a.len(), 5000);
        assert_eq!(a.root_hash(), b.root_hash());
        let mut other = build(Preload { seed: 4, ..p }, Some(16)).unwrap();
        assert_ne!(a.root_hash(), other.root_hash());
    }
}
