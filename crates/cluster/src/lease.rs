//! Leader leases: reads without a Raft round while no other leader can exist.
//!
//! Why: a read-index round ([`crate::barrier`]) costs about 130 µs of node CPU (a heartbeat
//! to each follower and their answers), shared only by the reads that arrive while the
//! round before it runs. A group with few concurrent readers pays one round for every few
//! reads. A lease lets the leader answer from its own state for a while after a round.
//!
//! Why it stays linearizable. A round that *started* at local time `t` and succeeded had a
//! quorum answer a heartbeat sent after `t`, so every member of that quorum last heard from
//! this leader at or after `t`. No other leader can be elected before `t + E`, where `E` is
//! openraft's `election_timeout_min`, because a new leader needs votes from a majority, and
//! that majority contains a member `X` of the round's quorum:
//! - if `X` is the candidate, it stood only after `E` without hearing from the leader;
//! - if `X` voted for another, openraft refused every vote while `X`'s lease on the leader
//!   lasted (`election_timeout_max` ≥ `E` after it last heard from it);
//! - if `X` restarted in between, it forgot when it last heard from the leader (openraft
//!   keeps that in memory), so a restarted replica that ever voted neither stands nor votes
//!   for [`RESTART_QUIET`] of `E` after it starts ([`Quiet`]).
//!
//! Until `t + L` (`L` = [`LEASE_SHARE`] of `E`, the rest a margin for clock-rate drift
//! between hosts and for the time between the check and the read), this replica's applied
//! state holds every write acknowledged before a read is called: the round waited until the
//! replica applied the commit index it had at `t` (every write acknowledged before `t`), and
//! writes acknowledged after `t` were committed by this leader, the only one, which
//! acknowledges a write only once it has applied it here. Whether the replica still leads
//! does not matter within the lease: nobody else can commit. A lease is never extended
//! by anything but a round that succeeded.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The share of `election_timeout_min` a round's lease lasts, as a fraction.
pub const LEASE_SHARE: (u32, u32) = (3, 4);

/// How long a restarted replica that ever voted keeps quiet, in `election_timeout_min`s:
/// it must outlast any lease its acknowledgements before the restart granted.
pub const RESTART_QUIET: u32 = 1;

/// The lease one replica holds from its own rounds.
#[derive(Debug)]
pub struct Lease {
    length: Duration,
    until: Mutex<Option<Instant>>,
}

impl Lease {
    /// A lease of [`LEASE_SHARE`] of `election_timeout_min`; `Duration::ZERO` turns leases off.
    pub fn for_election_timeout(election_timeout_min: Duration) -> Lease {
        let (num, den) = LEASE_SHARE;
        Lease { length: election_timeout_min * num / den, until: Mutex::new(None) }
    }

    /// Whether a read now may skip the round.
    pub fn holds(&self) -> bool {
        let until = *self.until.lock().expect("not poisoned");
        until.is_some_and(|u| Instant::now() < u)
    }

    /// A round that started at `started` succeeded.
    pub fn earned(&self, started: Instant) {
        if self.length.is_zero() {
            return;
        }
        let end = started + self.length;
        let mut until = self.until.lock().expect("not poisoned");
        if until.is_none_or(|u| u < end) {
            *until = Some(end);
        }
    }
}

/// When a replica may vote and stand again after it started.
#[derive(Clone, Copy, Debug)]
pub struct Quiet {
    until: Instant,
}

impl Quiet {
    /// A replica starting now: quiet for [`RESTART_QUIET`] x `election_timeout_min` if it
    /// ever voted (a vote of a term above 0, or any log), not at all if it is new.
    pub fn starting(ever_voted: bool, election_timeout_min: Duration) -> Quiet {
        let now = Instant::now();
        let until = if ever_voted { now + election_timeout_min * RESTART_QUIET } else { now };
        Quiet { until }
    }

    /// Whether the replica must still refuse votes (and not stand).
    pub fn now(&self) -> bool {
        Instant::now() < self.until
    }

    /// How long it stays quiet from now.
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_runs_from_the_rounds_start_not_its_end() {
        let lease = Lease::for_election_timeout(Duration::from_millis(400));
        assert!(!lease.holds(), "no round, no lease");
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await; // the round takes 100 ms
        lease.earned(started);
        assert!(lease.holds());
        tokio::time::sleep(Duration::from_millis(199)).await;
        assert!(lease.holds(), "299 ms after the start: within 3/4 of 400");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!lease.holds(), "300 ms after the round started, the lease is over");
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_round_never_shortens_a_lease() {
        let lease = Lease::for_election_timeout(Duration::from_millis(400));
        let first = Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        lease.earned(Instant::now());
        lease.earned(first); // a slower round that started earlier, finishing later
        tokio::time::sleep(Duration::from_millis(290)).await;
        assert!(lease.holds(), "340 ms from the first start, 290 from the second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_lease_never_holds() {
        let lease = Lease::for_election_timeout(Duration::ZERO);
        lease.earned(Instant::now());
        assert!(!lease.holds());
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_replica_that_voted_keeps_quiet() {
        let e = Duration::from_millis(300);
        let fresh = Quiet::starting(false, e);
        let restarted = Quiet::starting(true, e);
        assert!(!fresh.now());
        assert!(restarted.now());
        tokio::time::sleep(Duration::from_millis(299)).await;
        assert!(restarted.now());
        assert_eq!(restarted.left(), Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!restarted.now());
    }
}
