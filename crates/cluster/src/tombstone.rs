//! Tombstone markers: what a node keeps of a replica it deleted (its Raft vote), so that a
//! replica of the same group re-created empty on this node never follows a leader of an
//! older term than one it had already followed (see `moves` and `docs/cluster.md` section
//! 2). One small JSON file per group, `tombstone-<id>` in the node's directory, read
//! defensively.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::types::{typ, GroupId};
use bavl_store::write_file_atomic;

/// The marker a node leaves when it deletes its replica of group `id` (see `moves`).
pub fn tombstone_file(node_dir: &Path, id: GroupId) -> PathBuf {
    node_dir.join(format!("tombstone-{id}"))
}

/// What a tombstone marker holds: the vote of the deleted replica (the newest of the
/// replicas of the group this node deleted). Raft requires a node never to forget its vote;
/// a replica re-created empty by a message of its group starts from this one, so it never
/// accepts a leader of an older term than one it had already followed (see `moves`).
/// An empty marker (older versions) holds no vote.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub vote: Option<typ::Vote>,
}

/// Largest tombstone marker read (a vote's JSON is well under 200 bytes).
pub const MAX_TOMBSTONE_BYTES: u64 = 4096;

/// The tombstone marker of group `id`, if this node ever deleted a replica of it. A marker
/// longer than [`MAX_TOMBSTONE_BYTES`], or one that does not decode, is an error (checked
/// before anything is read into memory), never "no vote".
pub fn read_tombstone(node_dir: &Path, id: GroupId) -> std::io::Result<Option<Tombstone>> {
    let Some(bytes) = read_bounded(&tombstone_file(node_dir, id), MAX_TOMBSTONE_BYTES)? else {
        return Ok(None);
    };
    if bytes.is_empty() {
        return Ok(Some(Tombstone::default()));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The bytes of a small file a node keeps beside its groups: `Ok(None)` if absent, an
/// `InvalidData` error if longer than `max` (checked before anything is read into memory).
pub(crate) fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len > max {
        let what = format!("{}: {len} bytes, over {max}", path.display());
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, max), &mut bytes)?;
    Ok(Some(bytes))
}

/// Writes (durably) the tombstone marker of group `id`, keeping the newer of the vote it
/// held and `vote`. The vote is kept uncommitted: it has to refuse leaders of older terms
/// (and other candidates of its term), not to grant anything; a committed vote naming this
/// node could make openraft restore a leader's state when the replica starts.
pub fn raise_tombstone(
    node_dir: &Path,
    id: GroupId,
    vote: Option<typ::Vote>,
) -> std::io::Result<()> {
    let existing = read_tombstone(node_dir, id)?;
    let old = existing.clone().unwrap_or_default();
    let vote = vote.map(|v| typ::Vote::new(v.leader_id.term, v.leader_id.node_id));
    let vote = match (old.vote, vote) {
        (Some(a), Some(b)) if a >= b => Some(a),
        (a, b) => b.or(a),
    };
    if existing.is_some() && old.vote == vote {
        return Ok(());
    }
    let marker = Tombstone { vote };
    write_file_atomic(&tombstone_file(node_dir, id), &serde_json::to_vec(&marker)?)
}
