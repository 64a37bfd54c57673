//! The AVL* tree (Fynn et al., *Robust and Fast Blockchain State Synchronization*, OPODIS
//! 2022), following the appendix's Algorithms 1-4.
//!
//! An AVL+ tree (values in leaves, inner nodes keyed by the smallest key of their right
//! subtree) whose leaves are grouped in chunks of at most `capacity` leaves. A chunk's
//! *root* is the lowest node above all its leaves; **Property 1**: no chunk root descends
//! from another, so the chunk roots cut the tree into "top" inner nodes and disjoint chunk
//! subtrees, and a chunk is exactly the leaves below its root. What the algorithms do:
//!
//! - *insert* (Alg. 1): a full chunk met on the way down is split at its root (its left
//!   and right subtrees become chunks, the left one keeping the chunk id, the right one
//!   taking the next id); the new leaf joins the chunk of the leaf it pairs with;
//! - *rotations* (Alg. 4): a rotation at a chunk root hands the root role to the node that
//!   takes its place; a rotation at a top node whose moving child is a chunk root first
//!   splits that chunk (the paper's "extra splits");
//! - *delete* (Alg. 3): cases (a)-(d) of §3.6, chunk roots handed down when their node is
//!   removed, and an emptied chunk's id given to the chunk with the highest id, so ids stay
//!   `0..m` (§3.6, "renumbering").
//!
//! Hash inputs (the paper hashes keys, children, heights and the chunk id of a chunk root;
//! versions are left out, these trees are not versioned):
//!
//! | tag | node | input |
//! |---|---|---|
//! | `0x10` | leaf | `0x10 \|\| u16 len key \|\| key \|\| H(0x00 \|\| value)` |
//! | `0x11` | inner | `0x11 \|\| u8 height \|\| u16 len key \|\| key \|\| c(left) \|\| c(right)` |
//! | `0x12` | chunk root | `c(x) = 0x12 \|\| u32 cid \|\| H(x)` for a chunk root `x`, else `c(x) = H(x)` |
//! | `0x13` | root | `0x13 \|\| u32 m \|\| c(top)` (m chunks; the paper puts m in block headers) |
//!
//! Deviations from the pseudo-code, each forced by it being inconsistent or incomplete:
//! `next_cid` counts chunks (Alg. 2 uses it both as the next and as the highest id); case
//! (c) of delete rebalances the pivot (Alg. 3 returns before `BALANCE`, which can leave a
//! height difference of 2); an update of an existing key changes its value in place.

mod chunk;

use crate::hash::{self, Digest};
use crate::{AuthStructure, Proof, Space, VerifyError};

pub(crate) const TAG_LEAF: u8 = 0x10;
pub(crate) const TAG_INNER: u8 = 0x11;
pub(crate) const TAG_CHUNK_ROOT: u8 = 0x12;
pub(crate) const TAG_ROOT: u8 = 0x13;
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) key: Box<[u8]>,
    /// Empty for inner nodes.
    pub(crate) value: Vec<u8>,
    pub(crate) left: u32,
    pub(crate) right: u32,
    /// 0 for a leaf.
    pub(crate) height: u8,
    /// The chunk slot this node is the root of, or `NIL`.
    pub(crate) chunk: u32,
    pub(crate) hash: Option<Digest>,
}

#[derive(Clone, Copy)]
pub(crate) struct Chunk {
    pub(crate) cid: u32,
    pub(crate) size: u32,
    pub(crate) root: u32,
}

/// The AVL* tree (see the module documentation).
#[derive(Clone)]
pub struct AvlStar {
    pub(crate) nodes: Vec<Node>,
    free: Vec<u32>,
    /// Chunk slots (stable while a chunk lives; its id may change).
    pub(crate) chunks: Vec<Chunk>,
    chunk_free: Vec<u32>,
    /// Chunk id -> slot; its length is the chunk count m.
    pub(crate) by_cid: Vec<u32>,
    pub(crate) root: u32,
    pub(crate) capacity: usize,
    keys: u64,
    /// Chunks whose id changed during the current removal (their parents need rehashing).
    renumbered: Vec<u32>,
    /// Splits made before rotations, for the paper's "4% of splits" figure.
    pub rotation_splits: u64,
    pub splits: u64,
}

