//! An independent prover for the `forge` target: a mirror of a fixture tree rebuilt from
//! its exported chunks (parsed by the layout of `docs/design.md` section 3, hashed by the
//! public `bavl_core::hash` functions), and an emitter that writes proofs with any
//! pattern of expanded subtrees, leaf runs and leaf kinds. Every proof it writes hashes
//! to the true root, so the verifiers' structural ("kind") rules — which run only after
//! the root matches — face the proofs a malicious prover who knows the tree could send.

use bavl_core::codec::{put_bytes, put_varint, Reader};
use bavl_core::hash::{
    chunk_hash, chunk_node_hash, inner_hash, leaf_hash_of, root_hash, value_hash, EMPTY_TOP,
};
use bavl_core::{Digest, Key, Sha256};

type H = Sha256;

/// What a failed self-check of the mirror most likely means.
const DRIFT: &str =
    "the proof encoding changed: update fuzz/src/forge.rs to docs/design.md section 3";

const T_EMPTY: u8 = 0;
const T_INNER: u8 = 1;
const T_CHUNK: u8 = 2;
const T_PRUNED: u8 = 3;
pub const L_HASH: u8 = 0;
pub const L_VALUE: u8 = 1;
pub const L_SUBJECT: u8 = 2;

/// A node of the mirror tree (`Pruned` only while merging chunk proofs).
#[derive(Clone, Debug)]
pub enum MNode {
    Inner { height: u8, kc: u64, cc: u64, hash: Digest, l: Box<MNode>, r: Box<MNode> },
    Chunk { entries: Vec<(Vec<u8>, Vec<u8>)>, leaves: Vec<Digest>, hash: Digest },
    Pruned { kc: u64, cc: u64, hash: Digest },
}

impl MNode {
    pub fn hash(&self) -> Digest {
        match self {
            MNode::Inner { hash, .. } | MNode::Chunk { hash, .. } | MNode::Pruned { hash, .. } => {
                *hash
            }
        }
    }
    pub fn kc(&self) -> u64 {
        match self {
            MNode::Inner { kc, .. } | MNode::Pruned { kc, .. } => *kc,
            MNode::Chunk { entries, .. } => entries.len() as u64,
        }
    }
    pub fn cc(&self) -> u64 {
        match self {
            MNode::Inner { cc, .. } | MNode::Pruned { cc, .. } => *cc,
            MNode::Chunk { .. } => 1,
        }
    }
}

