//! Arbitrary bytes as an exported chunk, against the roots of the fixtures (a 50-key
//! capacity-4 tree, a single chunk, the empty tree, a capacity-7 tree with varied
//! lengths). Must never panic; anything accepted must be exactly the chunk exported at
//! that index (the encoding is canonical, and the root binds contents and index).
#![no_main]

use bavl_core::{verify_chunk, Sha256};
use bavl_fuzz::{decode_chunk_input, fixture};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((sel, index, bytes)) = decode_chunk_input(data) else { return };
    let f = fixture(sel);
    if let Ok(vc) = verify_chunk::<Sha256>(&f.root, index, bytes) {
        assert_eq!(
            Some(bytes),
            f.chunks.get(index as usize).map(Vec::as_slice),
            "fixture {}: accepted bytes are not the exported chunk {index}",
            f.name
        );
        assert_eq!(vc.index, index);
        assert_eq!(vc.chunk_count, f.chunks.len() as u64);
        assert_eq!(vc.key_count, f.entries.len() as u64);
        assert_eq!(vc.capacity, f.capacity);
        let kb = vc.keys_before as usize;
        assert!(!vc.is_empty() && kb + vc.len() <= f.entries.len());
        for ((k, v), (ek, ev)) in vc.entries().zip(&f.entries[kb..]) {
            assert_eq!((k, v), (ek.as_slice(), ev.as_slice()));
        }
    }
});
