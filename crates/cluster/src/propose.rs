//! Proposal batching on a group's leader: client writes that arrive while earlier ones are
//! on their way through the log are proposed together, as one entry.
//!
//! Why: openraft 0.9 appends each `client_write` as its own entry and waits for that
//! append's fsync before it takes the next, so a leader fsynced once per client write and
//! one group's write throughput was bounded by the fsync latency (`docs/cluster.md`
//! section 11). Here one task per group takes the writes waiting in its queue, up to
//! [`MAX_BATCH`] commands or [`MAX_BATCH_BYTES`] of keys and values, and proposes them as one
//! [`Command::Proposals`] entry (a lone write goes as itself, so one client's latency is
//! unchanged); at most [`IN_FLIGHT`] such entries are in flight at once, and what arrives
//! meanwhile waits for the next one. When an entry is answered, the freed proposer waits up
//! to [`LINGER`] for as many writes as were queued plus as many as that entry answered
//! (their callers are likely to write again at once) before it proposes: proposing at
//! once split a closed loop of writers into two halves taking alternate entries. A lone
//! writer never waits (it is the one expected), nor does a write to an idle group (the
//! wait counts from when the proposer was freed).
//!
//! The state machine applies the commands of an entry in order, each as if it were an
//! entry of its own, with its own epoch and fence checks, and answers each
//! ([`Response::Each`]); only client writes (`Put`, `Delete`, `Batch`) are batched, so
//! splits, merges, attestations and the directory's commands keep one entry each.
//! Linearizability is unchanged: each write still takes effect at one point between
//! its call and its answer (when its entry is applied), and writes batched together were
//! concurrent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use crate::consensus::ProposeError;
use crate::types::{typ, BatchOp, Command, Response};

/// Most commands in one proposed entry.
pub const MAX_BATCH: usize = 256;
/// Most bytes of keys and values in one proposed entry (the first command always goes).
pub const MAX_BATCH_BYTES: usize = 1 << 20;
/// Most entries of batched writes in flight at once.
pub const IN_FLIGHT: usize = 1;
/// Longest a freed proposer waits, after an entry is answered, for that entry's callers to
/// come back with their next writes before it proposes what it holds.
pub const LINGER: Duration = Duration::from_millis(2);

type Answer = Result<Response, ProposeError>;
type Pending = (Command, oneshot::Sender<Answer>);

/// Whether `cmd` may share an entry with others: client writes only.
pub fn batchable(cmd: &Command) -> bool {
    matches!(cmd, Command::Put { .. } | Command::Delete { .. } | Command::Batch { .. })
}

/// Bytes of keys and values `cmd` carries, for [`MAX_BATCH_BYTES`].
fn payload_bytes(cmd: &Command) -> usize {
    match cmd {
        Command::Put { key, value, .. } => key.len() + value.len(),
        Command::Delete { key, .. } => key.len(),
        Command::Batch { ops, .. } => ops
            .iter()
            .map(|op| match op {
                BatchOp::Put(k, v) => k.len() + v.len(),
                BatchOp::Delete(k) => k.len(),
            })
            .sum(),
        _ => 0,
    }
}

/// The queue of one group's batched writes (cheap to clone). Its task ends when every
/// clone is dropped.
#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Batcher {
    /// Starts the task proposing to `raft`.
    pub fn start(raft: typ::Raft) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(raft, rx));
        Batcher { tx }
    }

    /// Queues `cmd` (a client write, [`batchable`]) and waits for its own answer.
    pub async fn propose(&self, cmd: Command) -> Answer {
        let (tx, rx) = oneshot::channel();
        let stopped = || ProposeError::Unknown("the group's proposer stopped".into());
        self.tx.send((cmd, tx)).map_err(|_| stopped())?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }
}

async fn run(raft: typ::Raft, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Commands the last finished entry answered: their callers are likely to be back soon.
    let answered = Arc::new(AtomicUsize::new(0));
    let linger = linger();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let freed = Instant::now();
        let returning = answered.swap(0, Ordering::AcqRel);
        let mut batch = Gathered::default();
        while let Ok(next) = rx.try_recv() {
            batch.take(next);
            if batch.full() {
                break;
            }
        }
        // Everyone queued now, and everyone the last entry answered, who will be back
        // shortly with their next write unless they are done.
        let expect = (batch.items.len() + returning).min(MAX_BATCH);
        if batch.items.is_empty() {
            let Some(first) = rx.recv().await else { return };
            batch.take(first);
        }
        let deadline = freed + linger;
        while batch.items.len() < expect && !batch.full() {
            let next = match rx.try_recv() {
                Ok(next) => next,
                Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(next)) => next,
                    _ => break,
                },
            };
            batch.take(next);
        }
        let batch = batch.items;
        let raft = raft.clone();
        let answered = answered.clone();
        tokio::spawn(async move {
            let n = batch.len();
            propose_batch(&raft, batch).await;
            answered.store(n, Ordering::Release);
            drop(slot);
        });
    }
}

/// The writes taken for the next entry.
#[derive(Default)]
struct Gathered {
    items: Vec<Pending>,
    bytes: usize,
}

impl Gathered {
    fn take(&mut self, next: Pending) {
        self.bytes += payload_bytes(&next.0);
        self.items.push(next);
    }

    /// At [`MAX_BATCH`] commands or [`MAX_BATCH_BYTES`] (the first always goes).
    fn full(&self) -> bool {
        self.items.len() >= MAX_BATCH || self.bytes >= MAX_BATCH_BYTES
    }
}

/// How long a freed proposer waits for the callers the last entry answered ([`LINGER`],
/// or `BAVL_PROPOSE_LINGER_US` microseconds, for measuring).
fn linger() -> Duration {
    let us = std::env::var("BAVL_PROPOSE_LINGER_US").ok().and_then(|v| v.parse().ok());
    us.map(Duration::from_micros).unwrap_or(LINGER)
}

/// Proposes `batch` as one entry and hands each command its answer.
async fn propose_batch(raft: &typ::Raft, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let (cmd, reply) = batch.pop().expect("one");
        let _ = reply.send(write(raft, cmd).await);
        return;
    }
    let (cmds, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    let n = cmds.len();
    match write(raft, Command::Proposals(cmds)).await {
        Ok(Response::Each(answers)) if answers.len() == n => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        other => {
            // Applied with an answer of the wrong shape (a bug), or not known to be applied.
            let e = match other {
                Err(e) => e,
                Ok(r) => ProposeError::Unknown(format!("a batch of {n} was answered {r:?}")),
            };
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Proposes `cmd` as one entry and waits for its answer.
pub(crate) async fn write(raft: &typ::Raft, cmd: Command) -> Answer {
    match raft.client_write(cmd).await {
        Ok(r) => Ok(r.data),
        Err(e) => Err(ProposeError::Unknown(e.to_string())),
    }
}
