//! The whole tree reimplemented from `docs/design.md` alone — §2's hash inputs, §6's fill
//! policy and AVL rebalancing — as plainly as possible (chunks as vectors of entries, the
//! AVL tree as boxed nodes, every walk linear), and compared root for root with `Tree`
//! after every operation of random histories. If §6 left anything out or said it wrong,
//! some history would reach another shape and another root.

use bavl_core::hash::{chunk_hash, chunk_node_hash, inner_hash, leaf_hash_of, root_hash};
use bavl_core::{Digest, Key, Sha256, Tree};
use rand::{rngs::SmallRng, Rng, SeedableRng};

type Entry = (Vec<u8>, Vec<u8>);

enum N {
    Chunk(Vec<Entry>),
    Inner { height: u8, left: Box<N>, right: Box<N> },
}

fn height(n: &N) -> u8 {
    match n {
        N::Chunk(_) => 0,
        N::Inner { height, .. } => *height,
    }
}

fn chunks(n: &N) -> u64 {
    match n {
        N::Chunk(_) => 1,
        N::Inner { left, right, .. } => chunks(left) + chunks(right),
    }
}

fn recompute(n: &mut N) {
    if let N::Inner { height: h, left, right } = n {
        *h = 1 + height(left).max(height(right));
    }
}

/// "Rotate x right: L = x.left becomes the subtree's root, x.left = L.right, L.right = x;
/// x is recomputed, then L." With `right == false`, the mirror image.
fn rotate(x: &mut N, right: bool) {
    let N::Inner { left, right: r, .. } = std::mem::replace(x, N::Chunk(Vec::new())) else {
        panic!("rotation of a chunk")
    };
    let (child, other) = if right { (left, r) } else { (r, left) };
    let N::Inner { left: cl, right: cr, .. } = *child else { panic!("rotation onto a chunk") };
    let (inner, outer) = if right { (cr, cl) } else { (cl, cr) };
    let mut down = if right {
        N::Inner { height: 0, left: inner, right: other }
    } else {
        N::Inner { height: 0, left: other, right: inner }
    };
    recompute(&mut down);
    let mut up = if right {
        N::Inner { height: 0, left: outer, right: Box::new(down) }
    } else {
        N::Inner { height: 0, left: Box::new(down), right: outer }
    };
    recompute(&mut up);
    *x = up;
}

/// §6 "Rebalance".
fn rebalance(x: &mut N) {
    let N::Inner { left, right, .. } = x else { return };
    let (hl, hr) = (height(left), height(right));
    if hl > hr + 1 {
        if let N::Inner { left: ll, right: lr, .. } = &**left {
            if height(ll) < height(lr) {
                rotate(left, false);
            }
        }
        rotate(x, true);
    } else if hr > hl + 1 {
        if let N::Inner { left: rl, right: rr, .. } = &**right {
            if height(rr) < height(rl) {
                rotate(right, true);
            }
        }
        rotate(x, false);
    }
}

/// §6 "Insert a chunk after chunk i".
fn insert_after(n: &mut N, i: u64, new: Vec<Entry>) {
    match n {
        N::Chunk(_) => {
            let old = std::mem::replace(n, N::Chunk(Vec::new()));
            *n = N::Inner { height: 1, left: Box::new(old), right: Box::new(N::Chunk(new)) };
            return;
        }
        N::Inner { left, right, .. } => {
            let lc = chunks(left);
            if i < lc {
                insert_after(left, i, new)
            } else {
                insert_after(right, i - lc, new)
            }
        }
    }
    recompute(n);
    rebalance(n);
}

/// §6 "Remove chunk j"; returns its entries.
fn remove_chunk(n: &mut N, j: u64) -> Vec<Entry> {
    let N::Inner { left, right, .. } = n else { panic!("removal from a single chunk") };
    let lc = chunks(left);
    let (target, other, j) = if j < lc { (left, right, j) } else { (right, left, j - lc) };
    if let N::Chunk(c) = &mut **target {
        let gone = std::mem::take(c);
        let other = std::mem::replace(&mut **other, N::Chunk(Vec::new()));
        *n = other;
        return gone;
    }
    let gone = remove_chunk(target, j);
    recompute(n);
    rebalance(n);
    gone
}

fn chunk_mut(n: &mut N, mut i: u64) -> &mut Vec<Entry> {
    let mut n = n;
    loop {
        match n {
            N::Chunk(c) => return c,
            N::Inner { left, right, .. } => {
                let lc = chunks(left);
                n = if i < lc {
                    left
                } else {
                    i -= lc;
                    right
                };
            }
        }
    }
}

/// The reference tree.
struct Spec {
    root: Option<N>,
    c: usize,
}

impl Spec {
    fn len(&mut self, i: u64) -> usize {
        chunk_mut(self.root.as_mut().unwrap(), i).len()
    }

    /// "To even out a run of consecutive chunks ... the extra entries go to the left."
    fn even_out(&mut self, start: u64, g: u64) {
        let root = self.root.as_mut().unwrap();
        let mut all = Vec::new();
        for i in start..start + g {
            all.append(chunk_mut(root, i));
        }
        let (t, g) = (all.len(), g as usize);
        let mut rest = all.into_iter();
        for j in 0..g {
            let size = t / g + usize::from(j < t % g);
            *chunk_mut(root, start + j as u64) = rest.by_ref().take(size).collect();
        }
    }

