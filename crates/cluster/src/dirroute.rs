//! Finding the directory from any node, wherever its replicas are: the directory group
//! moves like a range (`moves`, `plan`), so the lists a node and a client were started with
//! (a node's seeds, a client's `--peers`) may in time name none of its members.
//!
//! - **Every node answers directory operations.** A node holding a directory replica that
//!   has applied anything serves them there ([`directory_op`]); a node holding none, or
//!   whose replica is not the leader an operation needs (`NotLeader`), passes the operation
//!   on, once, as `Forwarded(op)`, to the directory members it knows (the leader it was
//!   told of first) and returns the first definite answer. A forwarded operation is never
//!   passed on again (answered `NoGroup` by a node without a replica), so stale lists make
//!   no loop, and an operation crosses at most one extra hop. It carries a
//!   [`DirectoryOp`], not a `ClientOp`, so no bytes decode to one forwarded operation
//!   inside another (nor to a nesting deep enough to exhaust the stack).
//! - **The members a node knows** ([`Node::directory_members`]): its own replica's voters
//!   (when it holds one that applied anything), then those named by the directory leader's
//!   last answer to this node's heartbeat (`Heard { directory, members }`: the directory's
//!   descriptor and the registered nodes among its voters and learners, with addresses),
//!   and, before either is known, the seeds the node was started with.
//! - **Kept across restarts**: the last `Heard` is written to `directory.json` in the
//!   node's directory (replaced atomically when it changes) and read at start, its
//!   addresses given to the transport, so a node restarted after every seed left the
//!   directory still finds it. It is a hint, not state: a file over [`MAX_KNOWN_BYTES`] or
//!   one that does not decode is reported and ignored (the seeds are used), never fatal.
//!   A `Heard` whose descriptor is older (`conf_ver`) than the one known is ignored (a
//!   deposed leader's late answer).
//!
//! Directory writes are idempotent (a report never moves a descriptor back; registering,
//! draining and removing a node twice leave what once does; an id allocated twice is
//! skipped), so a forwarder that gets no answer from one member in time tries the next, as
//! `Node::directory_call` does; an `Unknown` answer is returned as it is.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::consensus::{Consensus, OpenraftGroup, ProposeError};
use crate::msg::{ClientOp, ClientReply, ClientRequest, DirectoryOp, Message, Reply};
use crate::node::{answer, Node};
use crate::types::{Command, Epoch, NodeId, NodeInfo, RangeDesc, DIRECTORY_GROUP};
use bavl_store::write_file_atomic;

/// The file, in a node's directory, holding the last directory descriptor it was told of.
pub const KNOWN_FILE: &str = "directory.json";
/// Largest `directory.json` read (a descriptor and a few node addresses: well under 4 KiB).
pub const MAX_KNOWN_BYTES: u64 = 64 * 1024;

/// What a node knows of the directory's replicas (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownDirectory {
    pub directory: Option<RangeDesc>,
    pub members: Vec<NodeInfo>,
}

/// Reads `directory.json` of `node_dir`: `Ok(None)` if absent, an `InvalidData` error if
/// over [`MAX_KNOWN_BYTES`] (checked before reading) or not decodable.
pub fn read_known(node_dir: &Path) -> std::io::Result<Option<KnownDirectory>> {
    let path = node_dir.join(KNOWN_FILE);
    let Some(bytes) = crate::tombstone::read_bounded(&path, MAX_KNOWN_BYTES)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
    })
}

/// Writes `directory.json` of `node_dir` atomically and durably
/// (`bavl_store::write_file_atomic`: temporary file synced, renamed, directory synced).
pub fn write_known(node_dir: &Path, known: &KnownDirectory) -> std::io::Result<()> {
    write_file_atomic(&node_dir.join(KNOWN_FILE), &serde_json::to_vec(known)?)
}

/// The `directory.json` a node starts with: nothing if absent or unreadable (said on
/// standard error: the file is a hint, the seeds serve instead).
pub(crate) fn load_known(node_dir: &Path, id: NodeId) -> KnownDirectory {
    match read_known(node_dir) {
        Ok(k) => k.unwrap_or_default(),
        Err(e) => {
            eprintln!("node {id}: ignoring {KNOWN_FILE} ({e}); the seeds serve instead");
            KnownDirectory::default()
        }
    }
}

/// Whether a reply settles a directory operation (anything but "ask another replica").
pub(crate) fn definite(r: &ClientReply) -> bool {
    !matches!(r, ClientReply::NotLeader(_) | ClientReply::NoGroup | ClientReply::Unknown(_))
}

