//! A Merkle B+tree (Fynn's thesis, the B+AVL paper's "B+tree"): leaf cells are the
//! chunks, inner cells hold up to `capacity` children, all leaves are at one depth.
//!
//! Each cell hashes the concatenation of its entries' (or children's) hashes, so a proof
//! carries **every sibling at every level**: O(b log_b n) hashes, the cost the B+AVL paper
//! criticises. Hash inputs:
//!
//! | tag | node | input |
//! |---|---|---|
//! | `0x20` | entry | `0x20 \|\| u16 len key \|\| key \|\| H(0x00 \|\| value)` |
//! | `0x21` | leaf cell | `0x21 \|\| u32 n \|\| entry_0 \|\| … \|\| entry_(n-1)` |
//! | `0x22` | inner cell | `0x22 \|\| u8 level \|\| u32 n \|\| child_0 \|\| … \|\| child_(n-1)` |
//!
//! The root is the top cell's hash (32 zero bytes when empty). A path, from the leaf cell
//! up, is `u8 levels` then per cell `u32 n || u32 pos || (n - 1) sibling hashes`; a proof
//! is the path of the key's entry; an exported chunk is `u32 index || u32 n || entries
//! (key, value) || the path above the leaf cell` (the leaf cell's hashes are recomputed
//! from the entries). Splits cut a full cell in half; removals borrow
//! from a sibling above half or merge; separators are kept equal to the smallest key of
//! the child on their right (so a restored tree routes — and evolves — identically).
//! The root does not commit to chunk counts, so a chunk's *index* is not bound by its
//! proof: the receiver places chunks by their paths when it rebuilds.

use crate::hash::{self, entry_hash, put_bytes, put_long_bytes, value_hash, Digest, Reader};
use crate::{AuthStructure, Proof, Space, VerifyError};

const TAG_ENTRY: u8 = 0x20;
const TAG_LEAF: u8 = 0x21;
const TAG_INNER: u8 = 0x22;
const NIL: u32 = u32::MAX;

#[derive(Clone, Default)]
struct Leaf {
    keys: Vec<Box<[u8]>>,
    values: Vec<Vec<u8>>,
    /// Cached entry hashes (`None`: stale).
    hashes: Vec<Option<Digest>>,
}

#[derive(Clone, Default)]
struct Inner {
    /// `seps[j]` is the smallest key under `children[j + 1]`.
    seps: Vec<Box<[u8]>>,
    children: Vec<u32>,
    level: u8,
}

#[derive(Clone)]
enum Cell {
    Leaf(Leaf),
    Inner(Inner),
}

#[derive(Clone)]
struct Node {
    cell: Cell,
    hash: Option<Digest>,
}

/// The Merkle B+tree (see the module documentation).
#[derive(Clone)]
pub struct MerkleBTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    capacity: usize,
    keys: u64,
    leaves: u64,
}

fn leaf_cell_hash(hashes: &[Digest]) -> Digest {
    let mut buf = Vec::with_capacity(5 + 32 * hashes.len());
    buf.push(TAG_LEAF);
    buf.extend_from_slice(&(hashes.len() as u32).to_be_bytes());
    hashes.iter().for_each(|h| buf.extend_from_slice(h));
    hash::h(&[&buf])
}

fn inner_cell_hash(level: u8, hashes: &[Digest]) -> Digest {
    let mut buf = Vec::with_capacity(6 + 32 * hashes.len());
    buf.extend_from_slice(&[TAG_INNER, level]);
    buf.extend_from_slice(&(hashes.len() as u32).to_be_bytes());
    hashes.iter().for_each(|h| buf.extend_from_slice(h));
    hash::h(&[&buf])
}

fn entry(key: &[u8], value: &[u8]) -> Digest {
    entry_hash(TAG_ENTRY, key, &value_hash(value))
}

/// One cell of a path: our position and the other `n - 1` hashes.
struct Step {
    pos: usize,
    siblings: Vec<Digest>,
}

fn put_path(out: &mut Vec<u8>, path: &[Step]) {
    out.push(path.len() as u8);
    for s in path {
        out.extend_from_slice(&(s.siblings.len() as u32 + 1).to_be_bytes());
        out.extend_from_slice(&(s.pos as u32).to_be_bytes());
        s.siblings.iter().for_each(|h| out.extend_from_slice(h));
    }
}