    /// "A key belongs to the last chunk whose first key is at most the key, or chunk 0."
    fn find(&mut self, key: &[u8]) -> u64 {
        let root = self.root.as_mut().unwrap();
        let m = chunks(root);
        (1..m).rev().find(|&i| chunk_mut(root, i)[0].0.as_slice() <= key).unwrap_or(0)
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) {
        if self.root.is_none() {
            self.root = Some(N::Chunk(vec![(key.to_vec(), value.to_vec())]));
            return;
        }
        loop {
            let i = self.find(key);
            let c = chunk_mut(self.root.as_mut().unwrap(), i);
            match c.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                Ok(p) => {
                    c[p].1 = value.to_vec();
                    return;
                }
                Err(p) if c.len() < self.c => {
                    c.insert(p, (key.to_vec(), value.to_vec()));
                    return;
                }
                Err(_) => self.make_room(i),
            }
        }
    }

    fn make_room(&mut self, i: u64) {
        let m = chunks(self.root.as_ref().unwrap());
        let l = (i > 0).then(|| self.len(i - 1));
        let r = (i + 1 < m).then(|| self.len(i + 1));
        let (nb, nb_len) = match (l, r) {
            (Some(l), Some(r)) if r < l => (Some(i + 1), r),
            (Some(l), _) => (Some(i - 1), l),
            (None, Some(r)) => (Some(i + 1), r),
            (None, None) => (None, 0),
        };
        match nb {
            Some(nb) if nb_len <= self.c - 2 => self.even_out(nb.min(i), 2),
            _ => {
                let f = self.c / 2;
                let c = chunk_mut(self.root.as_mut().unwrap(), i);
                let back = c.split_off(c.len() - (self.c - f));
                insert_after(self.root.as_mut().unwrap(), i, back);
                let start = if l.is_some() { i - 1 } else { i };
                let g = 2 + u64::from(l.is_some()) + u64::from(r.is_some());
                self.even_out(start, g);
            }
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if self.root.is_none() {
            return;
        }
        let i = self.find(key);
        let c = chunk_mut(self.root.as_mut().unwrap(), i);
        let Ok(p) = c.binary_search_by(|(k, _)| k.as_slice().cmp(key)) else { return };
        c.remove(p);
        let (len, f) = (c.len(), self.c / 2);
        let m = chunks(self.root.as_ref().unwrap());
        if m == 1 {
            if len == 0 {
                self.root = None;
            }
            return;
        }
        if len >= f {
            return;
        }
        let l = (i > 0).then(|| self.len(i - 1));
        let r = (i + 1 < m).then(|| self.len(i + 1));
        let (nb, nb_len) = match (l, r) {
            (Some(l), Some(r)) if r > l => (i + 1, r),
            (Some(l), _) => (i - 1, l),
            (None, Some(r)) => (i + 1, r),
            (None, None) => unreachable!("more than one chunk"),
        };
        let left = nb.min(i);
        if nb_len > f {
            self.even_out(left, 2);
        } else {
            let gone = remove_chunk(self.root.as_mut().unwrap(), left + 1);
            chunk_mut(self.root.as_mut().unwrap(), left).extend(gone);
        }
    }

    /// §2's hash inputs over the whole tree.
    fn root_hash(&self) -> Digest {
        fn mth(leaves: &[Digest]) -> Digest {
            if leaves.len() == 1 {
                return leaves[0];
            }
            // The largest power of two strictly below the count.
            let mut k = 1;
            while 2 * k < leaves.len() {
                k *= 2;
            }
            chunk_node_hash::<Sha256>(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
        fn hash(n: &N) -> (Digest, u64, u64) {
            match n {
                N::Chunk(es) => {
                    let leaves: Vec<Digest> = es
                        .iter()
                        .map(|(k, v)| leaf_hash_of::<Sha256>(Key::new(k).unwrap(), v))
                        .collect();
                    (chunk_hash::<Sha256>(es.len() as u32, &mth(&leaves)), es.len() as u64, 1)
                }
                N::Inner { height, left, right } => {
                    let (l, lk, lc) = hash(left);
                    let (r, rk, rc) = hash(right);
                    (inner_hash::<Sha256>(*height, lk + rk, lc + rc, &l, &r), lk + rk, lc + rc)
                }
            }
        }
        let top = self.root.as_ref().map_or([0; 32], |n| hash(n).0);
        root_hash::<Sha256>(self.c as u32, &top)
    }
}

fn history(capacity: u32, seed: u64, ops: usize, space: u32) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tree: Tree = Tree::with_capacity(capacity).unwrap();
    let mut spec = Spec { root: None, c: capacity as usize };
    for step in 0..ops {
        let k = rng.gen_range(0..space);
        let mut key = k.to_be_bytes().to_vec();
        key.truncate(1 + (k % 4) as usize);
        // Mostly inserts early, mostly removals late: trees grow, then shrink to nothing.
        if rng.gen_bool(if step < ops / 2 { 0.8 } else { 0.25 }) {
            let value = vec![(k % 251) as u8; (k % 5) as usize];
            tree.insert(&key, &value).unwrap();
            spec.insert(&key, &value);
        } else {
            tree.remove(&key);
            spec.remove(&key);
        }
        assert_eq!(
            spec.root_hash(),
            tree.root_hash(),
            "capacity {capacity} seed {seed}: the specification's tree differs after step {step}"
        );
    }
}

#[test]
fn the_specified_tree_has_the_same_root_after_every_operation() {
    for (capacity, seeds) in [(4, 0..6), (5, 6..10), (7, 10..13), (16, 13..15)] {
        for seed in seeds {
            history(capacity, seed, 3000, 4000);
        }
    }
}