impl Node {
    /// The directory's members as this node knows them (see the module doc), its own
    /// replica's voters first.
    pub fn directory_members(&self) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = Vec::new();
        if let Some(g) = self.group(DIRECTORY_GROUP) {
            let s = g.sm.shared.lock().expect("not poisoned");
            if s.last_applied.is_some() {
                out.extend(s.state.desc.replicas.iter().copied());
            }
        }
        let known = self.known_dir.lock().expect("not poisoned");
        for n in known.directory.iter().flat_map(|d| d.replicas.iter()) {
            if !out.contains(n) {
                out.push(*n);
            }
        }
        if out.is_empty() {
            out.clone_from(&self.opts.seeds);
        }
        out
    }

    /// The directory's descriptor as the directory leader last told this node, if ever.
    pub fn known_directory(&self) -> Option<RangeDesc> {
        self.known_dir.lock().expect("not poisoned").directory.clone()
    }

    /// Records the directory's descriptor and members (a heartbeat's answer, or this node's
    /// own move of a directory replica): unless older than the one known, its members'
    /// addresses go to the transport and, if anything changed, it is written to
    /// `directory.json`.
    pub(crate) fn learn_directory(&self, directory: RangeDesc, members: Vec<NodeInfo>) {
        let mut known = self.known_dir.lock().expect("not poisoned");
        if known.directory.as_ref().is_some_and(|d| d.epoch.conf_ver > directory.epoch.conf_ver) {
            return;
        }
        let new = KnownDirectory { directory: Some(directory), members };
        if *known == new {
            return; // its addresses were learned when it first came
        }
        for m in new.members.iter().filter(|m| !m.addr.is_empty() && m.id != self.id) {
            self.transport.learn(m.id, &m.addr);
        }
        *known = new.clone();
        drop(known);
        if let Err(e) = write_known(&self.opts.dir, &new) {
            eprintln!("node {}: cannot write {KNOWN_FILE}: {e}", self.id);
        }
    }

    /// What a directory replica's `Heard` answer says: its descriptor, and the registered
    /// nodes among its voters and learners.
    pub(crate) fn heard(group: &OpenraftGroup) -> (RangeDesc, Vec<NodeInfo>) {
        let s = group.sm.shared.lock().expect("not poisoned");
        let d = s.state.desc.clone();
        let named = |n: &NodeInfo| d.replicas.contains(&n.id) || d.learners.contains(&n.id);
        let members = s.state.nodes().into_iter().filter(named).collect();
        (d, members)
    }

    /// Serves a directory operation on this node: here if it holds a live directory replica
    /// that can, else passed on once to the members it knows (see the module doc).
    pub(crate) async fn serve_directory(&self, op: ClientOp) -> ClientReply {
        let (op, forwarded) = match op {
            ClientOp::Forwarded(inner) => (inner.into_op(), true),
            op => (op, false),
        };
        let here = self.serve_directory_here(op.clone()).await;
        if forwarded || !matches!(here, ClientReply::NoGroup | ClientReply::NotLeader(_)) {
            return here;
        }
        // Only the directory's own operations are passed on (another is refused here).
        let Some(op) = DirectoryOp::of(op) else { return here };
        let hint = match here {
            ClientReply::NotLeader(Some(l)) => Some(l),
            _ => None,
        };
        let mut members = self.directory_members();
        members.retain(|n| *n != self.id);
        members.sort_by_key(|n| Some(*n) != hint);
        let op = ClientOp::Forwarded(op);
        let req = ClientRequest { group: DIRECTORY_GROUP, epoch: Epoch::default(), op };
        for n in members {
            match self.transport.send(self.id, n, Message::Client(req.clone())).await {
                Ok(Reply::Client(r @ ClientReply::Unknown(_))) => return r,
                Ok(Reply::Client(r)) if definite(&r) => return r,
                _ => {}
            }
        }
        here
    }

    /// A directory operation on this node's own replica: `NoGroup` without one that has
    /// applied anything.
    async fn serve_directory_here(&self, op: ClientOp) -> ClientReply {
        let Some(group) = self.group(DIRECTORY_GROUP) else { return ClientReply::NoGroup };
        if group.sm.shared.lock().expect("not poisoned").last_applied.is_none() {
            return ClientReply::NoGroup;
        }
        if let ClientOp::Heartbeat { node, ranges } = &op {
            return self.on_heartbeat(&group, *node, ranges);
        }
        directory_op(&group, op).await
    }

    /// Sends a directory request to node `n` (served here if `n` is this node); `None`
    /// unless the answer is definite.
    pub(crate) async fn directory_try(
        &self,
        n: NodeId,
        req: &ClientRequest,
    ) -> Option<ClientReply> {
        let reply = if n == self.id {
            self.handle_client(req.clone()).await
        } else {
            match self.transport.send(self.id, n, Message::Client(req.clone())).await {
                Ok(Reply::Client(r)) => r,
                _ => return None,
            }
        };
        definite(&reply).then_some(reply)
    }
}

