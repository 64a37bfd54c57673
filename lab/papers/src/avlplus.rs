//! The baseline: an IAVL-like Merkle AVL+ tree, one leaf per key, values only in leaves.
//!
//! Inner nodes hold the smallest key of their right subtree, their height and the number
//! of leaves beneath them. Hash inputs (as IAVL's, without versions):
//!
//! | tag | node | input |
//! |---|---|---|
//! | `0x30` | leaf | `0x30 \|\| u8 0 \|\| u64 1 \|\| u16 len key \|\| key \|\| H(0x00 \|\| value)` |
//! | `0x31` | inner | `0x31 \|\| u8 height \|\| u64 size \|\| left \|\| right` |
//!
//! The root is the top node's hash (32 zero bytes when empty). A membership proof is the
//! path from the leaf up: `u16 steps`, then per step `u8 side (0: we are left) || u8 height
//! || u64 size || sibling hash`.
//!
//! **State transfer** is that of Tendermint/IAVL snapshots: a post-order (depth-first)
//! traversal, cut into chunks of `capacity` leaves (with the inner nodes that follow them).
//! A chunk is `u32 index || u32 nodes || nodes`, a node `u8 height || u16 len key || key`
//! followed, for a leaf, by `u32 len value || value`. The chunks carry no proof: the
//! receiver can only rebuild the whole tree ([`AvlPlus::restore`]) and compare the root.

use std::cmp::Ordering;

use crate::hash::{self, put_bytes, put_long_bytes, value_hash, Digest, Reader};
use crate::{AuthStructure, Proof, Space, VerifyError};

const TAG_LEAF: u8 = 0x30;
const TAG_INNER: u8 = 0x31;
const NIL: u32 = u32::MAX;

#[derive(Clone)]
struct Node {
    key: Box<[u8]>,
    /// Empty for inner nodes.
    value: Vec<u8>,
    left: u32,
    right: u32,
    /// 0 for a leaf.
    height: u8,
    size: u64,
    hash: Option<Digest>,
}

/// The baseline Merkle AVL+ tree (see the module documentation).
#[derive(Clone)]
pub struct AvlPlus {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    capacity: usize,
}

fn leaf_hash(key: &[u8], value: &[u8]) -> Digest {
    let vh = value_hash(value);
    hash::h(&[&[TAG_LEAF, 0], &1u64.to_be_bytes(), &(key.len() as u16).to_be_bytes(), key, &vh])
}

fn inner_hash(height: u8, size: u64, left: &Digest, right: &Digest) -> Digest {
    hash::h(&[&[TAG_INNER, height], &size.to_be_bytes(), left, right])
}

