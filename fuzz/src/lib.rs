//! Shared by the fuzz targets and the seed generator: the fixture trees whose roots the
//! decoders are fuzzed against, and the byte layouts the targets read their inputs in
//! (each with an encoder, so `examples/make_seeds.rs` writes valid seeds).
//!
//! Input layouts (all decoders are total: any byte string decodes to something):
//!
//! - `verify_chunk`:  `sel || chunk bytes`, `sel & 3` = fixture, `sel >> 2` = index (0..=63).
//! - `verify_proofs`: `sel || field a || field b || proof`, each field a length byte then
//!   that many bytes; `sel & 3` = fixture, `(sel >> 2) & 3` = mode (membership: a = key,
//!   b = value; absence: a = key; range: a = lo, b = hi), `(sel >> 4) & 3` and `sel >> 6`
//!   = lo and hi bound kinds (0 unbounded, 1 included, 2 excluded, 3 included).
//! - `restore`:       `sel || record*`, record = `index u8 || len u16 LE || bytes`
//!   (a short last record takes what is left).
//! - `roundtrip`:     `cap || (op u8, k u8)*`, capacity `4 + cap % 5`; see [`Op`].
//! - `forge`:         see [`ForgeInput`].

pub mod cluster;
pub mod forge;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::OnceLock;

use bavl_core::{Digest, Snapshot, Tree};

/// A tree whose snapshot the decoders are fuzzed against.
pub struct Fixture {
    pub name: &'static str,
    pub snap: Snapshot,
    pub root: Digest,
    pub capacity: u32,
    /// `export_chunk(i)` for every chunk.
    pub chunks: Vec<Vec<u8>>,
    /// Every entry, in key order.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// `(keys before, entries)` of every chunk.
    pub chunk_spans: Vec<(u64, u64)>,
    /// The tree rebuilt independently from its exported chunks (for the `forge` target).
    pub mirror: Option<forge::MNode>,
}

impl Fixture {
    fn build(
        name: &'static str,
        capacity: u32,
        ops: impl IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>,
    ) -> Self {
        let mut tree = Tree::with_capacity(capacity).expect("fixture capacity");
        for (k, v) in ops {
            match v {
                Some(v) => {
                    tree.insert(&k, &v).expect("fixture entry");
                }
                None => {
                    tree.remove(&k);
                }
            }
        }
        tree.check().expect("fixture tree is valid");
        let snap = tree.snapshot();
        let root = snap.root_hash();
        let chunks: Vec<Vec<u8>> = (0..snap.chunk_count())
            .map(|i| snap.export_chunk(i).expect("chunk in range"))
            .collect();
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            snap.iter().expect("resident").map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        // The fixtures themselves must be valid, or every oracle below is meaningless.
        let mut seen = Vec::new();
        let mut chunk_spans = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let vc = bavl_core::verify_chunk::<bavl_core::Sha256>(&root, i as u64, c)
                .expect("fixture chunk verifies");
            assert_eq!(vc.keys_before, seen.len() as u64);
            chunk_spans.push((vc.keys_before, vc.len() as u64));
            seen.extend(vc.entries().map(|(k, v)| (k.to_vec(), v.to_vec())));
        }
        assert_eq!(seen, entries);
        let mirror = forge::mirror(&root, capacity, &chunks);
        Fixture { name, snap, root, capacity, chunks, entries, chunk_spans, mirror }
    }

    /// Position of `key` among the entries.
    pub fn index_of(&self, key: &[u8]) -> Option<usize> {
        self.entries.binary_search_by(|(k, _)| k.as_slice().cmp(key)).ok()
    }
}

/// A deterministic generator for the fixtures (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The key of the main fixture's entry `i` (even `i` are present, odd ones absent).
pub fn main_key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

