//! Serving reads on a range replica: get, scan and proofs, each after a read barrier
//! (read-index, see `Consensus::read_barrier`) and a re-check of the fence keys and epoch
//! against the state read, so a split applied meanwhile turns the read into `Stale`.

use std::ops::Bound;

use crate::consensus::{Consensus, OpenraftGroup, ProposeError};
use crate::msg::{ClientOp, ClientReply};

/// Serves a read operation (`Get`, `Scan`, `Prove`); `unsafe_local` skips the barrier
/// (fault injection only).
pub(crate) async fn read(
    group: &OpenraftGroup,
    op: ClientOp,
    version: u64,
    unsafe_local: bool,
) -> ClientReply {
    let barrier = if unsafe_local { Ok(()) } else { group.read_barrier().await };
    if let Err(e) = barrier {
        return match e {
            ProposeError::NotLeader(l) => ClientReply::NotLeader(l),
            ProposeError::Unknown(e) => ClientReply::Unknown(e),
        };
    }
    let mut s = group.sm.shared.lock().expect("not poisoned");
    let desc = s.state.desc.clone();
    let frozen = s.state.is_frozen();
    if frozen || desc.epoch.version != version || !op.key().is_some_and(|k| desc.contains(k)) {
        return ClientReply::Stale(desc);
    }
    let index = s.last_applied.map_or(0, |l| l.index);
    let tree = &mut s.state.tree;
    // A range's tree is always resident, but a read that cannot be answered is refused,
    // never answered "absent".
    let refused = |e: bavl_core::PageRef| ClientReply::Refused(e.to_string());
    match op {
        ClientOp::Get(key) => match tree.get(&key) {
            Ok(v) => ClientReply::Value(v.map(<[u8]>::to_vec)),
            Err(e) => refused(e),
        },
        ClientOp::Scan { start, end, limit } => {
            // The scan stops at the nearer of the caller's end and the range's end.
            let stop = match (end.is_empty(), desc.end.is_empty()) {
                (true, true) => None,
                (true, false) => Some(desc.end.clone()),
                (false, true) => Some(end),
                (false, false) => Some(end.min(desc.end.clone())),
            };
            let hi = stop.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut entries = Vec::new();
            let mut more = false;
            let iter = match tree.range(Bound::Included(&start), hi) {
                Ok(iter) => iter,
                Err(e) => return refused(e),
            };
            for (k, v) in iter {
                if entries.len() as u32 >= limit.max(1) {
                    more = true;
                    break;
                }
                entries.push((k.to_vec(), v.to_vec()));
            }
            ClientReply::Entries { entries, range_end: desc.end, more }
        }
        ClientOp::Prove(key) => {
            let value = match tree.get(&key) {
                Ok(v) => v.map(<[u8]>::to_vec),
                Err(e) => return refused(e),
            };
            let snap = tree.snapshot();
            let proof = match value {
                Some(_) => snap.prove_membership(&key),
                None => snap.prove_absence(&key),
            };
            match proof {
                Ok(proof) => {
                    ClientReply::Proof { root: snap.root_hash().to_vec(), index, value, proof }
                }
                Err(e) => ClientReply::Refused(format!("no proof for this key: {e}")),
            }
        }
        _ => ClientReply::Refused("not a read".into()),
    }
}