impl AvlPlus {
    fn alloc(&mut self, n: Node) -> u32 {
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
            size: 0,
            hash: None,
        };
        std::mem::replace(&mut self.nodes[id as usize], dead)
    }

    fn n(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }

    fn new_leaf(&mut self, key: &[u8], value: &[u8]) -> u32 {
        let (left, right, height, size, hash) = (NIL, NIL, 0, 1, None);
        self.alloc(Node { key: key.into(), value: value.to_vec(), left, right, height, size, hash })
    }

    fn new_inner(&mut self, key: Box<[u8]>, left: u32, right: u32) -> u32 {
        let id = self.alloc(Node {
            key,
            value: Vec::new(),
            left,
            right,
            height: 0,
            size: 0,
            hash: None,
        });
        self.update(id);
        id
    }

    /// Recomputes height and size from the children and drops the cached hash.
    fn update(&mut self, id: u32) {
        let (l, r) = (self.n(id).left, self.n(id).right);
        let height = 1 + self.n(l).height.max(self.n(r).height);
        let size = self.n(l).size + self.n(r).size;
        let n = &mut self.nodes[id as usize];
        n.height = height;
        n.size = size;
        n.hash = None;
    }

    fn balance_factor(&self, id: u32) -> i32 {
        let n = self.n(id);
        i32::from(self.n(n.left).height) - i32::from(self.n(n.right).height)
    }

    fn rotate_right(&mut self, id: u32) -> u32 {
        let l = self.n(id).left;
        self.nodes[id as usize].left = self.n(l).right;
        self.nodes[l as usize].right = id;
        self.update(id);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, id: u32) -> u32 {
        let r = self.n(id).right;
        self.nodes[id as usize].right = self.n(r).left;
        self.nodes[r as usize].left = id;
        self.update(id);
        self.update(r);
        r
    }

    fn balance(&mut self, id: u32) -> u32 {
        let bf = self.balance_factor(id);
        if bf > 1 {
            if self.balance_factor(self.n(id).left) < 0 {
                let l = self.rotate_left(self.n(id).left);
                self.nodes[id as usize].left = l;
            }
            self.rotate_right(id)
        } else if bf < -1 {
            if self.balance_factor(self.n(id).right) > 0 {
                let r = self.rotate_right(self.n(id).right);
                self.nodes[id as usize].right = r;
            }
            self.rotate_left(id)
        } else {
            id
        }
    }

    /// Returns the new subtree root and whether the key is new.
    fn insert_at(&mut self, id: u32, key: &[u8], value: &[u8]) -> (u32, bool) {
        if self.n(id).height == 0 {
            return match key.cmp(&self.n(id).key) {
                Ordering::Equal => {
                    let n = &mut self.nodes[id as usize];
                    n.value = value.to_vec();
                    n.hash = None;
                    (id, false)
                }
                Ordering::Less => {
                    let leaf = self.new_leaf(key, value);
                    let k = self.n(id).key.clone();
                    (self.new_inner(k, leaf, id), true)
                }
                Ordering::Greater => {
                    let leaf = self.new_leaf(key, value);
                    (self.new_inner(key.into(), id, leaf), true)
                }
            };
        }
        let go_left = key < &self.n(id).key[..];
        let child = if go_left { self.n(id).left } else { self.n(id).right };
        let (c, new) = self.insert_at(child, key, value);
        let n = &mut self.nodes[id as usize];
        if go_left {
            n.left = c;
        } else {
            n.right = c;
        }
        if !new {
            n.hash = None;
            return (id, false);
        }
        self.update(id);
        (self.balance(id), true)
    }

    /// IAVL's removal: returns the new subtree (NIL if it vanished), the subtree's new
    /// smallest key if it changed, and the removed value.
    fn remove_at(&mut self, id: u32, key: &[u8]) -> (u32, Option<Box<[u8]>>, Vec<u8>) {
        if self.n(id).height == 0 {
            let leaf = self.release(id);
            return (NIL, None, leaf.value);
        }
        if key < &self.n(id).key[..] {
            let (l, new_key, v) = self.remove_at(self.n(id).left, key);
            if l == NIL {
                let dead = self.release(id);
                return (dead.right, Some(dead.key), v);
            }
            self.nodes[id as usize].left = l;
            self.update(id);
            (self.balance(id), new_key, v)
        } else {
            let (r, new_key, v) = self.remove_at(self.n(id).right, key);
            if r == NIL {
                let dead = self.release(id);
                return (dead.left, None, v);
            }
            let n = &mut self.nodes[id as usize];
            n.right = r;
            if let Some(k) = new_key {
                n.key = k;
            }
            self.update(id);
            (self.balance(id), None, v)
        }
    }

    fn hash_of(&mut self, id: u32) -> Digest {
        if let Some(h) = self.n(id).hash {
            return h;
        }
        let n = self.n(id);
        let h = if n.height == 0 {
            leaf_hash(&n.key, &n.value)
        } else {
            let (height, size, l, r) = (n.height, n.size, n.left, n.right);
            let (lh, rh) = (self.hash_of(l), self.hash_of(r));
            inner_hash(height, size, &lh, &rh)
        };
        self.nodes[id as usize].hash = Some(h);
        h
    }

    /// Post-order export of every node: `(height, key, value)`.
    fn post_order(&self, id: u32, out: &mut Vec<u32>) {
        let mut stack = vec![(id, false)];
        while let Some((id, expanded)) = stack.pop() {
            let n = self.n(id);
            if n.height == 0 || expanded {
                out.push(id);
            } else {
                stack.push((id, true));
                stack.push((n.right, false));
                stack.push((n.left, false));
            }
        }
    }

    fn check_node(&self, id: u32, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<Digest, String> {
        let n = self.n(id);
        if lo.is_some_and(|lo| &n.key[..] < lo) || hi.is_some_and(|hi| &n.key[..] >= hi) {
            return Err("key out of order".into());
        }
        let h = if n.height == 0 {
            if n.size != 1 {
                return Err("leaf size".into());
            }
            leaf_hash(&n.key, &n.value)
        } else {
            let lh = self.check_node(n.left, lo, Some(&n.key))?;
            let rh = self.check_node(n.right, Some(&n.key), hi)?;
            let (l, r) = (self.n(n.left), self.n(n.right));
            if n.height != 1 + l.height.max(r.height) || l.height.abs_diff(r.height) > 1 {
                return Err("height or balance".into());
            }
            if n.size != l.size + r.size {
                return Err("size".into());
            }
            if self.min_key(n.right) != &n.key[..] {
                return Err("inner key is not the right subtree's minimum".into());
            }
            inner_hash(n.height, n.size, &lh, &rh)
        };
        if n.hash.is_some_and(|c| c != h) {
            return Err("stale cached hash".into());
        }
        Ok(h)
    }

    fn min_key(&self, mut id: u32) -> &[u8] {
        while self.n(id).height > 0 {
            id = self.n(id).left;
        }
        &self.n(id).key
    }

    fn max_key(&self, mut id: u32) -> &[u8] {
        while self.n(id).height > 0 {
            id = self.n(id).right;
        }
        &self.n(id).key
    }

    /// Depth of every leaf (the number of hashes in its proof), in key order.
    pub fn leaf_depths(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len() as usize);
        if self.root == NIL {
            return out;
        }
        let mut stack = vec![(self.root, 0u32)];
        while let Some((id, d)) = stack.pop() {
            let n = self.n(id);
            if n.height == 0 {
                out.push(d);
            } else {
                stack.push((n.right, d + 1));
                stack.push((n.left, d + 1));
            }
        }
        out
    }
}

