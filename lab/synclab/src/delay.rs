//! A TCP proxy that delays every byte by a fixed time in each direction: the netlab's WAN
//! latency. This kernel has no `netem`, so the delay is added by a real process between
//! the peer's server and its network link, as toxiproxy's latency toxic did before. Ours
//! needs no Go toolchain, waits with `poll` (to the microsecond, where a socket timeout
//! rounds up to the kernel's 4 ms tick) and spends its CPU in the kernel's TCP stack, not
//! in per-packet goroutines: `lab/notes/results-history.md`, "State sync over a network"
//! (why the delay proxy changed).
//!
//! Per accepted connection the proxy connects to the upstream and runs, per direction, a
//! thread that stamps each read with its arrival time and forwards it no earlier than
//! that time plus the direction's delay. Bytes keep their order; an end of
//! stream is forwarded (as a half close) after the same delay. Like toxiproxy, the TCP
//! handshake itself is not delayed: on kept-alive connections only the bytes matter. At
//! most [`MAX_QUEUED`] bytes wait per direction; beyond that the reader stops reading and
//! TCP's flow control pushes back on the sender.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

/// Largest read, bytes.
const READ_BYTES: usize = 64 << 10;
/// Bytes that may wait in one direction; beyond that the proxy stops reading.
pub const MAX_QUEUED: usize = 64 << 20;
/// Stack of the proxy's threads (two per connection; they hold little).
const STACK_BYTES: usize = 256 << 10;

/// The two one-way delays of a proxy.
#[derive(Clone, Copy, Debug)]
pub struct Delays {
    /// Of bytes from the client to the upstream (requests).
    pub up: Duration,
    /// Of bytes from the upstream back to the client (responses).
    pub down: Duration,
}

/// Counters of a running proxy, for tests and its log.
#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

/// Accepts connections on `listener` forever, proxying each to `upstream` with `delays`.
/// A connection whose upstream refuses is closed; the proxy goes on.
pub fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    delays: Delays,
    stats: Arc<Stats>,
) -> io::Result<()> {
    for client in listener.incoming() {
        let client = match client {
            Ok(c) => c,
            // A connection reset before accept, or too many open files for a moment.
            Err(_) => continue,
        };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let stats = stats.clone();
        std::thread::Builder::new().name("delay".into()).stack_size(STACK_BYTES).spawn(
            move || {
                if connect(client, upstream, delays, stats.clone()).is_err() {
                    stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
                }
            },
        )?;
    }
    Ok(())
}

fn connect(
    client: TcpStream,
    upstream: SocketAddr,
    delays: Delays,
    stats: Arc<Stats>,
) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    let st = stats.clone();
    let up = std::thread::Builder::new()
        .name("delay-up".into())
        .stack_size(STACK_BYTES)
        .spawn(move || pipe(c2, s2, delays.up, &st.bytes_up))?;
    pipe(server, client, delays.down, &stats.bytes_down);
    let _ = up.join();
    Ok(())
}

