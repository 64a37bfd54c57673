//! The structural invariants of a subtree ([`Node::check`]), resident or paged: AVL
//! balance, counts, separators, key order and cached hashes.

use crate::chunk::key_prefix;
use crate::hash::{inner_hash, Hasher};
use crate::node::{Leaf, Node};

impl Node {
    /// Checks every structural invariant of the subtree; returns its first key.
    pub(crate) fn check<H: Hasher>(&self, capacity: usize, min_fill: usize) -> Result<(), String> {
        match self {
            Node::Chunk(c) => {
                if c.len() == 0 || c.len() > capacity {
                    return Err(format!("chunk of {} keys (capacity {capacity})", c.len()));
                }
                if c.len() < min_fill {
                    return Err(format!(
                        "chunk of {} keys below the fill floor {min_fill}",
                        c.len()
                    ));
                }
                c.check::<H>()
            }
            Node::Paged(p) => {
                if p.len == 0 || p.len as usize > capacity || (p.len as usize) < min_fill {
                    return Err(format!("absent chunk of {} keys (capacity {capacity})", p.len));
                }
                if p.first.is_empty() || p.loc == 0 {
                    return Err("absent chunk without a first key or a location".into());
                }
                Ok(())
            }
            Node::Inner(x) => {
                x.left.check::<H>(capacity, min_fill)?;
                x.right.check::<H>(capacity, min_fill)?;
                let (hl, hr) = (x.left.height(), x.right.height());
                if hl.abs_diff(hr) > 1 || x.height != hl.max(hr) + 1 {
                    return Err(format!("AVL violation: height {} over {hl}/{hr}", x.height));
                }
                if x.key_count != x.left.key_count() + x.right.key_count()
                    || x.chunk_count != x.left.chunk_count() + x.right.chunk_count()
                {
                    return Err("counts are not the sums of the children's".into());
                }
                if *x.sep != *x.right.first_key() || x.sep_prefix != key_prefix(&x.sep) {
                    return Err("separator is not the right subtree's first key".into());
                }
                // The last key of an absent chunk is unknown; its first key orders it.
                let last = x.left.key(x.left.key_count() - 1).unwrap_or(x.left.last_first_key());
                if last >= x.right.first_key() {
                    return Err("subtrees out of order".into());
                }
                if let Some(h) = x.hash {
                    let (Some(l), Some(r)) = (x.left.cached_hash(), x.right.cached_hash()) else {
                        return Err("hashed node over an unhashed child".into());
                    };
                    if h != inner_hash::<H>(x.height, x.key_count, x.chunk_count, &l, &r) {
                        return Err("cached inner hash is stale".into());
                    }
                }
                Ok(())
            }
        }
    }

    /// Key number `i` of the subtree (by order), if its chunk is resident.
    pub(crate) fn key(&self, i: u64) -> Option<&[u8]> {
        match self.locate(i) {
            (Leaf::Body(c), _, before) => Some(c.key((i - before) as usize)),
            (Leaf::Absent(_), _, _) => None,
        }
    }

    /// The first key of the subtree's last chunk.
    fn last_first_key(&self) -> &[u8] {
        let mut n = self;
        while let Node::Inner(x) = n {
            n = &x.right;
        }
        n.first_key()
    }
}
