//! The durable store's files from untrusted bytes: a fixture store (in memory) whose
//! newest log segment or checkpoint is replaced by the input. Opening and `check` must
//! never panic; a store that opens must be at one of the versions the fixture committed
//! (same root), since a damaged file may only lose a torn tail, never invent a state.
#![no_main]

use std::sync::Arc;

use bavl_fuzz::{decode_store_input, store_fixture};
use bavl_store::{check::check, CheckpointPolicy, MemBackend, Options, Store};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((prefix, bytes)) = decode_store_input(data) else { return };
    let f = store_fixture();
    let backend = MemBackend::new();
    let target = f.files.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(n, _)| n).max();
    for (name, contents) in &f.files {
        if Some(name) == target {
            backend.put(name, bytes.to_vec());
        } else {
            backend.put(name, contents.clone());
        }
    }
    let report = check(&backend).expect("check reads memory");
    let opts = Options {
        capacity: None,
        keep_recent: 2,
        checkpoint: CheckpointPolicy::Manual,
        ..Options::default()
    };
    if let Ok(store) = Store::open_backend(Arc::new(backend), opts) {
        assert!(f.roots.contains(&store.root()), "opened at a state never committed");
        assert!(report.ok() || !report.problems.is_empty());
    }
});
