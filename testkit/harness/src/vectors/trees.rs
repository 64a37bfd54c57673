//! The fixed trees of the known-answer vectors, as operation sequences.
//!
//! A tree's shape depends on its history (the fill policy is part of the format), so each
//! tree is recorded as the operations that built it, not only its final entries.

use anyhow::Result;
use bavl_core::{Snapshot, Tree};

/// One edit of a tree.
pub enum Op {
    Insert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
}

/// A tree of the vectors: name, capacity and the edits that build it.
pub struct Spec {
    pub name: &'static str,
    pub description: &'static str,
    pub capacity: u32,
    pub ops: Vec<Op>,
}

impl Spec {
    /// Applies the operations; returns the final snapshot and the one before the last
    /// operation (for "another version" negative vectors).
    pub fn build(&self) -> Result<(Snapshot, Option<Snapshot>)> {
        let mut tree = Tree::with_capacity(self.capacity)?;
        let mut previous = None;
        for (i, op) in self.ops.iter().enumerate() {
            if i + 1 == self.ops.len() {
                previous = Some(tree.snapshot());
            }
            match op {
                Op::Insert(k, v) => {
                    tree.insert(k, v)?;
                }
                Op::Remove(k) => {
                    tree.remove(k);
                }
            }
        }
        tree.check().map_err(anyhow::Error::msg)?;
        Ok((tree.snapshot(), previous))
    }
}

fn insert(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Op {
    Op::Insert(key.into(), value.into())
}

/// Every tree of the vectors, smallest first.
pub fn specs() -> Vec<Spec> {
    vec![
        Spec {
            name: "empty",
            description: "the empty tree, capacity 4",
            capacity: 4,
            ops: Vec::new(),
        },
        Spec {
            name: "one-key",
            description: "a single key, capacity 4",
            capacity: 4,
            ops: vec![insert("only", "value")],
        },
        Spec {
            name: "ten-keys",
            description: "ten ASCII keys inserted in descending order, capacity 4; \
                          one value is empty, the others grow in length",
            capacity: 4,
            ops: (0..10)
                .rev()
                .map(|i| insert(format!("k{:02}", 3 * i + 1), format!("v{i}").repeat(i)))
                .collect(),
        },
        Spec {
            name: "forty-keys-with-removals",
            description: "forty keys inserted in a scrambled order, two values overwritten, \
                          six keys removed (including the first and the last), capacity 5",
            capacity: 5,
            ops: forty_keys(),
        },
        Spec {
            name: "two-hundred-binary-keys",
            description: "two hundred binary keys of 4 to 8 bytes in scrambled order, capacity 16",
            capacity: 16,
            ops: (0u64..200)
                .map(|j| {
                    let key = j.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
                    insert(&key[..4 + (j % 5) as usize], format!("value {j}"))
                })
                .collect(),
        },
    ]
}

fn forty_keys() -> Vec<Op> {
    let key = |j: u32| format!("key/{j:03}");
    let mut ops: Vec<Op> =
        (0..40).map(|i| (i * 17) % 40).map(|j| insert(key(j), format!("val-{j}"))).collect();
    ops.push(insert(key(5), "overwritten"));
    ops.push(insert(key(30), "overwritten too"));
    for j in [0, 7, 13, 21, 22, 39] {
        ops.push(Op::Remove(key(j).into_bytes()));
    }
    ops
}