/// Forwards `from` to `to`, each byte `delay` after it was read, until either side ends.
/// One thread does both: it reads (with a timeout of the next piece's due time) and
/// writes what is due. While a write blocks (the link is full) it does not read, so a
/// full link pushes back on the sender as a router's full queue would.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration, counter: &AtomicU64) {
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    let mut end: Option<Instant> = None;
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let now = Instant::now();
        while queue.front().is_some_and(|(due, _)| *due <= now) {
            let (_, bytes) = queue.pop_front().expect("a front");
            if to.write_all(&bytes).is_err() {
                let _ = to.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Read);
                return;
            }
            queued -= bytes.len();
            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        let now = Instant::now();
        let next = queue.front().map(|(due, _)| *due).or(end);
        if let Some(e) = end {
            if queue.is_empty() && e <= now {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
        }
        if end.is_some() || queued >= MAX_QUEUED {
            // Nothing more to read (or no room): wait for the next due time.
            if let Some(t) = next {
                std::thread::sleep(t.saturating_duration_since(now));
            }
            continue;
        }
        // Wait for bytes until the next piece is due. `poll` times out to the microsecond
        // (a socket's read timeout would round up to the kernel's tick, 4 ms here).
        let timeout = next.and_then(|t| Timespec::try_from(t.saturating_duration_since(now)).ok());
        let mut fds = [PollFd::new(&from, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => {
                end = Some(now + delay);
                continue;
            }
        }
        match from.read(&mut buf) {
            Ok(0) => end = Some(Instant::now() + delay),
            Ok(n) => {
                queue.push_back((Instant::now() + delay, buf[..n].to_vec()));
                queued += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => end = Some(Instant::now() + delay),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// An upstream that echoes every line back, and a proxy in front of it.
    fn echo_behind_proxy(delays: Delays) -> (SocketAddr, Arc<Stats>) {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in echo.incoming().flatten() {
                std::thread::spawn(move || {
                    c.set_nodelay(true).unwrap();
                    let mut w = c.try_clone().unwrap();
                    let _ = io::copy(&mut &c, &mut w);
                    let _ = w.shutdown(Shutdown::Write);
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let s = stats.clone();
        std::thread::spawn(move || serve(listener, upstream, delays, s));
        (addr, stats)
    }

    #[test]
    fn each_round_trip_takes_the_two_delays() {
        let delays = Delays { up: Duration::from_millis(15), down: Duration::from_millis(25) };
        let (addr, _) = echo_behind_proxy(delays);
        let c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        let mut r = io::BufReader::new(c.try_clone().unwrap());
        let mut rtts = Vec::new();
        for i in 0..8 {
            let t = Instant::now();
            (&c).write_all(format!("ping {i}\n").as_bytes()).unwrap();
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert_eq!(line, format!("ping {i}\n"));
            rtts.push(t.elapsed());
        }
        rtts.sort();
        // Never less than the two delays, and the best of 8 within 6 ms of them (a wait
        // rounded up to the kernel's 4 ms tick, as a socket timeout is, would add 8).
        assert!(rtts[0] >= Duration::from_millis(40), "{rtts:?}");
        assert!(rtts[0] < Duration::from_millis(46), "{rtts:?}");
    }

    #[test]
    fn bulk_bytes_arrive_whole_in_order_and_the_end_is_forwarded() {
        let delays = Delays { up: Duration::from_millis(5), down: Duration::from_millis(5) };
        let (addr, stats) = echo_behind_proxy(delays);
        let c = TcpStream::connect(addr).unwrap();
        let data: Vec<u8> =
            (0..20_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut w = c.try_clone().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&sent).unwrap();
            // The half close travels through both proxies and the echo back to us.
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        (&c).read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert!(back == data, "{} bytes back of {}", back.len(), data.len());
        assert_eq!(stats.bytes_up.load(Ordering::Relaxed), data.len() as u64);
        assert_eq!(stats.bytes_down.load(Ordering::Relaxed), data.len() as u64);
    }

    #[test]
    fn a_refused_upstream_closes_the_client_and_the_proxy_goes_on() {
        // A port nothing listens on.
        let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let s = stats.clone();
        let d = Delays { up: Duration::ZERO, down: Duration::ZERO };
        std::thread::spawn(move || serve(listener, dead, d, s));
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).unwrap();
            let mut buf = Vec::new();
            // Closed without a byte.
            assert_eq!(c.read_to_end(&mut buf).unwrap_or(0), 0);
        }
        assert_eq!(stats.connections.load(Ordering::Relaxed), 2);
        // Counted just after the client is closed.
        let t = Instant::now();
        while stats.upstream_failures.load(Ordering::Relaxed) < 2 && t.elapsed().as_secs() < 5 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(stats.upstream_failures.load(Ordering::Relaxed), 2);
    }
}
