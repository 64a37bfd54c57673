//! AVL* state transfer (§4 of the paper): a chunk with the proof of its root, its
//! validation against the root alone (Property 2) and the deterministic, height-ordered
//! rebuild (Property 3).
//!
//! A chunk is `u32 cid || u32 m || u32 n || n leaves || u8 steps || steps`, a leaf
//! `u8 height || u16 len key || key || u32 len value || value` where `height` is 0 or the
//! height of the inner node with the same key (Table 1), and a step, from the chunk root's
//! parent up, `u8 side (0: the chunk is on the left) || u8 height || u16 len key || key ||
//! sibling c(x)`. Validation rebuilds the chunk's subtree by inserting its inner nodes in
//! descending height (a leaf whose key is an ancestor's stands for that ancestor), hashes
//! it, wraps it with the chunk id and folds the steps up to the root. The rebuild links
//! the chunk subtrees and the top inner nodes named by the steps, again in descending
//! height, and compares the root.

use std::collections::BTreeMap;

use super::{inner_hash, root_commitment, wrap, AvlStar, Chunk, NIL};
use crate::hash::{self, put_bytes, put_long_bytes, Digest, Reader};
use crate::{AuthStructure, VerifyError};

/// A chunk that verified against the root.
pub(crate) struct ValidChunk {
    pub cid: u32,
    pub m: u32,
    /// `(key, value, height)` in key order.
    pub leaves: Vec<(Vec<u8>, Vec<u8>, u8)>,
    /// The chunk root's ancestors `(key, height)`, parent first.
    pub ancestors: Vec<(Vec<u8>, u8)>,
}

impl AvlStar {
    /// The chunk with id `cid` and the proof of its root (hashes must be fresh).
    pub(crate) fn export_chunk(&self, cid: u64) -> Vec<u8> {
        let slot = self.by_cid[cid as usize];
        let croot = self.chunks[slot as usize].root;
        let path = self.descend(self.min_key(croot));
        let at = path.iter().position(|&id| id == croot).expect("chunk root on its path");
        let mut heights: BTreeMap<&[u8], u8> = BTreeMap::new();
        for &a in &path[..at] {
            heights.insert(&self.n(a).key, self.n(a).height);
        }
        let mut leaves = Vec::new();
        self.in_order(croot, &mut |id| {
            let n = self.n(id);
            if n.height > 0 {
                heights.insert(&n.key, n.height);
            } else {
                leaves.push(id);
            }
        });
        let mut out = Vec::new();
        out.extend_from_slice(&(cid as u32).to_be_bytes());
        out.extend_from_slice(&(self.by_cid.len() as u32).to_be_bytes());
        out.extend_from_slice(&(leaves.len() as u32).to_be_bytes());
        for &id in &leaves {
            let n = self.n(id);
            out.push(heights.get(&n.key[..]).copied().unwrap_or(0));
            put_bytes(&mut out, &n.key);
            put_long_bytes(&mut out, &n.value);
        }
        out.push(at as u8);
        for d in (0..at).rev() {
            let p = self.n(path[d]);
            let left = p.left == path[d + 1];
            out.extend_from_slice(&[u8::from(!left), p.height]);
            put_bytes(&mut out, &p.key);
            out.extend_from_slice(&self.cached_contribution(if left { p.right } else { p.left }));
        }
        out
    }

    fn in_order(&self, id: u32, f: &mut impl FnMut(u32)) {
        if !self.is_leaf(id) {
            self.in_order(self.n(id).left, f);
        }
        f(id);
        if !self.is_leaf(id) {
            self.in_order(self.n(id).right, f);
        }
    }

    /// BST insertion of a subtree whose smallest key is `key` into the free slot it
    /// belongs to (the rebuild's step: parents are always inserted before children).
    fn attach(&mut self, at: u32, key: &[u8], sub: u32) -> Result<(), VerifyError> {
        let mut id = at;
        loop {
            let n = self.n(id);
            let left = key < &n.key[..];
            let next = if left { n.left } else { n.right };
            if next == NIL {
                if left {
                    self.nm(id).left = sub;
                } else {
                    self.nm(id).right = sub;
                }
                return Ok(());
            }
            if self.is_leaf(next) {
                return Err(VerifyError::Inconsistent("two nodes for one place"));
            }
            id = next;
        }
    }