fn read_path(r: &mut Reader<'_>) -> Result<Vec<Step>, VerifyError> {
    let levels = r.u8()?;
    let mut path = Vec::new();
    for _ in 0..levels {
        let n = r.u32()? as usize;
        let pos = r.u32()? as usize;
        if n == 0 || pos >= n {
            return Err(VerifyError::Malformed("position"));
        }
        if (n - 1).saturating_mul(32) > r.remaining() {
            return Err(VerifyError::Malformed("count exceeds input"));
        }
        let siblings = (1..n).map(|_| r.digest()).collect::<Result<Vec<_>, _>>()?;
        path.push(Step { pos, siblings });
    }
    Ok(path)
}

/// Folds `leaf`, the hash at position `path[0].pos` of the leaf cell, up to the root.
fn fold(leaf_entry: Digest, path: &[Step]) -> Result<Digest, VerifyError> {
    let mut cur = leaf_entry;
    for (i, s) in path.iter().enumerate() {
        let mut all = s.siblings.clone();
        all.insert(s.pos, cur);
        cur = if i == 0 { leaf_cell_hash(&all) } else { inner_cell_hash(i as u8, &all) };
    }
    Ok(cur)
}

impl MerkleBTree {
    fn alloc(&mut self, cell: Cell) -> u32 {
        let n = Node { cell, hash: None };
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = n;
            id
        } else {
            self.nodes.push(n);
            (self.nodes.len() - 1) as u32
        }
    }

    fn take(&mut self, id: u32) -> Cell {
        self.free.push(id);
        std::mem::replace(&mut self.nodes[id as usize].cell, Cell::Leaf(Leaf::default()))
    }

    fn leaf_mut(&mut self, id: u32) -> &mut Leaf {
        match &mut self.nodes[id as usize].cell {
            Cell::Leaf(l) => l,
            Cell::Inner(_) => unreachable!("not a leaf"),
        }
    }

    fn inner_mut(&mut self, id: u32) -> &mut Inner {
        match &mut self.nodes[id as usize].cell {
            Cell::Inner(x) => x,
            Cell::Leaf(_) => unreachable!("not an inner cell"),
        }
    }

    fn len_of(&self, id: u32) -> usize {
        match &self.nodes[id as usize].cell {
            Cell::Leaf(l) => l.keys.len(),
            Cell::Inner(x) => x.children.len(),
        }
    }

    fn min_key(&self, mut id: u32) -> &[u8] {
        loop {
            match &self.nodes[id as usize].cell {
                Cell::Leaf(l) => return &l.keys[0],
                Cell::Inner(x) => id = x.children[0],
            }
        }
    }

    fn fix_seps(&mut self, id: u32) {
        let children = self.inner_mut(id).children.clone();
        let seps = children[1..].iter().map(|&c| self.min_key(c).into()).collect();
        self.inner_mut(id).seps = seps;
    }

    /// Inserts below `id`; returns the new right sibling if `id` split.
    fn insert_at(&mut self, id: u32, key: &[u8], value: &[u8]) -> (bool, Option<u32>) {
        self.nodes[id as usize].hash = None;
        let cap = self.capacity;
        if let Cell::Leaf(l) = &mut self.nodes[id as usize].cell {
            match l.keys.binary_search_by(|k| k[..].cmp(key)) {
                Ok(p) => {
                    l.values[p] = value.to_vec();
                    l.hashes[p] = None;
                    return (false, None);
                }
                Err(p) => {
                    l.keys.insert(p, key.into());
                    l.values.insert(p, value.to_vec());
                    l.hashes.insert(p, None);
                }
            }
            if l.keys.len() <= cap {
                return (true, None);
            }
            let mid = l.keys.len() / 2;
            let right = Leaf {
                keys: l.keys.split_off(mid),
                values: l.values.split_off(mid),
                hashes: l.hashes.split_off(mid),
            };
            self.leaves += 1;
            return (true, Some(self.alloc(Cell::Leaf(right))));
        }
        let x = self.inner_mut(id);
        let idx = x.seps.partition_point(|s| &s[..] <= key);
        let child = x.children[idx];
        let (new, split) = self.insert_at(child, key, value);
        let Some(right) = split else { return (new, None) };
        let sep: Box<[u8]> = self.min_key(right).into();
        let x = self.inner_mut(id);
        x.seps.insert(idx, sep);
        x.children.insert(idx + 1, right);
        if x.children.len() <= cap {
            return (new, None);
        }
        let mid = x.children.len() / 2;
        let children = x.children.split_off(mid);
        let mut seps = x.seps.split_off(mid - 1);
        seps.remove(0);
        let level = x.level;
        (new, Some(self.alloc(Cell::Inner(Inner { seps, children, level }))))
    }

    /// Removes below `id`; the caller repairs `id` if it underflows.
    fn remove_at(&mut self, id: u32, key: &[u8]) -> Option<Vec<u8>> {
        if let Cell::Leaf(l) = &mut self.nodes[id as usize].cell {
            let p = l.keys.binary_search_by(|k| k[..].cmp(key)).ok()?;
            l.keys.remove(p);
            l.hashes.remove(p);
            self.nodes[id as usize].hash = None;
            return Some(self.leaf_mut(id).values.remove(p));
        }
        let x = self.inner_mut(id);
        let idx = x.seps.partition_point(|s| &s[..] <= key);
        let child = x.children[idx];
        let v = self.remove_at(child, key)?;
        self.nodes[id as usize].hash = None;
        if self.len_of(child) < self.capacity / 2 {
            self.repair(id, idx);
        }
        let n = self.inner_mut(id).children.len();
        for j in idx.saturating_sub(2)..(idx + 1).min(n.saturating_sub(1)) {
            let c = self.inner_mut(id).children[j + 1];
            let m: Box<[u8]> = self.min_key(c).into();
            self.inner_mut(id).seps[j] = m;
        }
        Some(v)
    }

    /// Child `idx` of `id` is below half full: borrow from a sibling above half, else merge.
    fn repair(&mut self, id: u32, idx: usize) {
        let min = self.capacity / 2;
        let children = self.inner_mut(id).children.clone();
        let child = children[idx];
        if idx > 0 && self.len_of(children[idx - 1]) > min {
            self.borrow(children[idx - 1], child, true);
        } else if idx + 1 < children.len() && self.len_of(children[idx + 1]) > min {
            self.borrow(children[idx + 1], child, false);
        } else if idx > 0 {
            self.merge(id, idx - 1);
        } else if idx + 1 < children.len() {
            self.merge(id, idx);
        }
    }

    /// Moves one entry (or child) from `from` into `to`; `from_left` says where it lies.
    fn borrow(&mut self, from: u32, to: u32, from_left: bool) {
        self.nodes[from as usize].hash = None;
        self.nodes[to as usize].hash = None;
        let (a, b) = (from as usize, to as usize);
        let (src, dst) = if a < b {
            let (x, y) = self.nodes.split_at_mut(b);
            (&mut x[a].cell, &mut y[0].cell)
        } else {
            let (x, y) = self.nodes.split_at_mut(a);
            (&mut y[0].cell, &mut x[b].cell)
        };
        match (src, dst) {
            (Cell::Leaf(s), Cell::Leaf(d)) => {
                let p = if from_left { s.keys.len() - 1 } else { 0 };
                let at = if from_left { 0 } else { d.keys.len() };
                d.keys.insert(at, s.keys.remove(p));
                d.values.insert(at, s.values.remove(p));
                d.hashes.insert(at, s.hashes.remove(p));
            }
            (Cell::Inner(s), Cell::Inner(d)) => {
                let p = if from_left { s.children.len() - 1 } else { 0 };
                let at = if from_left { 0 } else { d.children.len() };
                d.children.insert(at, s.children.remove(p));
            }
            _ => unreachable!("siblings are at one level"),
        }
        if matches!(self.nodes[a].cell, Cell::Inner(_)) {
            self.fix_seps(from);
            self.fix_seps(to);
        }
    }

    /// Merges child `j + 1` of `id` into child `j`.
    fn merge(&mut self, id: u32, j: usize) {
        let x = self.inner_mut(id);
        let (left, right) = (x.children[j], x.children.remove(j + 1));
        x.seps.remove(j);
        let gone = self.take(right);
        self.nodes[left as usize].hash = None;
        match (&mut self.nodes[left as usize].cell, gone) {
            (Cell::Leaf(l), Cell::Leaf(mut r)) => {
                l.keys.append(&mut r.keys);
                l.values.append(&mut r.values);
                l.hashes.append(&mut r.hashes);
                self.leaves -= 1;
            }
            (Cell::Inner(l), Cell::Inner(mut r)) => {
                l.children.append(&mut r.children);
                self.fix_seps(left);
            }
            _ => unreachable!("siblings are at one level"),
        }
    }

    fn hash_of(&mut self, id: u32) -> Digest {
        if let Some(h) = self.nodes[id as usize].hash {
            return h;
        }
        let h = match &mut self.nodes[id as usize].cell {
            Cell::Leaf(l) => {
                for (i, h) in l.hashes.iter_mut().enumerate() {
                    if h.is_none() {
                        *h = Some(entry(&l.keys[i], &l.values[i]));
                    }
                }
                let hs: Vec<Digest> = l.hashes.iter().map(|h| h.expect("hashed")).collect();
                leaf_cell_hash(&hs)
            }
            Cell::Inner(x) => {
                let (level, children) = (x.level, x.children.clone());
                let hs: Vec<Digest> = children.iter().map(|&c| self.hash_of(c)).collect();
                inner_cell_hash(level, &hs)
            }
        };
        self.nodes[id as usize].hash = Some(h);
        h
    }

    /// Cells from the root down to the leaf holding `key` (or where it would go), with
    /// the position taken in each.
    fn descend(&self, key: &[u8]) -> Vec<(u32, usize)> {
        let mut out = Vec::new();
        let mut id = self.root;
        while let Cell::Inner(x) = &self.nodes[id as usize].cell {
            let idx = x.seps.partition_point(|s| &s[..] <= key);
            out.push((id, idx));
            id = x.children[idx];
        }
        out.push((id, 0));
        out
    }

    /// The path of a leaf (hashes must be fresh): leaf cell first.
    fn path(&self, cells: &[(u32, usize)], leaf_pos: usize) -> Vec<Step> {
        let mut path = Vec::new();
        let (leaf, _) = cells[cells.len() - 1];
        let Cell::Leaf(l) = &self.nodes[leaf as usize].cell else { unreachable!() };
        let mut siblings: Vec<Digest> = l.hashes.iter().map(|h| h.expect("hashed")).collect();
        siblings.remove(leaf_pos);
        path.push(Step { pos: leaf_pos, siblings });
        for &(id, idx) in cells[..cells.len() - 1].iter().rev() {
            let Cell::Inner(x) = &self.nodes[id as usize].cell else { unreachable!() };
            let mut siblings: Vec<Digest> =
                x.children.iter().map(|&c| self.nodes[c as usize].hash.expect("hashed")).collect();
            siblings.remove(idx);
            path.push(Step { pos: idx, siblings });
        }
        path
    }

    fn leaf_ids(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.leaves as usize);
        if self.root == NIL {
            return out;
        }
        let mut level = vec![self.root];
        loop {
            if let Cell::Leaf(_) = &self.nodes[level[0] as usize].cell {
                out = level;
                return out;
            }
            level = level
                .iter()
                .flat_map(|&id| match &self.nodes[id as usize].cell {
                    Cell::Inner(x) => x.children.clone(),
                    Cell::Leaf(_) => unreachable!("leaves are at one depth"),
                })
                .collect();
        }
    }

    fn check_cell(
        &self,
        id: u32,
        depth: u8,
        leaf_depth: &mut Option<u8>,
    ) -> Result<Digest, String> {
        let n = &self.nodes[id as usize];
        let min = if id == self.root { 1 } else { self.capacity / 2 };
        let len = self.len_of(id);
        if len < min.max(1) || len > self.capacity {
            return Err(format!("cell of {len} entries"));
        }
        let h = match &n.cell {
            Cell::Leaf(l) => {
                if *leaf_depth.get_or_insert(depth) != depth {
                    return Err("leaves at different depths".into());
                }
                if l.keys.windows(2).any(|w| w[0] >= w[1]) {
                    return Err("keys out of order".into());
                }
                let hs: Vec<Digest> = (0..len).map(|i| entry(&l.keys[i], &l.values[i])).collect();
                if l.hashes.iter().zip(&hs).any(|(c, h)| c.is_some_and(|c| c != *h)) {
                    return Err("stale entry hash".into());
                }
                leaf_cell_hash(&hs)
            }
            Cell::Inner(x) => {
                let mut hs = Vec::new();
                for (j, &c) in x.children.iter().enumerate() {
                    if j > 0 && self.min_key(c) != &x.seps[j - 1][..] {
                        return Err("separator is not the right child's smallest key".into());
                    }
                    hs.push(self.check_cell(c, depth + 1, leaf_depth)?);
                }
                inner_cell_hash(x.level, &hs)
            }
        };
        if n.hash.is_some_and(|c| c != h) {
            return Err("stale cell hash".into());
        }
        Ok(h)
    }
}