impl AuthStructure for AvlPlus {
    const NAME: &'static str = "Baseline (AVL+)";
    const SELF_VERIFIABLE_CHUNKS: bool = false;

    fn with_capacity(capacity: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least 1");
        AvlPlus { nodes: Vec::new(), free: Vec::new(), root: NIL, capacity }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> bool {
        assert!(!key.is_empty() && key.len() <= 1024, "key length");
        if self.root == NIL {
            self.root = self.new_leaf(key, value);
            return true;
        }
        let (root, new) = self.insert_at(self.root, key, value);
        self.root = root;
        new
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.get(key)?;
        let (root, _, v) = self.remove_at(self.root, key);
        self.root = root;
        Some(v)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if self.root == NIL {
            return None;
        }
        let mut id = self.root;
        loop {
            let n = self.n(id);
            if n.height == 0 {
                return (&n.key[..] == key).then_some(&n.value[..]);
            }
            id = if key < &n.key[..] { n.left } else { n.right };
        }
    }

    fn len(&self) -> u64 {
        if self.root == NIL {
            0
        } else {
            self.n(self.root).size
        }
    }

    fn root_hash(&mut self) -> Digest {
        if self.root == NIL {
            [0; 32]
        } else {
            self.hash_of(self.root)
        }
    }

    fn prove(&mut self, key: &[u8]) -> Option<Proof> {
        self.get(key)?;
        self.root_hash();
        let mut path = Vec::new();
        let mut id = self.root;
        while self.n(id).height > 0 {
            let n = self.n(id);
            let left = key < &n.key[..];
            let sib = if left { n.right } else { n.left };
            path.push((u8::from(!left), n.height, n.size, self.n(sib).hash.expect("hashed")));
            id = if left { n.left } else { n.right };
        }
        let mut bytes = Vec::with_capacity(2 + path.len() * 42);
        bytes.extend_from_slice(&(path.len() as u16).to_be_bytes());
        for (side, height, size, sib) in path.iter().rev() {
            bytes.extend_from_slice(&[*side, *height]);
            bytes.extend_from_slice(&size.to_be_bytes());
            bytes.extend_from_slice(sib);
        }
        Some(Proof { bytes, hashes: path.len() })
    }

    fn verify(root: &Digest, key: &[u8], value: &[u8], proof: &[u8]) -> Result<(), VerifyError> {
        let mut r = Reader::new(proof);
        let steps = r.u16()?;
        let mut cur = leaf_hash(key, value);
        let mut prev_height = 0u8;
        for _ in 0..steps {
            let (side, height, size, sib) = (r.u8()?, r.u8()?, r.u64()?, r.digest()?);
            if height <= prev_height || side > 1 {
                return Err(VerifyError::Malformed("step"));
            }
            prev_height = height;
            cur = if side == 0 {
                inner_hash(height, size, &cur, &sib)
            } else {
                inner_hash(height, size, &sib, &cur)
            };
        }
        r.finish()?;
        if &cur == root {
            Ok(())
        } else {
            Err(VerifyError::RootMismatch)
        }
    }

    fn export_chunks(&mut self) -> Vec<Vec<u8>> {
        let mut order = Vec::with_capacity(self.nodes.len());
        if self.root != NIL {
            self.post_order(self.root, &mut order);
        }
        let mut chunks = Vec::new();
        let mut cur: Vec<u8> = Vec::new();
        let (mut nodes, mut leaves) = (0u32, 0usize);
        let flush = |chunks: &mut Vec<Vec<u8>>, cur: &mut Vec<u8>, nodes: &mut u32| {
            let mut c = Vec::with_capacity(8 + cur.len());
            c.extend_from_slice(&(chunks.len() as u32).to_be_bytes());
            c.extend_from_slice(&nodes.to_be_bytes());
            c.append(cur);
            chunks.push(c);
            *nodes = 0;
        };
        for (i, &id) in order.iter().enumerate() {
            let n = self.n(id);
            // A full chunk closes before its next leaf: inner nodes completing the last
            // leaves stay with them.
            if n.height == 0 && leaves == self.capacity {
                flush(&mut chunks, &mut cur, &mut nodes);
                leaves = 0;
            }
            cur.push(n.height);
            put_bytes(&mut cur, &n.key);
            if n.height == 0 {
                put_long_bytes(&mut cur, &n.value);
                leaves += 1;
            }
            nodes += 1;
            if i + 1 == order.len() {
                flush(&mut chunks, &mut cur, &mut nodes);
            }
        }
        chunks
    }

    fn verify_chunk(_root: &Digest, _index: u64, _bytes: &[u8]) -> Result<(), VerifyError> {
        Err(VerifyError::Unverifiable)
    }

    fn restore(root: &Digest, capacity: usize, chunks: &[Vec<u8>]) -> Result<Self, VerifyError> {
        let mut t = Self::with_capacity(capacity);
        let mut stack: Vec<u32> = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let mut r = Reader::new(c);
            if r.u32()? as usize != i {
                return Err(VerifyError::Inconsistent("chunk index"));
            }
            let count = hash::bounded_count(&mut r, 3)?;
            // Each chunk continues the same post-order stream.
            import_into(&mut t, &mut r, count, &mut stack)?;
            r.finish()?;
        }
        t.root = match stack.len() {
            0 => NIL,
            1 => stack[0],
            _ => return Err(VerifyError::Inconsistent("nodes left without a parent")),
        };
        if &t.root_hash() != root {
            return Err(VerifyError::RootMismatch);
        }
        Ok(t)
    }

