//! Arbitrary bytes as membership, absence and range proofs (bounds and subject also from
//! the input) against the fixtures' roots. Must never panic; anything accepted must be
//! true of the fixture tree and be exactly the proof the tree itself produces (the
//! encoding is canonical).
#![no_main]

use bavl_core::{verify_absence, verify_membership, verify_range, Sha256};
use bavl_fuzz::{bound, decode_proof_input, fixture, ABSENCE, MEMBERSHIP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(inp) = decode_proof_input(data) else { return };
    let f = fixture(inp.fixture);
    let n = f.entries.len() as u64;
    match inp.mode {
        MEMBERSHIP => {
            if let Ok(m) = verify_membership::<Sha256>(&f.root, inp.a, inp.b, inp.proof) {
                let i = f
                    .index_of(inp.a)
                    .unwrap_or_else(|| panic!("{}: membership of an absent key verified", f.name));
                assert_eq!(
                    f.entries[i].1, inp.b,
                    "{}: membership with a wrong value verified",
                    f.name
                );
                assert_eq!((m.index, m.key_count), (i as u64, n));
                assert_eq!(
                    f.snap.prove_membership(inp.a).ok().as_deref(),
                    Some(inp.proof),
                    "non-canonical membership proof"
                );
            }
        }
        ABSENCE => {
            if let Ok(a) = verify_absence::<Sha256>(&f.root, inp.a, inp.proof) {
                assert!(
                    f.index_of(inp.a).is_none(),
                    "{}: absence of a present key verified",
                    f.name
                );
                assert_eq!(a.key_count, n);
                assert_eq!(
                    f.snap.prove_absence(inp.a).ok().as_deref(),
                    Some(inp.proof),
                    "non-canonical absence proof"
                );
            }
        }
        _ => {
            let (lo, hi) = (bound(inp.lo_kind, inp.a), bound(inp.hi_kind, inp.b));
            if let Ok(r) = verify_range::<Sha256>(&f.root, lo, hi, inp.proof) {
                let expect: Vec<(Vec<u8>, Vec<u8>)> = f
                    .snap
                    .range(lo, hi)
                    .expect("resident")
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect();
                assert_eq!(
                    r.entries, expect,
                    "{}: range proof verified with wrong entries",
                    f.name
                );
                assert_eq!(r.key_count, n);
                assert_eq!(
                    f.snap.prove_range(lo, hi).ok().as_deref(),
                    Some(inp.proof),
                    "non-canonical range proof"
                );
            }
        }
    }
});
