//! Bounds on a node's connections, in time and in number (docs/cluster.md section 3,
//! "Bounds on a connection"): what a peer that opens connections and then sends slowly,
//! sends nothing, or reads nothing can make a node hold.
//!
//! - **Idle:** a connection with no request under way and no byte of a frame arriving for
//!   [`ConnLimits::idle`] is closed (a fresh one too, before its first byte).
//! - **A frame, from its first byte to its last:** once the first byte of a frame arrived,
//!   the rest must arrive within `frame_base + len / min_rate`; a reply (or, on a
//!   multiplexed connection, every reply written at once) must be taken by the peer within
//!   the same bound of its length.
//! - **Number:** at most [`ConnLimits::max_conns`] connections are served at once; one
//!   accepted beyond it is closed at once.
//!
//! The clients' side keeps below these: a pooled connection idle for [`POOL_IDLE`] (well
//! under a node's `idle`) is not reused, so a client does not send on a connection the node
//! may be closing at that moment.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// A client does not reuse a connection idle for this long (a node closes one idle for
/// [`ConnLimits::idle`], by default four times as long).
pub const POOL_IDLE: Duration = Duration::from_secs(15);

/// The bounds a node serves its connections under ([`Default`]: the product's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Nothing under way and nothing arriving for this long closes a connection.
    pub idle: Duration,
    /// The fixed part of the time a frame may take, from its first byte to its last.
    pub frame_base: Duration,
    /// The slowest rate a frame may arrive (or a reply be taken) at, in bytes per second.
    pub min_rate: u64,
    /// Connections served at once.
    pub max_conns: usize,
}

impl Default for ConnLimits {
    /// One minute idle; 10 s plus 256 KiB/s per frame (the largest frame, 64 MiB, may take
    /// 266 s); 1,024 connections (a node's peers hold a few each, a client machine one per
    /// node with the multiplexed transport).
    fn default() -> Self {
        ConnLimits {
            idle: Duration::from_secs(60),
            frame_base: Duration::from_secs(10),
            min_rate: 256 << 10,
            max_conns: 1024,
        }
    }
}

impl ConnLimits {
    /// How long a frame of `len` bytes may take from its first byte to its last.
    pub fn frame_time(&self, len: usize) -> Duration {
        let rate = self.min_rate.max(1);
        let extra = Duration::from_micros((len as u64).saturating_mul(1_000_000) / rate);
        self.frame_base.saturating_add(extra)
    }
}

/// `work`, unless `deadline` comes first: then an I/O error of kind `TimedOut`.
pub async fn by<T>(
    deadline: Instant,
    work: impl Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_may_take_its_base_and_its_length_at_the_slowest_rate() {
        let l = ConnLimits::default();
        assert_eq!(l.frame_time(0), Duration::from_secs(10));
        assert_eq!(l.frame_time(256 << 10), Duration::from_secs(11));
        assert_eq!(l.frame_time(crate::tcp::MAX_FRAME), Duration::from_secs(10 + 256));
        let zero = ConnLimits { min_rate: 0, ..l };
        assert!(zero.frame_time(usize::MAX) > Duration::from_secs(1 << 40), "no overflow");
        assert!(POOL_IDLE * 2 < l.idle, "clients retire a connection well before a node");
    }

    #[tokio::test]
    async fn an_elapsed_bound_is_a_timed_out_error() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(1)
        };
        let e = by(Instant::now() + Duration::from_millis(20), slow).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        let soon = Instant::now() + Duration::from_secs(1);
        assert_eq!(by(soon, async { Ok(2) }).await.unwrap(), 2);
    }
}
