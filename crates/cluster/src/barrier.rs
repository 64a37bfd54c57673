//! Read barriers shared between concurrent readers of one replica.
//!
//! Why: openraft 0.9's `ensure_linearizable` sends a heartbeat to every other voter and
//! waits for a quorum on each call, so every search cost a Raft round of its own (two RPCs
//! on a group of three), more CPU than an update, whose writes share entries
//! ([`crate::propose`]). Here one round runs at a time per replica; readers that arrive
//! while it runs wait, and all of them share the next round.
//!
//! Why it stays linearizable: a read may use a round only if the round *started after the
//! read was called*. Rounds are numbered as they start; a reader notes how many had started
//! when it arrived (`seen`) and accepts only a round numbered above it. Such a round asked
//! for its read index and its quorum after the reader's call, so the index covers every
//! write acknowledged before that call, and the round waited until this replica applied it.
//! Sharing a round that was already running when a reader arrived would not be safe (its
//! read index may predate a write that completed just before the read was called), and the
//! tests below check that it is not done.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Mutex;

use crate::consensus::ProposeError;

type Outcome = Result<(), ProposeError>;

/// One replica's shared read rounds.
#[derive(Default)]
pub struct ReadRounds {
    /// Rounds started so far; the n-th round is numbered n.
    started: AtomicU64,
    /// Held while a round runs; holds the last finished round's number and outcome.
    last: Mutex<Option<(u64, Outcome)>>,
}

impl ReadRounds {
    /// Waits for a round that started after this call, running `round` if none has.
    pub async fn barrier<F, Fut>(&self, round: F) -> Outcome
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome>,
    {
        let seen = self.started.load(Ordering::SeqCst);
        // The lock is fair: readers queued behind a running round get it one after another,
        // the first runs the next round and the others find it finished.
        let mut last = self.last.lock().await;
        if let Some((n, outcome)) = &*last {
            if *n > seen {
                return outcome.clone();
            }
        }
        let n = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        // Cancelled here (the caller dropped), nothing is recorded: the next reader runs a
        // round of its own.
        let outcome = round().await;
        *last = Some((n, outcome.clone()));
        outcome
    }

    /// Rounds started so far.
    pub fn rounds(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test(start_paused = true)]
    async fn concurrent_readers_share_rounds() {
        let rounds = Arc::new(ReadRounds::default());
        let mut tasks = vec![];
        for _ in 0..32 {
            let r = rounds.clone();
            tasks.push(tokio::spawn(async move {
                r.barrier(|| async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(())
                })
                .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(()));
        }
        // The first reader runs a round; the 31 queued behind it share the second.
        assert_eq!(rounds.rounds(), 2);
    }

    #[tokio::test]
    async fn a_round_running_when_a_reader_arrives_is_not_shared() {
        let rounds = Arc::new(ReadRounds::default());
        let (release, held) = oneshot::channel::<()>();
        let first = {
            let r = rounds.clone();
            tokio::spawn(async move {
                r.barrier(|| async {
                    held.await.unwrap();
                    Ok(())
                })
                .await
            })
        };
        while rounds.rounds() < 1 {
            tokio::task::yield_now().await;
        }
        // A reader arriving now, while round 1 runs, must run round 2: poll it once, so it
        // has arrived (and queued for the lock) before round 1 ends.
        let second = rounds.barrier(|| async { Err(ProposeError::Unknown("round 2".into())) });
        let mut second = std::pin::pin!(second);
        let pending = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(second.as_mut().poll(cx).is_pending())
        });
        assert!(pending.await);
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Ok(()));
        assert_eq!(second.await, Err(ProposeError::Unknown("round 2".into())));
        assert_eq!(rounds.rounds(), 2);
    }

    #[tokio::test]
    async fn a_cancelled_round_is_not_shared() {
        let rounds = ReadRounds::default();
        let cancelled = rounds.barrier(std::future::pending::<Outcome>);
        assert!(tokio::time::timeout(Duration::from_millis(5), cancelled).await.is_err());
        let again = rounds.barrier(|| async { Err(ProposeError::NotLeader(Some(3))) }).await;
        assert_eq!(again, Err(ProposeError::NotLeader(Some(3))));
        assert_eq!(rounds.rounds(), 2);
    }
}