impl AuthStructure for MerkleBTree {
    const NAME: &'static str = "Merkle B+tree";
    const SELF_VERIFIABLE_CHUNKS: bool = true;

    fn with_capacity(capacity: usize) -> Self {
        assert!(capacity >= 4, "capacity must be at least 4");
        MerkleBTree { nodes: Vec::new(), free: Vec::new(), root: NIL, capacity, keys: 0, leaves: 0 }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> bool {
        assert!(!key.is_empty() && key.len() <= 1024, "key length");
        if self.root == NIL {
            self.root = self.alloc(Cell::Leaf(Leaf::default()));
            self.leaves = 1;
        }
        let (new, split) = self.insert_at(self.root, key, value);
        if let Some(right) = split {
            let level = match &self.nodes[self.root as usize].cell {
                Cell::Leaf(_) => 1,
                Cell::Inner(x) => x.level + 1,
            };
            let seps = vec![self.min_key(right).into()];
            let children = vec![self.root, right];
            self.root = self.alloc(Cell::Inner(Inner { seps, children, level }));
        }
        self.keys += u64::from(new);
        new
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        if self.root == NIL {
            return None;
        }
        let v = self.remove_at(self.root, key)?;
        self.keys -= 1;
        match &self.nodes[self.root as usize].cell {
            Cell::Inner(x) if x.children.len() == 1 => {
                let only = x.children[0];
                self.take(self.root);
                self.root = only;
            }
            Cell::Leaf(l) if l.keys.is_empty() => {
                self.take(self.root);
                self.root = NIL;
                self.leaves = 0;
            }
            _ => {}
        }
        Some(v)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if self.root == NIL {
            return None;
        }
        let mut id = self.root;
        loop {
            match &self.nodes[id as usize].cell {
                Cell::Inner(x) => id = x.children[x.seps.partition_point(|s| &s[..] <= key)],
                Cell::Leaf(l) => {
                    let p = l.keys.binary_search_by(|k| k[..].cmp(key)).ok()?;
                    return Some(&l.values[p]);
                }
            }
        }
    }

    fn len(&self) -> u64 {
        self.keys
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
        let cells = self.descend(key);
        let (leaf, _) = cells[cells.len() - 1];
        let Cell::Leaf(l) = &self.nodes[leaf as usize].cell else { unreachable!() };
        let pos = l.keys.binary_search_by(|k| k[..].cmp(key)).ok()?;
        let path = self.path(&cells, pos);
        let hashes = path.iter().map(|s| s.siblings.len()).sum();
        let mut bytes = Vec::new();
        put_path(&mut bytes, &path);
        Some(Proof { bytes, hashes })
    }

    fn verify(root: &Digest, key: &[u8], value: &[u8], proof: &[u8]) -> Result<(), VerifyError> {
        let mut r = Reader::new(proof);
        let path = read_path(&mut r)?;
        r.finish()?;
        if path.is_empty() {
            return Err(VerifyError::Malformed("empty path"));
        }
        if fold(entry(key, value), &path)? == *root {
            Ok(())
        } else {
            Err(VerifyError::RootMismatch)
        }
    }

    fn export_chunks(&mut self) -> Vec<Vec<u8>> {
        self.root_hash();
        let leaves = self.leaf_ids();
        let mut out = Vec::with_capacity(leaves.len());
        for (i, &leaf) in leaves.iter().enumerate() {
            let Cell::Leaf(l) = &self.nodes[leaf as usize].cell else { unreachable!() };
            let mut c = Vec::new();
            c.extend_from_slice(&(i as u32).to_be_bytes());
            c.extend_from_slice(&(l.keys.len() as u32).to_be_bytes());
            for (k, v) in l.keys.iter().zip(&l.values) {
                put_bytes(&mut c, k);
                put_long_bytes(&mut c, v);
            }
            // The leaf cell's own hashes are recomputed from the entries: inner levels only.
            let path = self.path(&self.descend(&l.keys[0]), 0);
            put_path(&mut c, &path[1..]);
            out.push(c);
        }
        out
    }

    fn verify_chunk(root: &Digest, index: u64, bytes: &[u8]) -> Result<(), VerifyError> {
        decode_chunk(root, index, bytes).map(|_| ())
    }

    fn restore(root: &Digest, capacity: usize, chunks: &[Vec<u8>]) -> Result<Self, VerifyError> {
        let mut t = Self::with_capacity(capacity);
        if chunks.is_empty() {
            return if *root == [0; 32] { Ok(t) } else { Err(VerifyError::RootMismatch) };
        }
        // Verify each chunk on arrival; keep its entries and its path.
        let mut level: Vec<u32> = Vec::new();
        let mut paths = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let (leaf, path) = decode_chunk(root, i as u64, c)?;
            t.keys += leaf.keys.len() as u64;
            level.push(t.alloc(Cell::Leaf(leaf)));
            paths.push(path);
        }
        t.leaves = level.len() as u64;
        // Rebuild each inner level from the sizes and positions the paths carry.
        let levels = paths[0].len();
        let mut firsts: Vec<usize> = (0..level.len()).collect();
        for lv in 1..=levels {
            let (mut next, mut next_firsts, mut i) = (Vec::new(), Vec::new(), 0);
            while i < level.len() {
                let Some(s) = paths[firsts[i]].get(lv - 1) else {
                    return Err(VerifyError::Inconsistent("chunk paths differ in length"));
                };
                let n = s.siblings.len() + 1;
                if s.pos != 0 || i + n > level.len() {
                    return Err(VerifyError::Inconsistent("chunk paths do not tile the tree"));
                }
                let children = level[i..i + n].to_vec();
                let seps = children[1..].iter().map(|&c| t.min_key(c).into()).collect();
                next.push(t.alloc(Cell::Inner(Inner { seps, children, level: lv as u8 })));
                next_firsts.push(firsts[i]);
                i += n;
            }
            level = next;
            firsts = next_firsts;
        }
        if level.len() != 1 {
            return Err(VerifyError::Inconsistent("chunk paths do not tile the tree"));
        }
        t.root = level[0];
        if t.root_hash() != *root || t.check().is_err() {
            return Err(VerifyError::RootMismatch);
        }
        Ok(t)
    }