    fn space(&self) -> Space {
        let keys = self.len();
        let capacity = self.capacity as u64;
        Space { keys, chunks: keys.div_ceil(capacity), capacity }
    }

    fn check(&self) -> Result<(), String> {
        if self.root == NIL {
            return Ok(());
        }
        self.check_node(self.root, None, None).map(|_| ())
    }
}

/// Feeds `count` post-order nodes into the importer's stack.
fn import_into(
    t: &mut AvlPlus,
    r: &mut Reader<'_>,
    count: usize,
    stack: &mut Vec<u32>,
) -> Result<(), VerifyError> {
    for _ in 0..count {
        let height = r.u8()?;
        let key = r.key()?;
        if height == 0 {
            let value = r.long_bytes()?;
            stack.push(t.new_leaf(key, value));
            continue;
        }
        let (Some(right), Some(left)) = (stack.pop(), stack.pop()) else {
            return Err(VerifyError::Inconsistent("inner node without two children"));
        };
        if t.min_key(right) != key || t.max_key(left) >= key {
            return Err(VerifyError::Inconsistent("key order"));
        }
        let id = t.new_inner(key.into(), left, right);
        if t.n(id).height != height || t.balance_factor(id).abs() > 1 {
            return Err(VerifyError::Inconsistent("height"));
        }
        stack.push(id);
    }
    Ok(())
}