/// A directory operation on a live directory replica.
pub(crate) async fn directory_op(group: &OpenraftGroup, op: ClientOp) -> ClientReply {
    let read_at_leader = |group: &OpenraftGroup| {
        let group = group.clone();
        async move {
            match group.read_barrier().await {
                Ok(()) => Ok(group),
                Err(ProposeError::NotLeader(l)) => Err(ClientReply::NotLeader(l)),
                Err(ProposeError::Unknown(e)) => Err(ClientReply::Unknown(e)),
            }
        }
    };
    let propose = |cmd: Command| async move { answer(group.propose(cmd).await) };
    match op {
        // Any replica answers: a stale answer is caught by the range's fence keys.
        ClientOp::Lookup(key) => {
            ClientReply::Desc(group.sm.shared.lock().expect("not poisoned").state.lookup(&key))
        }
        // The status views are read at the leader after a read barrier (not stale).
        ClientOp::Ranges => match read_at_leader(group).await {
            Ok(g) => ClientReply::Ranges(g.sm.shared.lock().expect("ok").state.descriptors()),
            Err(r) => r,
        },
        ClientOp::Nodes => match read_at_leader(group).await {
            Ok(g) => ClientReply::Nodes(g.sm.shared.lock().expect("ok").state.nodes()),
            Err(r) => r,
        },
        ClientOp::AllocGroupId => propose(Command::AllocGroupId).await,
        ClientOp::Report(descs) => propose(Command::Report { descs }).await,
        ClientOp::AddNode(node) => propose(Command::AddNode { node }).await,
        ClientOp::Drain(id) => propose(Command::Drain { id }).await,
        ClientOp::RemoveNode(id) => propose(Command::RemoveNode { id }).await,
        ClientOp::Heartbeat { .. } => ClientReply::Refused("served by the node".into()),
        _ => ClientReply::Refused("data operation sent to the directory".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_directory_file_round_trips_and_is_read_defensively() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_known(dir.path()).unwrap(), None);
        assert_eq!(load_known(dir.path(), 1), KnownDirectory::default());
        let mut d = RangeDesc::whole(DIRECTORY_GROUP, [1, 4, 5].into());
        d.epoch.conf_ver = 6;
        let members = vec![NodeInfo { id: 4, addr: "127.0.0.1:7004".into(), draining: false }];
        let known = KnownDirectory { directory: Some(d), members };
        write_known(dir.path(), &known).unwrap();
        assert_eq!(read_known(dir.path()).unwrap(), Some(known.clone()));
        assert_eq!(load_known(dir.path(), 1), known);
        // Damaged or oversized: an error to read, nothing known to a starting node.
        let path = dir.path().join(KNOWN_FILE);
        std::fs::write(&path, b"{\"directory\": 7").unwrap();
        let e = read_known(dir.path()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(load_known(dir.path(), 1), KnownDirectory::default());
        std::fs::write(&path, vec![b' '; MAX_KNOWN_BYTES as usize + 1]).unwrap();
        let e = read_known(dir.path()).unwrap_err();
        assert!(e.to_string().contains("over"), "{e}");
    }

    /// The new variants come last in their enums (docs/cluster.md section 3).
    #[test]
    fn forwarding_and_heard_encode_as_the_docs_say() {
        use crate::codec::encode;
        assert_eq!(encode(&ClientOp::Forwarded(DirectoryOp::Nodes)).unwrap(), [21, 6]);
        // Nothing nests: `Forwarded` inside `Forwarded` is no directory operation (index 21
        // is past `DirectoryOp`'s nine), so a long run of it is refused, not recursed into.
        let nested = vec![21u8; 100_000];
        assert!(crate::codec::decode::<ClientOp>(&nested).is_err());
        for op in [ClientOp::Nodes, ClientOp::Lookup(b"k".to_vec()), ClientOp::RemoveNode(3)] {
            assert_eq!(DirectoryOp::of(op.clone()).map(DirectoryOp::into_op), Some(op));
        }
        assert_eq!(DirectoryOp::of(ClientOp::Get(b"k".to_vec())), None);
        let heard = ClientReply::Heard {
            directory: RangeDesc::whole(DIRECTORY_GROUP, [2].into()),
            members: vec![NodeInfo { id: 2, addr: "a".into(), draining: false }],
        };
        // Variant 17; the descriptor: id 0, start and end empty, epoch (0, 0), voters [2],
        // learners []; then one node: id 2, address "a", not draining.
        let expect = [17, 0, 0, 0, 0, 0, 1, 2, 0, 1, 2, 1, b'a', 0];
        assert_eq!(encode(&heard).unwrap(), expect);
    }
}
