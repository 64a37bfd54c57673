//! The durable store's files from untrusted bytes: a fixture store (in memory) whose
//! newest log segment or checkpoint is replaced by the input. Opening and `check` must
//! never panic; a store that opens must be at one of the versions the fixture committed
//! (same root), since a damaged file may only lose a torn tail, never invent a state; a
//! read-only open must change no file and open at the same root.
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
    let shared: std::sync::Arc<dyn bavl_store::Backend> = std::sync::Arc::new(backend.clone());
    let report = check(&shared).expect("check reads memory");
    // The in-memory store, as the fixture was written (full checkpoints).
    let opts = Options {
        capacity: None,
        keep_recent: 2,
        checkpoint: CheckpointPolicy::Manual,
        ..Options::in_memory()
    };
    // A read-only open changes no file, whatever it finds, and agrees with a writable one.
    let files = |b: &MemBackend| {
        let mut names = bavl_store::Backend::list(b).expect("list");
        names.sort();
        names.into_iter().map(|n| (b.get(&n), n)).collect::<Vec<_>>()
    };
    let before = files(&backend);
    let read_only = Options { read_only: true, ..opts.clone() };
    let seen = Store::open_backend(Arc::new(backend.clone()), read_only).map(|s| s.root());
    assert!(files(&backend) == before, "a read-only open changed a file");
    if let Ok(store) = Store::open_backend(Arc::new(backend), opts) {
        assert!(f.roots.contains(&store.root()), "opened at a state never committed");
        assert_eq!(seen.ok(), Some(store.root()), "read-only and writable opens differ");
        assert!(report.ok() || !report.problems.is_empty());
    }
});
