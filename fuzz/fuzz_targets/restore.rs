//! A sequence of `(index, bytes)` pairs fed to `Restore` for a fixture's root, then
//! `finish(4)`. Must never panic; a chunk is accepted only if it is the exported one, a
//! complete restore must succeed, and a successful one is the fixture's tree.
#![no_main]

use bavl_core::{Restore, Sha256};
use bavl_fuzz::{decode_restore_input, fixture};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((sel, records)) = decode_restore_input(data) else { return };
    let f = fixture(sel);
    let mut r = Restore::<Sha256>::new(f.root);
    let mut accepted = 0u64;
    for (i, bytes) in records {
        if let Ok(p) = r.add_chunk(i, bytes) {
            accepted += 1;
            assert_eq!(
                Some(bytes),
                f.chunks.get(i as usize).map(Vec::as_slice),
                "{}: accepted a foreign chunk {i}",
                f.name
            );
            assert_eq!(p.total, f.chunks.len() as u64);
            assert_eq!(p.received, accepted);
        }
        if let Some(c) = r.chunk_count() {
            assert_eq!(r.missing().count() as u64, c - accepted);
        }
    }
    let complete = r.is_complete() || f.chunks.is_empty();
    match r.finish(4) {
        Ok(mut t) => {
            assert_eq!(t.root_hash(), f.root);
            t.check().unwrap_or_else(|e| panic!("{}: restored tree is invalid: {e}", f.name));
            assert_eq!(t.capacity(), f.capacity);
            let same = t
                .iter()
                .expect("resident")
                .eq(f.entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
            assert!(same, "{}: restored entries differ", f.name);
        }
        Err(e) => assert!(!complete, "{}: a complete restore failed: {e}", f.name),
    }
});