fn build_fixtures() -> [Fixture; 4] {
    // 0: the main fixture: capacity 4, 50 keys (even numbers; odd ones are gaps).
    let main = Fixture::build(
        "main",
        4,
        (0..50u32).map(|i| (main_key(2 * i), Some(vec![b'v'; (i % 7) as usize]))),
    );
    // 1: a single chunk (the root is the chunk itself).
    let single =
        Fixture::build("single", 4, (0..3u32).map(|i| (main_key(2 * i), Some(vec![i as u8; 3]))));
    // 2: the empty tree.
    let empty = Fixture::build("empty", 4, std::iter::empty());
    // 3: capacity 7 (in-chunk trees of every shape), random order, varied key and value
    //    lengths including 2-byte varints, some removals.
    let mut rng = Rng(7);
    let mut ops = Vec::new();
    for _ in 0..160 {
        let n = rng.below(1000) as u32;
        let mut k = main_key(n);
        k.resize(k.len() + rng.below(4) as usize * 60, b'x');
        let v = vec![(n % 251) as u8; [0, 1, 5, 200][rng.below(4) as usize]];
        ops.push((k.clone(), Some(v)));
        if rng.below(5) == 0 {
            ops.push((k, None));
        }
    }
    let mixed = Fixture::build("mixed", 7, ops);
    [main, single, empty, mixed]
}

/// The four fixtures: `main`, `single`, `empty`, `mixed`; built once per process.
pub fn fixtures() -> &'static [Fixture; 4] {
    static F: OnceLock<[Fixture; 4]> = OnceLock::new();
    F.get_or_init(build_fixtures)
}

/// The fixture a selector byte names.
pub fn fixture(sel: u8) -> &'static Fixture {
    &fixtures()[(sel & 3) as usize]
}

// ---- verify_chunk ----

pub fn decode_chunk_input(data: &[u8]) -> Option<(u8, u64, &[u8])> {
    let (&sel, rest) = data.split_first()?;
    Some((sel & 3, u64::from(sel >> 2), rest))
}

pub fn encode_chunk_input(fixture: u8, index: u64, bytes: &[u8]) -> Vec<u8> {
    assert!(fixture < 4 && index < 64);
    let mut out = vec![fixture | (index as u8) << 2];
    out.extend_from_slice(bytes);
    out
}

// ---- verify_proofs ----

pub const MEMBERSHIP: u8 = 0;
pub const ABSENCE: u8 = 1;
pub const RANGE: u8 = 2;

pub struct ProofInput<'a> {
    pub fixture: u8,
    /// `MEMBERSHIP`, `ABSENCE` or `RANGE` (mode 3 is read as `RANGE`).
    pub mode: u8,
    pub lo_kind: u8,
    pub hi_kind: u8,
    pub a: &'a [u8],
    pub b: &'a [u8],
    pub proof: &'a [u8],
}

fn field<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let Some((&n, rest)) = data.split_first() else { return &[] };
    let n = (n as usize).min(rest.len());
    let (f, rest) = rest.split_at(n);
    *data = rest;
    f
}

pub fn decode_proof_input(data: &[u8]) -> Option<ProofInput<'_>> {
    let (&sel, mut rest) = data.split_first()?;
    let a = field(&mut rest);
    let b = field(&mut rest);
    Some(ProofInput {
        fixture: sel & 3,
        mode: ((sel >> 2) & 3).min(RANGE),
        lo_kind: (sel >> 4) & 3,
        hi_kind: sel >> 6,
        a,
        b,
        proof: rest,
    })
}

pub fn bound(kind: u8, key: &[u8]) -> Bound<&[u8]> {
    match kind {
        0 => Bound::Unbounded,
        2 => Bound::Excluded(key),
        _ => Bound::Included(key),
    }
}

fn bound_kind(b: Bound<&[u8]>) -> (u8, &[u8]) {
    match b {
        Bound::Unbounded => (0, &[]),
        Bound::Included(k) => (1, k),
        Bound::Excluded(k) => (2, k),
    }
}

pub fn encode_proof_input(
    fixture: u8,
    mode: u8,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    a: &[u8],
    b: &[u8],
    proof: &[u8],
) -> Vec<u8> {
    assert!(a.len() < 256 && b.len() < 256);
    let (lk, lo_key) = bound_kind(lo);
    let (hk, hi_key) = bound_kind(hi);
    let (a, b) = if mode == RANGE { (lo_key, hi_key) } else { (a, b) };
    let mut out = vec![fixture | mode << 2 | lk << 4 | hk << 6, a.len() as u8];
    out.extend_from_slice(a);
    out.push(b.len() as u8);
    out.extend_from_slice(b);
    out.extend_from_slice(proof);
    out
}

// ---- restore ----

/// `(index, bytes)` pairs for `Restore::add_chunk`.
pub type Records<'a> = Vec<(u64, &'a [u8])>;