    /// Property 3: builds a subtree from inner nodes `(key, height)` and leaves, inserting
    /// inner nodes by descending height, then each leaf into the one place left for it.
    /// Heights are checked against the shape. Returns the subtree's root.
    fn build_subtree(
        &mut self,
        mut inner: Vec<(Vec<u8>, u8)>,
        leaves: &[(Vec<u8>, Vec<u8>, u8)],
    ) -> Result<u32, VerifyError> {
        if inner.len() + 1 != leaves.len() {
            return Err(VerifyError::Inconsistent("inner node count"));
        }
        inner.sort_by_key(|a| std::cmp::Reverse(a.1));
        let mut ids = Vec::with_capacity(inner.len());
        for (k, h) in inner {
            let id = self.new_inner(k.into(), NIL, NIL, h);
            if let Some(&root) = ids.first() {
                let key = self.n(id).key.clone();
                self.attach(root, &key, id)?;
            }
            ids.push(id);
        }
        let mut leaf_ids = Vec::with_capacity(leaves.len());
        for (k, v, _) in leaves {
            let id = self.new_leaf(k, v);
            if let Some(&root) = ids.first() {
                self.attach(root, k, id)?;
            }
            leaf_ids.push(id);
        }
        let root = ids.first().copied().unwrap_or(leaf_ids[0]);
        self.check_shape(root).map_err(|_| VerifyError::Inconsistent("rebuilt shape"))?;
        Ok(root)
    }

    /// Heights, AVL balance and "key = smallest key on the right" below `id`.
    fn check_shape(&self, id: u32) -> Result<u8, String> {
        let n = self.n(id);
        if n.height == 0 {
            return Ok(0);
        }
        if n.left == NIL || n.right == NIL {
            return Err("missing child".into());
        }
        let (lh, rh) = (self.check_shape(n.left)?, self.check_shape(n.right)?);
        if n.height != 1 + lh.max(rh) || lh.abs_diff(rh) > 1 {
            return Err("height or balance".into());
        }
        if self.min_key(n.right) != &n.key[..] {
            return Err("inner key is not the right subtree's minimum".into());
        }
        Ok(n.height)
    }
}

/// Property 2: checks one chunk against the root alone.
pub(crate) fn validate(root: &Digest, index: u64, bytes: &[u8]) -> Result<ValidChunk, VerifyError> {
    let mut r = Reader::new(bytes);
    let (cid, m) = (r.u32()?, r.u32()?);
    if u64::from(cid) != index || cid >= m {
        return Err(VerifyError::Inconsistent("chunk index"));
    }
    let n = hash::bounded_count(&mut r, 7)?;
    if n == 0 {
        return Err(VerifyError::Malformed("empty chunk"));
    }
    let mut leaves: Vec<(Vec<u8>, Vec<u8>, u8)> = Vec::with_capacity(n);
    for _ in 0..n {
        let h = r.u8()?;
        let (k, v) = (r.key()?, r.long_bytes()?);
        if leaves.last().is_some_and(|p| &p.0[..] >= k) {
            return Err(VerifyError::Inconsistent("keys out of order"));
        }
        leaves.push((k.to_vec(), v.to_vec(), h));
    }
    let steps = r.u8()?;
    let mut path = Vec::new();
    for _ in 0..steps {
        let (side, height) = (r.u8()?, r.u8()?);
        let (k, sib) = (r.key()?, r.digest()?);
        if side > 1 {
            return Err(VerifyError::Malformed("side"));
        }
        path.push((side, height, k.to_vec(), sib));
    }
    r.finish()?;
    // Keys must lie on the chunk's side of every ancestor.
    let (first, last) = (&leaves[0].0, &leaves[n - 1].0);
    if path.iter().any(|(side, _, k, _)| if *side == 0 { last >= k } else { first < k }) {
        return Err(VerifyError::Inconsistent("keys outside the chunk's range"));
    }
    // A leaf whose key is an ancestor's carries that ancestor's height; others with a
    // height stand for inner nodes of the chunk's subtree.
    let ancestors: BTreeMap<&[u8], u8> = path.iter().map(|p| (&p.2[..], p.1)).collect();
    let mut inner = Vec::new();
    for (k, _, h) in &leaves {
        match ancestors.get(&k[..]) {
            Some(a) if a != h => return Err(VerifyError::Inconsistent("leaf height")),
            Some(_) => {}
            None if *h > 0 => inner.push((k.clone(), *h)),
            None => {}
        }
    }
    let mut t = AvlStar::with_capacity(n.max(2));
    let sub = t.build_subtree(inner, &leaves)?;
    let mut cur = wrap(cid, &t.hash_of(sub));
    for (side, height, k, sib) in &path {
        cur = if *side == 0 {
            inner_hash(*height, k, &cur, sib)
        } else {
            inner_hash(*height, k, sib, &cur)
        };
    }
    if root_commitment(m, &cur) != *root {
        return Err(VerifyError::RootMismatch);
    }
    let ancestors = path.into_iter().map(|(_, h, k, _)| (k, h)).collect();
    Ok(ValidChunk { cid, m, leaves, ancestors })
}

