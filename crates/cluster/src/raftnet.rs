//! openraft's network for one group on one node, over the node's shared [`Transport`]:
//! each RPC is wrapped in a [`Message::Raft`] naming the group.
//!
//! Guarantees: an undelivered message surfaces as openraft's `Unreachable` (it backs off and
//! retries), a lost answer as a `Network` error; a target that does not host the group
//! answers `Refused`, which is reported as unreachable too.

use std::future::Future;
use std::sync::Arc;

use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetwork, RaftNetworkFactory};

use crate::msg::{Manifest, Message, NetError, RaftReply, RaftRpc, Reply, SnapshotRpc, Transport};
use crate::types::{typ, GroupId, NodeId, TypeConfig};

/// Builds connections for one group on one node.
#[derive(Clone)]
pub struct GroupNet {
    pub node: NodeId,
    pub group: GroupId,
    pub transport: Arc<dyn Transport>,
}

/// A connection to one target for one group.
pub struct Conn {
    net: GroupNet,
    target: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for GroupNet {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Conn {
        Conn { net: self.clone(), target }
    }
}

#[derive(Debug)]
struct Why(String);
impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Why {}

impl Conn {
    async fn call(
        &self,
        rpc: RaftRpc,
    ) -> Result<RaftReply, RPCError<NodeId, BasicNode, typ::RaftError>> {
        let msg = Message::Raft { group: self.net.group, from: self.net.node, rpc: Box::new(rpc) };
        match self.net.transport.send(self.net.node, self.target, msg).await {
            Ok(Reply::Raft(RaftReply::Refused(why))) => {
                Err(RPCError::Unreachable(Unreachable::new(&Why(why))))
            }
            Ok(Reply::Raft(r)) => Ok(r),
            Ok(Reply::Client(_)) => {
                Err(RPCError::Network(NetworkError::new(&Why("client reply to a raft rpc".into()))))
            }
            Err(e @ NetError::Unreachable(_)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e @ NetError::Timeout(_)) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

fn mismatch() -> RPCError<NodeId, BasicNode, typ::RaftError> {
    RPCError::Network(NetworkError::new(&Why("reply of another kind".into())))
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, typ::RaftError>> {
        match self.call(RaftRpc::Append(rpc)).await? {
            RaftReply::Append(r) => Ok(r),
            _ => Err(mismatch()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, typ::RaftError>> {
        match self.call(RaftRpc::Vote(rpc)).await? {
            RaftReply::Vote(r) => Ok(r),
            _ => Err(mismatch()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: typ::Vote,
        snapshot: typ::Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, openraft::error::Fatal<NodeId>>>
    {
        // The manifest only: the receiver fetches the chunks from several replicas.
        let manifest = Manifest::of(&snapshot.snapshot);
        let rpc = RaftRpc::Snapshot(Box::new(SnapshotRpc { vote, meta: snapshot.meta, manifest }));
        match self.call(rpc).await {
            Ok(RaftReply::Snapshot(r)) => Ok(r),
            Ok(_) => Err(StreamingError::Network(NetworkError::new(&Why(
                "reply of another kind".into()
            )))),
            Err(RPCError::Unreachable(u)) => Err(StreamingError::Unreachable(u)),
            Err(e) => Err(StreamingError::Network(NetworkError::new(&e))),
        }
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(std::time::Duration::from_millis(100)))
    }
}