pub(crate) fn leaf_hash(key: &[u8], value: &[u8]) -> Digest {
    hash::entry_hash(TAG_LEAF, key, &hash::value_hash(value))
}

pub(crate) fn inner_hash(height: u8, key: &[u8], left: &Digest, right: &Digest) -> Digest {
    hash::h(&[&[TAG_INNER, height], &(key.len() as u16).to_be_bytes(), key, left, right])
}

pub(crate) fn wrap(cid: u32, h: &Digest) -> Digest {
    hash::h(&[&[TAG_CHUNK_ROOT], &cid.to_be_bytes(), h])
}

pub(crate) fn root_commitment(m: u32, top: &Digest) -> Digest {
    hash::h(&[&[TAG_ROOT], &m.to_be_bytes(), top])
}

impl AvlStar {
    pub(crate) fn n(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    pub(crate) fn nm(&mut self, id: u32) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    pub(crate) fn is_leaf(&self, id: u32) -> bool {
        self.n(id).height == 0
    }

    pub(crate) fn alloc(&mut self, n: Node) -> u32 {
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = n;
            id
        } else {
            self.nodes.push(n);
            (self.nodes.len() - 1) as u32
        }
    }

    fn release(&mut self, id: u32) -> Node {
        self.free.push(id);
        let dead = Node {
            key: Box::default(),
            value: Vec::new(),
            left: NIL,
            right: NIL,
            height: 0,
            chunk: NIL,
            hash: None,
        };
        std::mem::replace(self.nm(id), dead)
    }

    pub(crate) fn new_leaf(&mut self, key: &[u8], value: &[u8]) -> u32 {
        let (left, right, height, chunk, hash) = (NIL, NIL, 0, NIL, None);
        self.alloc(Node {
            key: key.into(),
            value: value.to_vec(),
            left,
            right,
            height,
            chunk,
            hash,
        })
    }

    pub(crate) fn new_inner(&mut self, key: Box<[u8]>, left: u32, right: u32, height: u8) -> u32 {
        let value = Vec::new();
        self.alloc(Node { key, value, left, right, height, chunk: NIL, hash: None })
    }

    /// NEW_CHUNK: a chunk slot with the next id (`m`).
    pub(crate) fn new_chunk(&mut self, root: u32, size: u32) -> u32 {
        let c = Chunk { cid: self.by_cid.len() as u32, size, root };
        let slot = if let Some(s) = self.chunk_free.pop() {
            self.chunks[s as usize] = c;
            s
        } else {
            self.chunks.push(c);
            (self.chunks.len() - 1) as u32
        };
        self.by_cid.push(slot);
        self.nm(root).chunk = slot;
        slot
    }

    fn update_height(&mut self, id: u32) {
        let (l, r) = (self.n(id).left, self.n(id).right);
        let h = 1 + self.n(l).height.max(self.n(r).height);
        let n = self.nm(id);
        n.height = h;
        n.hash = None;
    }

    /// Makes `to` the root of `from`'s chunk.
    fn hand_chunk(&mut self, from: u32, to: u32) {
        let c = std::mem::replace(&mut self.nm(from).chunk, NIL);
        debug_assert!(c != NIL && self.n(to).chunk == NIL);
        self.nm(to).chunk = c;
        self.chunks[c as usize].root = to;
    }

    pub(crate) fn count_leaves(&self, id: u32) -> u32 {
        let mut stack = vec![id];
        let mut n = 0;
        while let Some(id) = stack.pop() {
            if self.is_leaf(id) {
                n += 1;
            } else {
                stack.push(self.n(id).left);
                stack.push(self.n(id).right);
            }
        }
        n
    }

