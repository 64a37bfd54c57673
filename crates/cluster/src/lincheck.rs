//! A linearizability checker for histories of independent registers (one per key), in the
//! style of Wing & Gong with Lowe's memoization (what porcupine does): a history is
//! linearizable iff each key's sub-history is (locality), and a key's sub-history is
//! searched depth-first for an order that respects real time and register semantics.
//!
//! Semantics: every key starts absent; `put` sets it, `delete` makes it absent, a completed
//! `get` must return the current value. An operation with an unknown outcome (`return:
//! null`) may take effect at any point after its call, or never. Gets with unknown outcome
//! are ignored (they have no effect). The search is exponential in the worst case; it gives
//! up on a key after [`MAX_STATES`] states and reports it as undecided.

use std::collections::{BTreeMap, HashSet};

use crate::history::{Kind, Op};

/// States explored per key before giving up.
pub const MAX_STATES: usize = 1_000_000;

/// The verdict on one history.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub keys_checked: usize,
    /// Keys (hex) whose sub-history has no valid linearization.
    pub violations: Vec<String>,
    /// Keys (hex) the search gave up on.
    pub undecided: Vec<String>,
}

/// Checks every key's sub-history.
pub fn check(ops: &[Op]) -> Verdict {
    let mut by_key: BTreeMap<&[u8], Vec<&Op>> = BTreeMap::new();
    for op in ops {
        if op.op == Kind::Get && op.ret.is_none() {
            continue;
        }
        by_key.entry(&op.key).or_default().push(op);
    }
    let mut v = Verdict { keys_checked: by_key.len(), ..Verdict::default() };
    for (key, ops) in by_key {
        match check_key(&ops) {
            Some(true) => {}
            Some(false) => v.violations.push(hex::encode(key)),
            None => v.undecided.push(hex::encode(key)),
        }
    }
    v
}

/// `Some(true)` if linearizable, `Some(false)` if not, `None` if undecided.
fn check_key(ops: &[&Op]) -> Option<bool> {
    let n = ops.len();
    let words = n.div_ceil(64);
    let mut seen: HashSet<(Vec<u64>, Option<Vec<u8>>)> = HashSet::new();
    // Depth-first: a stack of (linearized set, current value).
    let mut stack = vec![(vec![0u64; words], None::<Vec<u8>>)];
    let done =
        |set: &[u64]| (0..n).all(|i| set[i / 64] >> (i % 64) & 1 == 1 || ops[i].ret.is_none());
    while let Some((set, value)) = stack.pop() {
        if done(&set) {
            return Some(true);
        }
        if !seen.insert((set.clone(), value.clone())) {
            continue;
        }
        if seen.len() > MAX_STATES {
            return None;
        }
        let pending = |i: usize| set[i / 64] >> (i % 64) & 1 == 0;
        // The earliest return among pending completed ops bounds which op may go next.
        let horizon =
            (0..n).filter(|&i| pending(i)).filter_map(|i| ops[i].ret).min().unwrap_or(u64::MAX);
        for i in (0..n).filter(|&i| pending(i) && ops[i].call <= horizon) {
            let op = ops[i];
            let next = match op.op {
                Kind::Get if op.value.as_ref().map(|h| &h.0) != value.as_ref() => continue,
                Kind::Get => value.clone(),
                Kind::Put => op.value.as_ref().map(|h| h.0.clone()),
                Kind::Delete => None,
            };
            let mut s = set.clone();
            s[i / 64] |= 1 << (i % 64);
            stack.push((s, next));
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::HexBytes;

    fn op(client: u64, kind: Kind, value: Option<u8>, call: u64, ret: Option<u64>) -> Op {
        Op {
            client,
            op: kind,
            key: b"k".to_vec(),
            value: value.map(|v| HexBytes(vec![v])),
            call,
            ret,
        }
    }

    #[test]
    fn sequential_history_passes() {
        let h = [op(1, Kind::Put, Some(1), 0, Some(1)), op(1, Kind::Get, Some(1), 2, Some(3))];
        assert_eq!(check(&h).violations, Vec::<String>::new());
    }

    #[test]
    fn stale_read_after_completed_write_fails() {
        let h = [
            op(1, Kind::Put, Some(1), 0, Some(1)),
            op(1, Kind::Put, Some(2), 2, Some(3)),
            op(2, Kind::Get, Some(1), 4, Some(5)),
        ];
        assert_eq!(check(&h).violations, vec![hex::encode(b"k")]);
    }

    #[test]
    fn concurrent_ops_may_order_either_way() {
        let h = [
            op(1, Kind::Put, Some(1), 0, Some(10)),
            op(2, Kind::Get, None, 1, Some(2)),
            op(3, Kind::Get, Some(1), 3, Some(4)),
        ];
        assert!(check(&h).violations.is_empty());
    }

    #[test]
    fn unknown_writes_may_or_may_not_happen() {
        let happened = [op(1, Kind::Put, Some(1), 0, None), op(2, Kind::Get, Some(1), 5, Some(6))];
        let never = [op(1, Kind::Put, Some(1), 0, None), op(2, Kind::Get, None, 5, Some(6))];
        assert!(check(&happened).violations.is_empty());
        assert!(check(&never).violations.is_empty());
        // But not before it was called.
        let early = [op(2, Kind::Get, Some(1), 0, Some(1)), op(1, Kind::Put, Some(1), 5, None)];
        assert_eq!(check(&early).violations.len(), 1);
    }

    #[test]
    fn delete_then_read_of_old_value_fails() {
        let h = [
            op(1, Kind::Put, Some(1), 0, Some(1)),
            op(1, Kind::Delete, None, 2, Some(3)),
            op(2, Kind::Get, Some(1), 4, Some(5)),
        ];
        assert_eq!(check(&h).violations.len(), 1);
    }
}