/// The deterministic rebuild: every chunk validated on arrival, then the chunk subtrees
/// and the top inner nodes linked by descending height, then the root compared.
pub(crate) fn rebuild(
    root: &Digest,
    capacity: usize,
    chunks: &[Vec<u8>],
) -> Result<AvlStar, VerifyError> {
    let mut t = AvlStar::with_capacity(capacity);
    if chunks.is_empty() {
        return if t.root_hash() == *root { Ok(t) } else { Err(VerifyError::RootMismatch) };
    }
    let mut top: BTreeMap<Vec<u8>, u8> = BTreeMap::new();
    // (height, smallest key, subtree root): chunk subtrees, then top nodes.
    let mut parts: Vec<(u8, Vec<u8>, u32)> = Vec::new();
    for (i, bytes) in chunks.iter().enumerate() {
        let c = validate(root, i as u64, bytes)?;
        if c.m as usize != chunks.len() || c.leaves.len() > capacity {
            return Err(VerifyError::Inconsistent("chunk count or size"));
        }
        for (k, h) in c.ancestors.iter().cloned() {
            if *top.entry(k).or_insert(h) != h {
                return Err(VerifyError::Inconsistent("two heights for one node"));
            }
        }
        let anc: BTreeMap<&[u8], u8> = c.ancestors.iter().map(|(k, h)| (&k[..], *h)).collect();
        let inner = c
            .leaves
            .iter()
            .filter(|(k, _, h)| *h > 0 && !anc.contains_key(&k[..]))
            .map(|(k, _, h)| (k.clone(), *h))
            .collect();
        let sub = t.build_subtree(inner, &c.leaves)?;
        t.chunks.push(Chunk { cid: c.cid, size: c.leaves.len() as u32, root: sub });
        t.by_cid.push((t.chunks.len() - 1) as u32);
        t.nm(sub).chunk = (t.chunks.len() - 1) as u32;
        t.keys += c.leaves.len() as u64;
        parts.push((t.n(sub).height, c.leaves[0].0.clone(), sub));
    }
    for (k, h) in top {
        let id = t.new_inner(k.clone().into(), NIL, NIL, h);
        parts.push((h, k, id));
    }
    // Descending height; the root comes first. Equal heights never nest.
    parts.sort_by_key(|a| std::cmp::Reverse(a.0));
    t.root = parts[0].2;
    for (_, k, id) in &parts[1..] {
        if t.is_leaf(t.root) {
            return Err(VerifyError::Inconsistent("a leaf above other nodes"));
        }
        t.attach(t.root, k, *id)?;
    }
    t.check_shape(t.root).map_err(|_| VerifyError::Inconsistent("rebuilt shape"))?;
    if t.root_hash() != *root {
        return Err(VerifyError::RootMismatch);
    }
    Ok(t)
}

/// Every invariant: BST order and keys, heights, AVL balance, Property 1, chunk sizes
/// and ids, cached hashes.
pub(crate) fn check(t: &AvlStar) -> Result<(), String> {
    if t.root == NIL {
        return if t.by_cid.is_empty() { Ok(()) } else { Err("chunks in an empty tree".into()) };
    }
    t.check_shape(t.root)?;
    let mut roots = 0;
    walk(t, t.root, NIL, &mut roots)?;
    if roots != t.by_cid.len() {
        return Err(format!("{roots} chunk roots for {} ids", t.by_cid.len()));
    }
    for (cid, &slot) in t.by_cid.iter().enumerate() {
        let c = &t.chunks[slot as usize];
        if c.cid as usize != cid || t.n(c.root).chunk != slot {
            return Err("chunk id or root pointer".into());
        }
        if c.size as usize > t.capacity || c.size == 0 || c.size != t.count_leaves(c.root) {
            return Err(format!("chunk {cid} size {}", c.size));
        }
    }
    if t.count_leaves(t.root) as u64 != t.len() {
        return Err("key count".into());
    }
    let mut fresh = t.clone();
    for n in &mut fresh.nodes {
        n.hash = None;
    }
    fresh.contribution(t.root);
    let stale = t
        .nodes
        .iter()
        .zip(&fresh.nodes)
        .any(|(a, b)| matches!((a.hash, b.hash), (Some(x), Some(y)) if x != y));
    if stale {
        return Err("stale cached hash".into());
    }
    Ok(())
}

/// Property 1: no chunk root below another, every leaf below one.
fn walk(t: &AvlStar, id: u32, in_chunk: u32, roots: &mut usize) -> Result<(), String> {
    let n = t.n(id);
    let mut inside = in_chunk;
    if n.chunk != NIL {
        if in_chunk != NIL {
            return Err("a chunk root below another (Property 1)".into());
        }
        *roots += 1;
        inside = n.chunk;
    }
    if n.height == 0 {
        return if inside == NIL { Err("a leaf in no chunk".into()) } else { Ok(()) };
    }
    walk(t, n.left, inside, roots)?;
    walk(t, n.right, inside, roots)
}