    /// SPLIT_CHUNK (Alg. 2): the chunk rooted at `id` becomes two, rooted at its children:
    /// the left keeps the id, the right takes the next; `id` is no longer a chunk root.
    fn split_chunk(&mut self, id: u32) {
        let slot = std::mem::replace(&mut self.nm(id).chunk, NIL);
        let (l, r) = (self.n(id).left, self.n(id).right);
        // The DFS of Alg. 2 re-homes every leaf; here it counts them.
        let (ls, rs) = (self.count_leaves(l), self.count_leaves(r));
        self.chunks[slot as usize].root = l;
        self.chunks[slot as usize].size = ls;
        self.nm(l).chunk = slot;
        self.new_chunk(r, rs);
        self.nm(id).hash = None;
        self.splits += 1;
    }

    /// BALANCE (Alg. 1).
    fn balance(&mut self, id: u32) -> u32 {
        let (l, r) = (self.n(id).left, self.n(id).right);
        let h = i32::from(self.n(l).height) - i32::from(self.n(r).height);
        if h < -1 {
            self.rotate_rl(id)
        } else if h > 1 {
            self.rotate_lr(id)
        } else {
            id
        }
    }

    fn rotate_rl(&mut self, id: u32) -> u32 {
        let r = self.n(id).right;
        if self.n(self.n(r).left).height > self.n(self.n(r).right).height {
            let nr = self.rotate_r(r);
            self.nm(id).right = nr;
            self.update_height(id);
        }
        self.rotate_l(id)
    }

    fn rotate_lr(&mut self, id: u32) -> u32 {
        let l = self.n(id).left;
        if self.n(self.n(l).left).height < self.n(self.n(l).right).height {
            let nl = self.rotate_l(l);
            self.nm(id).left = nl;
            self.update_height(id);
        }
        self.rotate_r(id)
    }

    /// ROTATE_L (Alg. 4): `id` is the pivot; its right child takes its place.
    fn rotate_l(&mut self, id: u32) -> u32 {
        let p = self.n(id).right;
        if self.n(id).chunk != NIL {
            self.hand_chunk(id, p);
        } else if self.n(p).chunk != NIL {
            self.split_chunk(p);
            self.rotation_splits += 1;
        }
        self.nm(id).right = self.n(p).left;
        self.nm(p).left = id;
        self.update_height(id);
        self.update_height(p);
        p
    }

    /// ROTATE_R (Alg. 4), the mirror image.
    fn rotate_r(&mut self, id: u32) -> u32 {
        let p = self.n(id).left;
        if self.n(id).chunk != NIL {
            self.hand_chunk(id, p);
        } else if self.n(p).chunk != NIL {
            self.split_chunk(p);
            self.rotation_splits += 1;
        }
        self.nm(id).left = self.n(p).right;
        self.nm(p).right = id;
        self.update_height(id);
        self.update_height(p);
        p
    }

    /// INSERT_AUX (Alg. 1) for a key not in the tree.
    fn insert_aux(&mut self, id: u32, key: &[u8], value: &[u8], last_chunk: u32) -> u32 {
        let mut c = last_chunk;
        if self.n(id).chunk != NIL {
            c = self.n(id).chunk;
            if self.chunks[c as usize].size as usize >= self.capacity {
                // Below, each child roots its own chunk.
                self.split_chunk(id);
                c = NIL;
            }
        }
        if self.is_leaf(id) {
            assert!(c != NIL, "a leaf lies in a chunk");
            let kept = std::mem::replace(&mut self.nm(id).chunk, NIL);
            let leaf = self.new_leaf(key, value);
            self.chunks[c as usize].size += 1;
            let inner = if key < &self.n(id).key[..] {
                let k = self.n(id).key.clone();
                self.new_inner(k, leaf, id, 1)
            } else {
                self.new_inner(key.into(), id, leaf, 1)
            };
            if kept != NIL {
                self.nm(inner).chunk = kept;
                self.chunks[kept as usize].root = inner;
            }
            return inner;
        }
        if key < &self.n(id).key[..] {
            let l = self.insert_aux(self.n(id).left, key, value, c);
            self.nm(id).left = l;
        } else {
            let r = self.insert_aux(self.n(id).right, key, value, c);
            self.nm(id).right = r;
        }
        self.update_height(id);
        self.balance(id)
    }

