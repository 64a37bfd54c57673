//! The fetch threads of `http::download` are bounded by `Options::max_in_flight`, not by
//! the number of sources. The threads of the process are counted, and another test's sync
//! running beside it would be counted too: so the test runs itself again, alone, in a
//! child process of this test binary ([`ALONE`] set), and checks that child's verdict.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use bavl_core::{Snapshot, Tree};
use bavl_sync::http::{self, BaseUrl, Catalog, Server, SyncConfig};
use bavl_sync::Options;

fn snapshot(keys: u32) -> Snapshot {
    let mut t = Tree::with_capacity(16).unwrap();
    for i in 0..keys {
        t.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    t.snapshot()
}

/// A source that reads each request and never answers (until the client hangs up).
fn staller() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
                let _ = s.flush();
            });
        }
    });
    url
}

/// Threads of this process named `name` (Linux: `/proc/self/task/*/comm`).
fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

/// Set in the child process that runs the test alone.
const ALONE: &str = "BAVL_SYNC_THREADS_TEST_ALONE";

#[test]
fn fetch_threads_stay_within_max_in_flight_whatever_the_sources() {
    if std::env::var_os(ALONE).is_none() {
        let name = "threads::fetch_threads_stay_within_max_in_flight_whatever_the_sources";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env(ALONE, "1")
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the test alone failed:\n{report}");
        assert!(stdout.contains("1 passed"), "the test alone did not run:\n{report}");
        return;
    }
    // 40 stallers beside one honest source, at most 8 requests in flight: the fetch pool
    // never grows past 8 + 16 threads (it grew by one per stalled request before).
    let snap = snapshot(3000);
    let catalog = Catalog::new();
    catalog.publish(3, snap.clone());
    let honest = Server::bind("127.0.0.1:0", catalog).unwrap().spawn().unwrap();
    let mut sources: Vec<BaseUrl> = (0..40).map(|_| BaseUrl::parse(&staller()).unwrap()).collect();
    sources.push(BaseUrl::parse(&honest.url()).unwrap());
    let max_in_flight = 8;
    let options = Options {
        max_in_flight,
        grace: Duration::from_millis(800),
        request_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let cfg =
        SyncConfig { sources, options, verify_threads: 1, connect_timeout: Duration::from_secs(2) };
    let mut most = 0;
    let (mut tree, _) = http::download_tree(snap.root_hash(), 3, &cfg, &mut |_| {
        most = most.max(threads_named("bavl-fetch"));
    })
    .unwrap();
    assert_eq!(tree.root_hash(), snap.root_hash());
    assert!(most > 0, "the fetch threads were seen");
    assert!(most <= max_in_flight as usize + 16, "{most} fetch threads");
}