/// The RFC 6962 split: the largest power of two strictly below `n` (n >= 2).
pub fn split(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// `MTH(leaves[a..b))`.
pub fn mth(leaves: &[Digest]) -> Digest {
    match leaves.len() {
        1 => leaves[0],
        n => {
            let k = split(n);
            chunk_node_hash::<H>(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

fn parse_node(r: &mut Reader<'_>) -> MNode {
    match r.u8().expect("tag") {
        T_INNER => {
            let height = r.u8().expect("height");
            let l = parse_node(r);
            let r_ = parse_node(r);
            let (kc, cc) = (l.kc() + r_.kc(), l.cc() + r_.cc());
            let hash = inner_hash::<H>(height, kc, cc, &l.hash(), &r_.hash());
            MNode::Inner { height, kc, cc, hash, l: Box::new(l), r: Box::new(r_) }
        }
        T_CHUNK => {
            let n = r.varint().expect("n") as usize;
            assert_eq!(
                (r.varint().expect("p"), r.varint().expect("q")),
                (0, n as u64),
                "exported chunk is full: {}",
                DRIFT
            );
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                assert_eq!(r.u8().expect("leaf tag"), L_VALUE);
                let k = r.bytes(usize::MAX, "key").expect("key").to_vec();
                let v = r.bytes(usize::MAX, "value").expect("value").to_vec();
                entries.push((k, v));
            }
            let leaves: Vec<Digest> = entries
                .iter()
                .map(|(k, v)| leaf_hash_of::<H>(Key::new(k).expect("a tree's key"), v))
                .collect();
            let hash = chunk_hash::<H>(n as u32, &mth(&leaves));
            MNode::Chunk { entries, leaves, hash }
        }
        T_PRUNED => {
            let kc = r.varint().expect("kc");
            let cc = r.varint().expect("cc");
            let hash = r.digest().expect("hash");
            MNode::Pruned { kc, cc, hash }
        }
        t => panic!("unexpected tag {t} in an exported chunk: {DRIFT}"),
    }
}

fn merge(a: MNode, b: MNode) -> MNode {
    match (a, b) {
        (MNode::Pruned { .. }, x) | (x, MNode::Pruned { .. }) => x,
        (MNode::Inner { height, kc, cc, hash, l, r }, MNode::Inner { l: l2, r: r2, .. }) => {
            MNode::Inner {
                height,
                kc,
                cc,
                hash,
                l: Box::new(merge(*l, *l2)),
                r: Box::new(merge(*r, *r2)),
            }
        }
        (a @ MNode::Chunk { .. }, MNode::Chunk { .. }) => a,
        _ => panic!("exported chunks disagree on the tree's shape: {DRIFT}"),
    }
}

fn assert_complete(n: &MNode) {
    match n {
        MNode::Pruned { .. } => panic!("a subtree is in no exported chunk: {DRIFT}"),
        MNode::Inner { l, r, .. } => {
            assert_complete(l);
            assert_complete(r);
        }
        MNode::Chunk { .. } => {}
    }
}

/// The whole tree, from all its exported chunks; `None` for the empty tree. Checks that
/// the hashes recomputed from the specification give `root`.
pub fn mirror(root: &Digest, capacity: u32, chunks: &[Vec<u8>]) -> Option<MNode> {
    let mut tree: Option<MNode> = None;
    for c in chunks {
        let mut r = Reader::new(c);
        assert_eq!((r.u8().unwrap(), r.u8().unwrap()), (1, 3), "chunk header: {}", DRIFT);
        assert_eq!(r.varint().unwrap(), u64::from(capacity));
        let n = parse_node(&mut r);
        r.finish().expect("no trailing bytes");
        tree = Some(match tree {
            None => n,
            Some(t) => merge(t, n),
        });
    }
    let top = tree.as_ref().map_or(EMPTY_TOP, MNode::hash);
    assert_eq!(
        root_hash::<H>(capacity, &top),
        *root,
        "specification hashes do not give the root: {}",
        DRIFT
    );
    if let Some(t) = &tree {
        assert_complete(t);
    }
    tree
}

/// A byte stream of choices; zeros once exhausted (zero is always the natural choice).
pub struct Choices<'a>(pub &'a [u8]);

impl Choices<'_> {
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    pub fn i8(&mut self) -> i64 {
        i64::from(self.u8() as i8)
    }
}

/// Writes a proof of kind `kind` expanding the leaves `lo..hi` (global indices) and
/// every node over them. With `free`, a choice byte per node can flip it (expanding a
/// subtree off the run, or pruning one on it). Leaf kinds: a choice byte per expanded
/// leaf, 0 = `natural(index)`, else 1 hash, 2 value, 3 subject.
pub struct Emitter<'c, 'd, F: Fn(u64) -> u8> {
    pub out: Vec<u8>,
    pub lo: u64,
    pub hi: u64,
    pub free: bool,
    pub natural: F,
    pub choices: &'c mut Choices<'d>,
}

impl<F: Fn(u64) -> u8> Emitter<'_, '_, F> {
    pub fn emit(mut self, kind: u8, capacity: u32, tree: Option<&MNode>) -> Vec<u8> {
        self.out.extend([1, kind]);
        put_varint(&mut self.out, capacity.into());
        match tree {
            None => self.out.push(T_EMPTY),
            Some(t) => self.node(t, 0),
        }
        self.out
    }

    fn flip(&mut self) -> bool {
        self.free && self.choices.u8() & 1 == 1
    }

    fn pruned(&mut self, n: &MNode) {
        self.out.push(T_PRUNED);
        put_varint(&mut self.out, n.kc());
        put_varint(&mut self.out, n.cc());
        self.out.extend_from_slice(&n.hash());
    }

    fn node(&mut self, n: &MNode, offset: u64) {
        let on_run = self.lo < self.hi && offset < self.hi && offset + n.kc() > self.lo;
        if on_run == self.flip() {
            return self.pruned(n);
        }
        match n {
            MNode::Inner { height, l, r, .. } => {
                self.out.extend([T_INNER, *height]);
                self.node(l, offset);
                self.node(r, offset + l.kc());
            }
            MNode::Chunk { entries, leaves, .. } => {
                let m = entries.len() as u64;
                let (p, e) = if on_run {
                    (self.lo.saturating_sub(offset), (self.hi - offset).min(m))
                } else {
                    // Expanded off the run: a choice picks the leaves.
                    let p = u64::from(self.choices.u8()) % m;
                    (p, p + 1 + u64::from(self.choices.u8()) % (m - p))
                };
                self.out.push(T_CHUNK);
                put_varint(&mut self.out, m);
                put_varint(&mut self.out, p);
                put_varint(&mut self.out, e - p);
                self.in_chunk(entries, leaves, 0, entries.len(), p as usize, e as usize, offset);
            }
            MNode::Pruned { .. } => unreachable!("mirror trees are complete"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn in_chunk(
        &mut self,
        entries: &[(Vec<u8>, Vec<u8>)],
        leaves: &[Digest],
        a: usize,
        b: usize,
        p: usize,
        e: usize,
        offset: u64,
    ) {
        if b <= p || a >= e {
            self.out.extend_from_slice(&mth(&leaves[a..b]));
        } else if b - a == 1 {
            let (k, v) = &entries[a];
            let kind = match self.choices.u8() % 4 {
                0 => (self.natural)(offset + a as u64),
                c => c - 1,
            };
            self.out.push(kind);
            match kind {
                L_HASH => {
                    put_bytes(&mut self.out, k);
                    self.out.extend_from_slice(&value_hash::<H>(v));
                }
                L_VALUE => {
                    put_bytes(&mut self.out, k);
                    put_bytes(&mut self.out, v);
                }
                _ => {}
            }
        } else {
            let k = split(b - a);
            self.in_chunk(entries, leaves, a, a + k, p, e, offset);
            self.in_chunk(entries, leaves, a + k, b, p, e, offset);
        }
    }
}