    /// DELETE_FROM_CHUNK (Alg. 2): removes leaf `leaf` of chunk slot `c`; an emptied
    /// chunk gives its id to the chunk with the highest id.
    fn delete_from_chunk(&mut self, c: u32, leaf: u32) -> Vec<u8> {
        let v = self.release(leaf).value;
        let ch = &mut self.chunks[c as usize];
        ch.size -= 1;
        if ch.size == 0 {
            let cid = ch.cid;
            let last = self.by_cid.pop().expect("a chunk");
            if last != c {
                self.chunks[last as usize].cid = cid;
                self.by_cid[cid as usize] = last;
                self.renumbered.push(last);
            }
            self.chunk_free.push(c);
        }
        v
    }

    /// DELETE_AUX (Alg. 3) for a key in the subtree of inner node `id`.
    fn delete_aux(&mut self, id: u32, key: &[u8], last_chunk: u32, out: &mut Vec<u8>) -> u32 {
        let own = self.n(id).chunk;
        let c = if own != NIL { own } else { last_chunk };
        let (l, r) = (self.n(id).left, self.n(id).right);
        let chunk_of = |t: &Self, leaf: u32| if c == NIL { t.n(leaf).chunk } else { c };
        // (a) the left child is the leaf: the right child takes the node's place.
        if self.is_leaf(l) && &self.n(l).key[..] == key {
            *out = self.delete_from_chunk(chunk_of(self, l), l);
            if own != NIL {
                self.hand_chunk(id, r);
            }
            self.release(id);
            return r;
        }
        let is_key = &self.n(id).key[..] == key;
        // (b) the right child is the leaf: the left child takes the node's place.
        if is_key && self.is_leaf(r) {
            *out = self.delete_from_chunk(chunk_of(self, r), r);
            if own != NIL {
                self.hand_chunk(id, l);
            }
            self.release(id);
            return l;
        }
        // (c) the leaf is the right child's left child: the right child is folded in.
        if is_key && self.is_leaf(self.n(r).left) {
            let rl = self.n(r).left;
            let cc = if c != NIL {
                c
            } else if self.n(r).chunk != NIL {
                let rc = self.n(r).chunk;
                self.hand_chunk(r, self.n(r).right);
                rc
            } else {
                self.n(rl).chunk
            };
            *out = self.delete_from_chunk(cc, rl);
            let gone = self.release(r);
            let n = self.nm(id);
            n.key = gone.key;
            n.right = gone.right;
            self.update_height(id);
            return self.balance(id);
        }
        if is_key {
            // (d) the smallest inner node x of the right subtree replaces the pivot's key.
            let (k, nr) = self.delete_leaf(r, c, out);
            let n = self.nm(id);
            n.key = k;
            n.right = nr;
        } else if key < &self.n(id).key[..] {
            let nl = self.delete_aux(l, key, c, out);
            self.nm(id).left = nl;
        } else {
            let nr = self.delete_aux(r, key, c, out);
            self.nm(id).right = nr;
        }
        self.update_height(id);
        self.balance(id)
    }

    /// DELETE_LEAF of case (d): removes the leftmost leaf below inner node `id` and its
    /// parent x; returns x's key and the rebalanced subtree.
    fn delete_leaf(&mut self, id: u32, last_chunk: u32, out: &mut Vec<u8>) -> (Box<[u8]>, u32) {
        let own = self.n(id).chunk;
        let c = if own != NIL { own } else { last_chunk };
        let l = self.n(id).left;
        if self.is_leaf(l) {
            let cc = if c == NIL { self.n(l).chunk } else { c };
            *out = self.delete_from_chunk(cc, l);
            let promoted = self.n(id).right;
            if own != NIL {
                // x was a chunk root: the root role passes to its descendant.
                self.hand_chunk(id, promoted);
            }
            return (self.release(id).key, promoted);
        }
        let (k, nl) = self.delete_leaf(l, c, out);
        self.nm(id).left = nl;
        self.update_height(id);
        (k, self.balance(id))
    }