    fn space(&self) -> Space {
        Space { keys: self.keys, chunks: self.leaves, capacity: self.capacity as u64 }
    }

    fn check(&self) -> Result<(), String> {
        if self.root == NIL {
            return Ok(());
        }
        let mut leaf_depth = None;
        self.check_cell(self.root, 0, &mut leaf_depth)?;
        if self.leaf_ids().len() as u64 != self.leaves {
            return Err("leaf count".into());
        }
        Ok(())
    }
}

/// Decodes and verifies one exported chunk against the root.
fn decode_chunk(root: &Digest, index: u64, bytes: &[u8]) -> Result<(Leaf, Vec<Step>), VerifyError> {
    let mut r = Reader::new(bytes);
    if u64::from(r.u32()?) != index {
        return Err(VerifyError::Inconsistent("chunk index"));
    }
    let n = hash::bounded_count(&mut r, 7)?;
    let mut leaf = Leaf::default();
    for _ in 0..n {
        let k = r.key()?;
        let v = r.long_bytes()?;
        if leaf.keys.last().is_some_and(|p| &p[..] >= k) {
            return Err(VerifyError::Inconsistent("keys out of order"));
        }
        leaf.hashes.push(Some(entry(k, v)));
        leaf.keys.push(k.into());
        leaf.values.push(v.to_vec());
    }
    let path = read_path(&mut r)?;
    r.finish()?;
    if n == 0 {
        return Err(VerifyError::Malformed("empty chunk"));
    }
    let hs: Vec<Digest> = leaf.hashes.iter().map(|h| h.expect("hashed")).collect();
    let mut cur = leaf_cell_hash(&hs);
    for (i, s) in path.iter().enumerate() {
        let mut all = s.siblings.clone();
        all.insert(s.pos, cur);
        cur = inner_cell_hash(i as u8 + 1, &all);
    }
    if cur != *root {
        return Err(VerifyError::RootMismatch);
    }
    Ok((leaf, path))
}
