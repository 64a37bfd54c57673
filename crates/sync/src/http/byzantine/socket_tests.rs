//! The adversarial kinds on real loopback sockets, byte for byte: what a client reading
//! raw bytes receives from each.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bavl_core::{Snapshot, Tree};

use super::raw::RESET_DELAY;
use super::{Byzantine, EARLY_HINTS, TRICKLE_INTERVAL};
use crate::http::server::{Catalog, Server, ServerHandle};
use crate::protocol;

/// A tree of 600-byte values at capacity 16: chunks of about 10 KB.
fn snapshot() -> Snapshot {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0u32..200 {
        t.insert(&i.to_be_bytes(), &[i as u8; 600]).unwrap();
    }
    t.snapshot()
}

fn serve(kind: Byzantine, snap: &Snapshot) -> ServerHandle {
    let catalog = Catalog::new();
    catalog.publish(1, snap.clone());
    Server::bind("127.0.0.1:0", catalog).unwrap().byzantine(kind).spawn().unwrap()
}

fn get(h: &ServerHandle, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(h.addr()).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    s
}

/// What arrives within `wait` (or until the connection ends), and how it ended.
fn read_for(s: &mut TcpStream, wait: Duration, cap: usize) -> (Vec<u8>, Option<ErrorKind>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < wait && got.len() < cap {
        let left = wait.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) => return (got, Some(e.kind())),
        }
    }
    (got, Some(ErrorKind::WouldBlock))
}

fn split_head(bytes: &[u8]) -> (&[u8], &[u8]) {
    let end = crate::http::wire::head_end(bytes).expect("a complete head");
    bytes.split_at(end)
}

#[test]
fn drip_head_sends_its_head_a_byte_at_a_time() {
    let snap = snapshot();
    let h = serve(Byzantine::DripHead, &snap);
    let mut s = get(&h, &protocol::listing_path());
    let (got, _) = read_for(&mut s, Duration::from_millis(1000), 1 << 20);
    // About ten bytes a second, all of them the start of an honest head.
    assert!((5..=14).contains(&got.len()), "{} bytes in 1 s", got.len());
    assert!(b"HTTP/1.1 200 OK\r\n".starts_with(&got), "{:?}", String::from_utf8_lossy(&got));
}

#[test]
fn drip_body_sends_the_head_then_a_byte_at_a_time() {
    let snap = snapshot();
    let h = serve(Byzantine::DripBody, &snap);
    let mut s = get(&h, &protocol::chunk_path(&snap.root_hash(), 1));
    let (got, _) = read_for(&mut s, TRICKLE_INTERVAL * 10, 1 << 20);
    let (head, body) = split_head(&got);
    let len = snap.export_chunk(1).unwrap().len();
    assert!(String::from_utf8_lossy(head).contains(&format!("Content-Length: {len}")));
    assert!((5..=11).contains(&body.len()), "{} body bytes in 1 s", body.len());
    assert_eq!(body, &snap.export_chunk(1).unwrap()[..body.len()]);
}

#[test]
fn endless_trailers_follow_the_true_chunk() {
    let snap = snapshot();
    let h = serve(Byzantine::EndlessTrailers, &snap);
    let truth = snap.export_chunk(2).unwrap();
    let mut s = get(&h, &protocol::chunk_path(&snap.root_hash(), 2));
    let (got, _) = read_for(&mut s, Duration::from_secs(5), truth.len() + 100_000);
    let (head, rest) = split_head(&got);
    assert!(String::from_utf8_lossy(head).contains("Transfer-Encoding: chunked"));
    let frame = format!("{:x}\r\n", truth.len());
    assert!(rest.starts_with(frame.as_bytes()));
    let rest = &rest[frame.len()..];
    assert_eq!(&rest[..truth.len()], &truth[..]);
    let trailers = &rest[truth.len()..];
    assert!(trailers.starts_with(b"\r\n0\r\nX-a: b\r\nX-a: b\r\n"));
    assert!(trailers.len() > 50_000, "only {} bytes of trailers", trailers.len());
    assert!(!trailers.windows(4).any(|w| w == b"\r\n\r\n"), "the trailers ended");
}