    /// Marks the path to `slot`'s chunk root stale (its id, hence its wrapped hash, changed).
    fn stale_path_to(&mut self, slot: u32) {
        let target = self.chunks[slot as usize].root;
        let key: Box<[u8]> = self.min_key(target).into();
        let mut id = self.root;
        while id != target {
            self.nm(id).hash = None;
            id = if key[..] < self.n(id).key[..] { self.n(id).left } else { self.n(id).right };
        }
    }

    pub(crate) fn min_key(&self, mut id: u32) -> &[u8] {
        while !self.is_leaf(id) {
            id = self.n(id).left;
        }
        &self.n(id).key
    }

    /// The node's own hash (unwrapped).
    pub(crate) fn hash_of(&mut self, id: u32) -> Digest {
        if let Some(h) = self.n(id).hash {
            return h;
        }
        let h = if self.is_leaf(id) {
            leaf_hash(&self.n(id).key, &self.n(id).value)
        } else {
            let (l, r) = (self.n(id).left, self.n(id).right);
            let (lh, rh) = (self.contribution(l), self.contribution(r));
            inner_hash(self.n(id).height, &self.n(id).key, &lh, &rh)
        };
        self.nm(id).hash = Some(h);
        h
    }

    /// `c(x)`: the hash a parent sees (wrapped with the chunk id at a chunk root).
    pub(crate) fn contribution(&mut self, id: u32) -> Digest {
        let h = self.hash_of(id);
        match self.n(id).chunk {
            NIL => h,
            c => wrap(self.chunks[c as usize].cid, &h),
        }
    }

    /// `c(x)` from fresh cached hashes.
    pub(crate) fn cached_contribution(&self, id: u32) -> Digest {
        let h = self.n(id).hash.expect("hashed");
        match self.n(id).chunk {
            NIL => h,
            c => wrap(self.chunks[c as usize].cid, &h),
        }
    }

    /// Chunk count m.
    pub fn chunk_count(&self) -> u64 {
        self.by_cid.len() as u64
    }

    /// Inner nodes from the root down to `key`'s leaf (or where it would be), then the leaf.
    pub(crate) fn descend(&self, key: &[u8]) -> Vec<u32> {
        let mut path = Vec::new();
        let mut id = self.root;
        while id != NIL {
            path.push(id);
            if self.is_leaf(id) {
                break;
            }
            id = if key < &self.n(id).key[..] { self.n(id).left } else { self.n(id).right };
        }
        path
    }
}

impl AuthStructure for AvlStar {
    const NAME: &'static str = "AVL*";
    const SELF_VERIFIABLE_CHUNKS: bool = true;