pub fn decode_restore_input(data: &[u8]) -> Option<(u8, Records<'_>)> {
    let (&sel, mut rest) = data.split_first()?;
    let mut records = Vec::new();
    while let Some((&index, r)) = rest.split_first() {
        let (len, r) = match r {
            [a, b, r @ ..] => (u16::from_le_bytes([*a, *b]) as usize, r),
            _ => (0, &[][..]),
        };
        let (bytes, r) = r.split_at(len.min(r.len()));
        records.push((u64::from(index), bytes));
        rest = r;
    }
    Some((sel & 3, records))
}

pub fn encode_restore_input(fixture: u8, records: &[(u64, &[u8])]) -> Vec<u8> {
    let mut out = vec![fixture];
    for (i, b) in records {
        assert!(*i < 256 && b.len() <= usize::from(u16::MAX));
        out.push(*i as u8);
        out.extend_from_slice(&(b.len() as u16).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

// ---- roundtrip ----

#[derive(Debug, Clone)]
pub enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    /// Snapshot and check everything (exercises lazy rehashing between edits).
    Check,
}

/// The key that byte `k` names: one byte for most, longer for the top values, up to the
/// 1024-byte maximum.
pub fn op_key(k: u8) -> Vec<u8> {
    match k {
        0xff => vec![0xff; bavl_core::MAX_KEY_LEN],
        0xfe => vec![0xfe; 200],
        0xc0..=0xfd => vec![k; usize::from(k - 0xbe)],
        _ => vec![k],
    }
}

fn op_value(o: u8) -> Vec<u8> {
    if o % 16 == 15 {
        vec![o; 300]
    } else {
        vec![o; usize::from(o % 7)]
    }
}

/// `(o, k)`: `o < 0xa0` inserts `op_key(k)` with a value derived from `o`, `o < 0xf0`
/// removes it, otherwise checks.
pub fn decode_op(o: u8, k: u8) -> Op {
    match o {
        0x00..=0x9f => Op::Insert(op_key(k), op_value(o)),
        0xa0..=0xef => Op::Remove(op_key(k)),
        _ => Op::Check,
    }
}

pub fn decode_roundtrip_input(data: &[u8]) -> Option<(u32, Vec<Op>)> {
    let (&cap, rest) = data.split_first()?;
    let ops = rest.chunks_exact(2).map(|p| decode_op(p[0], p[1])).collect();
    Some((4 + u32::from(cap % 5), ops))
}

pub const INSERT: u8 = 0x00;
pub const REMOVE: u8 = 0xa0;
pub const CHECK: u8 = 0xf0;

/// The model a roundtrip run is compared against.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

// ---- forge ----

/// What a `forge` input asks for: `sel || which || params || dlo i8 || dhi i8 || choices*`.
/// `sel & 3` = fixture, `sel & 4` = free mode (a choice per node may flip it);
/// `which % 4`: 0 membership (params `j, alter`), 1 absence (`j, variant`), 2 range
/// (`lo kind, lo j, lo variant, hi kind, hi j, hi variant`), 3 chunk (`i`). The proof
/// expands the leaf run the honest prover would, moved by `dlo`/`dhi`; the remaining bytes
/// are the emitter's choices (leaf kinds, flips). All zeros after the parameters gives
/// exactly the honest proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    /// Subject entry `j`; `alter`: 0 true, 1 wrong value, 2 absent key, 3 both.
    Membership { j: u8, alter: u8 },
    /// Key `variant_key(j, variant)`.
    Absence { j: u8, variant: u8 },
    /// Bound kinds 0 included, 1 excluded, 2 unbounded; keys `variant_key(j, variant)`.
    Range { lo: (u8, u8, u8), hi: (u8, u8, u8) },
    /// Chunk index `i % (chunk count + 1)`.
    Chunk { i: u8 },
}

pub struct ForgeInput<'a> {
    pub fixture: u8,
    pub free: bool,
    pub forge: Forge,
    pub dlo: i64,
    pub dhi: i64,
    pub choices: forge::Choices<'a>,
}