#[test]
fn no_chunk_zero_holds_chunk_0_and_answers_404_for_others() {
    let snap = snapshot();
    let h = serve(Byzantine::NoChunkZero, &snap);
    let mut zero = get(&h, &protocol::chunk_path(&snap.root_hash(), 0));
    let mut one = get(&h, &protocol::chunk_path(&snap.root_hash(), 1));
    let (got, end) = read_for(&mut zero, Duration::from_millis(1500), 1 << 20);
    assert!(got.is_empty() && end == Some(ErrorKind::WouldBlock), "{got:?} {end:?}");
    let (got, _) = read_for(&mut one, Duration::from_secs(2), 1 << 20);
    assert!(got.starts_with(b"HTTP/1.1 404 "), "{:?}", String::from_utf8_lossy(&got));
    let mut m = get(&h, &protocol::manifest_path(1));
    let (got, _) = read_for(&mut m, Duration::from_secs(2), 1 << 20);
    let (_, body) = split_head(&got);
    assert_eq!(body, &protocol::Manifest::from_snapshot(1, &snap).unwrap().to_json()[..]);
}

#[test]
fn slow_sends_the_true_chunk_at_about_20_kib_per_second() {
    let snap = snapshot();
    let h = serve(Byzantine::Slow, &snap);
    let truth = snap.export_chunk(3).unwrap();
    let start = Instant::now();
    let mut s = get(&h, &protocol::chunk_path(&snap.root_hash(), 3));
    let (got, _) = read_for(&mut s, Duration::from_secs(10), usize::MAX);
    let secs = start.elapsed().as_secs_f64();
    let (_, body) = split_head(&got);
    assert_eq!(body, &truth[..]);
    let pieces = truth.len().div_ceil(super::SLOW_RATE / 10);
    assert!(pieces >= 4, "a chunk of {} bytes is too small to time", truth.len());
    // Piece j leaves at j × 100 ms: the body takes (pieces - 1) tenths of a second.
    let least = (pieces - 1) as f64 * 0.1;
    assert!(secs >= least * 0.95 && secs < least + 1.5, "{secs} s for {pieces} pieces");
}

#[test]
fn early_hints_precede_every_honest_response() {
    let snap = snapshot();
    let h = serve(Byzantine::EarlyHints, &snap);
    let mut s = get(&h, &protocol::chunk_path(&snap.root_hash(), 0));
    let truth = snap.export_chunk(0).unwrap();
    let (got, _) = read_for(&mut s, Duration::from_secs(2), EARLY_HINTS.len() + truth.len() + 300);
    assert!(got.starts_with(EARLY_HINTS));
    let (head, body) = split_head(&got[EARLY_HINTS.len()..]);
    assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_eq!(body, &truth[..]);
}

#[test]
fn reset_truncate_cuts_every_other_chunk_with_a_reset() {
    let snap = snapshot();
    let h = serve(Byzantine::ResetTruncate, &snap);
    let truth = snap.export_chunk(4).unwrap();
    let path = protocol::chunk_path(&snap.root_hash(), 4);
    let mut s = get(&h, &path);
    let (got, end) = read_for(&mut s, RESET_DELAY * 30, usize::MAX);
    let (head, body) = split_head(&got);
    assert!(String::from_utf8_lossy(head).contains(&format!("Content-Length: {}", truth.len())));
    assert_eq!(body, &truth[..truth.len() / 2]);
    assert_eq!(end, Some(ErrorKind::ConnectionReset), "not ended by a reset");
    // The next chunk request is answered in full, on a connection kept alive.
    let mut s = get(&h, &path);
    let (got, _) = read_for(&mut s, Duration::from_secs(1), usize::MAX);
    let (head, body) = split_head(&got);
    assert!(String::from_utf8_lossy(head).contains("keep-alive"));
    assert_eq!(body, &truth[..]);
}