    fn with_capacity(capacity: usize) -> Self {
        assert!(capacity >= 2, "capacity must be at least 2");
        AvlStar {
            nodes: Vec::new(),
            free: Vec::new(),
            chunks: Vec::new(),
            chunk_free: Vec::new(),
            by_cid: Vec::new(),
            root: NIL,
            capacity,
            keys: 0,
            renumbered: Vec::new(),
            rotation_splits: 0,
            splits: 0,
        }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> bool {
        assert!(!key.is_empty() && key.len() <= 1024, "key length");
        let path = self.descend(key);
        if let Some(&leaf) = path.last() {
            if &self.n(leaf).key[..] == key {
                for &id in &path {
                    self.nm(id).hash = None;
                }
                self.nm(leaf).value = value.to_vec();
                return false;
            }
            self.root = self.insert_aux(self.root, key, value, NIL);
        } else {
            // Empty tree: the first chunk, its root the new leaf.
            self.root = self.new_leaf(key, value);
            self.new_chunk(self.root, 1);
        }
        self.keys += 1;
        true
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.get(key)?;
        let mut out = Vec::new();
        if self.is_leaf(self.root) {
            let c = self.n(self.root).chunk;
            out = self.delete_from_chunk(c, self.root);
            self.root = NIL;
        } else {
            self.root = self.delete_aux(self.root, key, NIL, &mut out);
        }
        for slot in std::mem::take(&mut self.renumbered) {
            self.stale_path_to(slot);
        }
        self.keys -= 1;
        Some(out)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if self.root == NIL {
            return None;
        }
        let mut id = self.root;
        while !self.is_leaf(id) {
            id = if key < &self.n(id).key[..] { self.n(id).left } else { self.n(id).right };
        }
        (&self.n(id).key[..] == key).then(|| &self.n(id).value[..])
    }

    fn len(&self) -> u64 {
        self.keys
    }

    fn root_hash(&mut self) -> Digest {
        let top = if self.root == NIL { [0; 32] } else { self.contribution(self.root) };
        root_commitment(self.by_cid.len() as u32, &top)
    }

    fn prove(&mut self, key: &[u8]) -> Option<Proof> {
        self.get(key)?;
        self.root_hash();
        let path = self.descend(key);
        let mut steps = Vec::new();
        let (mut wrap_at, mut cid) = (0u8, 0u32);
        for (depth, &id) in path.iter().enumerate().rev() {
            if self.n(id).chunk != NIL {
                wrap_at = (path.len() - 1 - depth) as u8;
                cid = self.chunks[self.n(id).chunk as usize].cid;
            }
            if depth == 0 {
                break;
            }
            let parent = path[depth - 1];
            let p = self.n(parent);
            let left = p.left == id;
            let sib = self.cached_contribution(if left { p.right } else { p.left });
            steps.push((u8::from(!left), p.height, p.key.clone(), sib));
        }
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&(self.by_cid.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&cid.to_be_bytes());
        bytes.extend_from_slice(&[wrap_at, steps.len() as u8]);
        for (side, height, k, sib) in &steps {
            bytes.extend_from_slice(&[*side, *height]);
            hash::put_bytes(&mut bytes, k);
            bytes.extend_from_slice(sib);
        }
        Some(Proof { bytes, hashes: steps.len() })
    }

    fn verify(root: &Digest, key: &[u8], value: &[u8], proof: &[u8]) -> Result<(), VerifyError> {
        let mut r = hash::Reader::new(proof);
        let (m, cid, wrap_at, steps) = (r.u32()?, r.u32()?, r.u8()?, r.u8()?);
        if wrap_at > steps || cid >= m {
            return Err(VerifyError::Malformed("chunk root position"));
        }
        let mut cur = leaf_hash(key, value);
        for i in 0..steps {
            if i == wrap_at {
                cur = wrap(cid, &cur);
            }
            let (side, height) = (r.u8()?, r.u8()?);
            let (k, sib) = (r.key()?, r.digest()?);
            cur = match side {
                0 => inner_hash(height, k, &cur, &sib),
                1 => inner_hash(height, k, &sib, &cur),
                _ => return Err(VerifyError::Malformed("side")),
            };
        }
        if wrap_at == steps {
            cur = wrap(cid, &cur);
        }
        r.finish()?;
        if root_commitment(m, &cur) == *root {
            Ok(())
        } else {
            Err(VerifyError::RootMismatch)
        }
    }

    fn export_chunks(&mut self) -> Vec<Vec<u8>> {
        self.root_hash();
        (0..self.chunk_count()).map(|i| self.export_chunk(i)).collect()
    }

    fn verify_chunk(root: &Digest, index: u64, bytes: &[u8]) -> Result<(), VerifyError> {
        chunk::validate(root, index, bytes).map(|_| ())
    }

    fn restore(root: &Digest, capacity: usize, chunks: &[Vec<u8>]) -> Result<Self, VerifyError> {
        chunk::rebuild(root, capacity, chunks)
    }

    fn space(&self) -> Space {
        Space { keys: self.keys, chunks: self.chunk_count(), capacity: self.capacity as u64 }
    }

    fn check(&self) -> Result<(), String> {
        chunk::check(self)
    }
}
