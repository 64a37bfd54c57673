//! The narrow interface the rest of the crate uses to drive one replicated group, so that
//! another consensus engine can replace openraft later; and its openraft implementation.
//!
//! Guarantees of an implementation: [`Consensus::propose`] returns the state machine's
//! answer once the command is committed and applied on this replica; an error says whether
//! the command certainly did not enter the log ([`ProposeError::NotLeader`] before
//! proposing) or may have ([`ProposeError::Unknown`]). [`Consensus::read_barrier`] returns
//! once this replica is leader as of some instant after the call and has applied every entry
//! committed before that instant, so a read of the local state after it is linearizable; the
//! openraft implementation answers at once while it holds a leader lease ([`crate::lease`]).

use std::future::Future;
use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, RaftError};

use crate::barrier::ReadRounds;
use crate::lease::{Lease, Quiet};
use crate::propose::{batchable, Batcher};
use crate::sm::GroupSm;
use crate::types::{typ, Command, NodeId, Response};

/// Why a proposal or a read barrier failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This replica is not the leader; the command was not proposed. Carries the known leader.
    #[error("not the leader (leader: {0:?})")]
    NotLeader(Option<NodeId>),
    /// The command may or may not have been committed (leadership lost, shutdown, ...).
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// One replica of one replicated group.
pub trait Consensus: Clone + Send + Sync + 'static {
    /// Proposes `cmd` and waits for its answer from the state machine.
    fn propose(&self, cmd: Command) -> impl Future<Output = Result<Response, ProposeError>> + Send;
    /// Waits until a local read is linearizable (a leader lease, or read-index through a
    /// quorum round).
    fn read_barrier(&self) -> impl Future<Output = Result<(), ProposeError>> + Send;
    /// The leader this replica knows of.
    fn leader(&self) -> Option<NodeId>;
}

/// An openraft replica with its state machine.
#[derive(Clone)]
pub struct OpenraftGroup {
    pub raft: typ::Raft,
    pub sm: GroupSm,
    pub node: NodeId,
    /// Client writes go through it, to be proposed together (see `propose`).
    batcher: Batcher,
    /// Concurrent reads share read-index rounds (see `barrier`).
    reads: Arc<ReadRounds>,
    /// Reads skip the round while a round's lease lasts (see `lease`).
    lease: Arc<Lease>,
    /// Until when this replica, restarted, neither votes nor stands (see `lease`).
    pub quiet: Quiet,
}

impl OpenraftGroup {
    /// The replica `node` of a group, its writes batched by a task of its own. `raft` must
    /// have been started with elections off ([`openraft::Config::enable_elect`]): they are
    /// turned on here, after the replica's quiet time if it `ever_voted`.
    pub fn new(raft: typ::Raft, sm: GroupSm, node: NodeId, ever_voted: bool) -> Self {
        let batcher = Batcher::start(raft.clone());
        let election = std::time::Duration::from_millis(raft.config().election_timeout_min);
        let quiet = Quiet::starting(ever_voted, election);
        let elect = raft.clone();
        tokio::spawn(async move {
            tokio::time::sleep(quiet.left()).await;
            elect.runtime_config().elect(true);
        });
        let lease = Arc::new(Lease::for_election_timeout(election));
        OpenraftGroup { raft, sm, node, batcher, reads: Arc::default(), lease, quiet }
    }

    /// Read-index rounds this replica started (reads inside a lease start none).
    pub fn read_rounds(&self) -> u64 {
        self.reads.rounds()
    }
}

impl Consensus for OpenraftGroup {
    async fn propose(&self, cmd: Command) -> Result<Response, ProposeError> {
        let leader = self.leader();
        if leader != Some(self.node) {
            return Err(ProposeError::NotLeader(leader));
        }
        if batchable(&cmd) {
            return self.batcher.propose(cmd).await;
        }
        crate::propose::write(&self.raft, cmd).await
    }

    async fn read_barrier(&self) -> Result<(), ProposeError> {
        if self.lease.holds() {
            return Ok(());
        }
        let (raft, lease) = (&self.raft, &self.lease);
        self.reads
            .barrier(|| async move {
                let started = tokio::time::Instant::now();
                let outcome = linearizable(raft).await;
                if outcome.is_ok() {
                    lease.earned(started);
                }
                outcome
            })
            .await
    }

    fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }
}

/// One read-index round: a quorum confirms the leadership, then the replica applies up to
/// the commit index it had when the round began.
async fn linearizable(raft: &typ::Raft) -> Result<(), ProposeError> {
    match raft.ensure_linearizable().await {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            Err(ProposeError::NotLeader(f.leader_id))
        }
        Err(e) => Err(ProposeError::Unknown(e.to_string())),
    }
}