pub fn decode_forge_input(data: &[u8]) -> ForgeInput<'_> {
    let mut c = forge::Choices(data);
    let sel = c.u8();
    let forge = match c.u8() % 4 {
        0 => Forge::Membership { j: c.u8(), alter: c.u8() % 4 },
        1 => Forge::Absence { j: c.u8(), variant: c.u8() },
        2 => Forge::Range { lo: (c.u8() % 3, c.u8(), c.u8()), hi: (c.u8() % 3, c.u8(), c.u8()) },
        _ => Forge::Chunk { i: c.u8() },
    };
    let (dlo, dhi) = (c.i8(), c.i8());
    ForgeInput { fixture: sel & 3, free: sel & 4 != 0, forge, dlo, dhi, choices: c }
}

pub fn encode_forge_input(
    fixture: u8,
    free: bool,
    forge: Forge,
    dlo: i8,
    dhi: i8,
    choices: &[u8],
) -> Vec<u8> {
    let mut out = vec![fixture | if free { 4 } else { 0 }];
    match forge {
        Forge::Membership { j, alter } => out.extend([0, j, alter]),
        Forge::Absence { j, variant } => out.extend([1, j, variant]),
        Forge::Range { lo, hi } => out.extend([2, lo.0, lo.1, lo.2, hi.0, hi.1, hi.2]),
        Forge::Chunk { i } => out.extend([3, i]),
    }
    out.extend([dlo as u8, dhi as u8]);
    out.extend_from_slice(choices);
    out
}

/// A key near entry `j % n` of `entries`: 0 the key itself, 1 the key followed by a zero
/// byte (strictly between it and the next), 2 the key without its last byte (before it),
/// 3 a key after every key.
pub fn variant_key(entries: &[(Vec<u8>, Vec<u8>)], j: u8, variant: u8) -> Vec<u8> {
    let Some((k, _)) = entries.get(usize::from(j) % entries.len().max(1)) else {
        return vec![b'k'; 1 + usize::from(variant % 4)];
    };
    match variant % 4 {
        0 => k.clone(),
        1 => [k.as_slice(), &[0]].concat(),
        2 => k[..k.len() - 1].to_vec(),
        _ => vec![0xff; 3],
    }
}

// ---- store_files: the durable store's files (log segments, checkpoints) ----

/// A small durable store in memory: its files and the root of every version it committed.
pub struct StoreFixture {
    pub files: Vec<(String, Vec<u8>)>,
    pub roots: Vec<Digest>,
}

/// The files to fuzz, by the selector byte of an input.
pub const STORE_TARGETS: [&str; 2] = ["wal-", "ckpt-"];

pub fn store_fixture() -> &'static StoreFixture {
    static F: OnceLock<StoreFixture> = OnceLock::new();
    F.get_or_init(|| {
        use bavl_store::{CheckpointPolicy, MemBackend, Options, Store};
        let backend = MemBackend::new();
        // The in-memory store, explicitly: its checkpoints are the full ones (`ckpt-`)
        // that STORE_TARGETS fuzzes.
        let opts = Options {
            capacity: Some(4),
            keep_recent: 2,
            checkpoint: CheckpointPolicy::Manual,
            ..Options::in_memory()
        };
        let mut store = Store::open_backend(std::sync::Arc::new(backend.clone()), opts)
            .expect("in-memory store");
        let mut roots = vec![store.root()];
        let mut rng = Rng(7);
        for v in 0..16u32 {
            for _ in 0..6 {
                let k = main_key(rng.below(40) as u32);
                if rng.below(4) == 0 {
                    store.remove(&k).expect("remove");
                } else {
                    store.insert(&k, &v.to_le_bytes()).expect("insert");
                }
            }
            roots.push(store.commit().expect("commit").1);
            if v == 9 {
                store.checkpoint().expect("checkpoint");
                store.wait_checkpoint().expect("checkpoint");
            }
        }
        store.close().expect("close");
        let mut files = Vec::new();
        for name in bavl_store::Backend::list(&backend).expect("list") {
            let bytes = backend.get(&name).expect("file");
            files.push((name, bytes));
        }
        StoreFixture { files, roots }
    })
}

/// Input: selector byte (which file: `STORE_TARGETS[sel % 2]`, the newest of its kind),
/// then the file's new contents.
pub fn decode_store_input(data: &[u8]) -> Option<(&'static str, &[u8])> {
    let (&sel, rest) = data.split_first()?;
    Some((STORE_TARGETS[sel as usize % STORE_TARGETS.len()], rest))
}
