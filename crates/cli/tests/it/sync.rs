//! `bavl serve`, `bavl export` and `bavl sync` as processes on loopback: a sync from the
//! server, a static export behind `python3 -m http.server` and a lying server bans the
//! liar and writes a store that opens paged at the version and root with every key; a sync
//! killed with SIGKILL leaves a directory that is not a store, and the same command
//! resumes it without fetching again what it had made durable.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, start_until as start, Kill, TempDir};
use bavl_store::{Options, Store};

/// A store of 3000 keys over two versions; (version, root hex).
fn make_store(db: &std::path::Path) -> (u64, String) {
    let opts = Options { capacity: Some(16), ..Options::default() };
    let mut store = Store::open(db, opts).unwrap();
    for i in 0u32..3000 {
        store.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    store.commit().unwrap();
    store.insert(b"second", b"version").unwrap();
    let (v, root) = store.commit().unwrap();
    store.close().unwrap();
    (v, hex::encode(root))
}

fn serve(db: &std::path::Path) -> (Kill, String) {
    common::serve(&[std::ffi::OsStr::new("--db"), db.as_os_str()])
}

/// Proxies `upstream` (a `bavl serve` URL), one request at a time, sleeping `delay`
/// before each answer, flipping a byte of every chunk if `lie`.
fn proxy(upstream: String, delay: Duration, lie: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let up = upstream.trim_start_matches("http://").to_string();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut buf = vec![0u8; 4096];
            let Ok(n) = s.read(&mut buf) else { continue };
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = req.split(' ').nth(1).unwrap_or("/").to_string();
            let mut u = std::net::TcpStream::connect(&up).unwrap();
            write!(u, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
            let mut all = Vec::new();
            u.read_to_end(&mut all).unwrap();
            let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let mut body = all.split_off(end);
            if lie && path.contains("/chunks/") {
                let mid = body.len() / 2;
                body[mid] ^= 0x10;
            }
            std::thread::sleep(delay);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
        }
    });
    url
}

fn bavl_sync(
    db: &std::path::Path,
    root: &str,
    v: u64,
    peers: &[String],
    json: &std::path::Path,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bavl"));
    cmd.args(["sync", "--quiet", "--grace", "2", "--root", root, "--version", &v.to_string()]);
    cmd.arg("--db").arg(db).arg("--json").arg(json);
    for p in peers {
        cmd.args(["--peer", p]);
    }
    cmd
}

#[test]
fn sync_from_server_mirror_and_liar_writes_a_store() {
    let dir = TempDir::new("bavl-cli", "sync-all");
    let (src, export, dst, json) =
        (dir.join("src"), dir.join("export"), dir.join("dst"), dir.join("s.json"));
    let (v, root) = make_store(&src);
    let out = common::bavl(&[
        "export",
        "--db",
        src.to_str().unwrap(),
        "--version",
        &v.to_string(),
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    // `bavl serve` holds the store's lock: export first.
    let (_server, url) = serve(&src);
    let mut peers = vec![proxy(url.clone(), Duration::ZERO, true), url];
    let mut py = Command::new("python3");
    py.args(["-u", "-m", "http.server", "--bind", "127.0.0.1", "0", "--directory"]).arg(&export);
    let (_py, line) = start(py, "Serving HTTP");
    let port = line.split("port ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    peers.push(format!("http://127.0.0.1:{port}"));

    let out = bavl_sync(&dst, &root, v, &peers, &json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = common::stdout(&out);
    assert!(stdout.contains("3001 keys") && stdout.contains("0 resumed"), "{stdout}");
    check_store(&dst, v, &root);
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(s["keys"], 3001, "{s}");
    assert!(s["peak_rss_bytes"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["sources"][0]["health"], "banned", "{s}");
    // The honest sources: live, or (one that delivered nothing before the other
    // finished) dropped as unproductive; never banned.
    for src in &s["sources"].as_array().unwrap()[1..] {
        let reason = src["reason"].as_str().unwrap_or("");
        let outrun = src["health"] == "dropped" && reason.contains("unproductive");
        assert!(src["health"] == "live" || (outrun && src["chunks"] == 0), "{s}");
    }
    let live = s["sources"].as_array().unwrap().iter().filter(|x| x["health"] == "live").count();
    assert!(live >= 1, "{s}");
    assert_eq!(s["resumed"], 0);
    // --db now holds a store: a second sync refuses it (exit 2), and says so in its summary.
    let out = bavl_sync(&dst, &root, v, &peers[1..], &json).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!((&s["ok"], &s["reason"]), (&false.into(), &"error".into()), "{s}");
    assert!(s["error"].as_str().unwrap().contains("already holds"), "{s}");
    // So does a directory holding something else.
    let other = dir.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let out = bavl_sync(&other, &root, v, &peers[1..], &json).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("not empty"), "{}", common::stderr(&out));
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1, "nothing written there");
}

/// The store in `db` opens paged (no body cached) at `v` and `root`, with every key.
fn check_store(db: &std::path::Path, v: u64, root: &str) {
    let opts = Options { read_only: true, ..Options::paged(0) };
    let mut store = Store::open(db, opts).unwrap();
    assert_eq!((store.version(), hex::encode(store.root())), (v, root.to_string()));
    for i in 0u32..3000 {
        let want = format!("value {i}");
        assert_eq!(store.get(&i.to_be_bytes()).unwrap(), Some(want.as_bytes()), "key {i}");
    }
    assert_eq!(store.get(b"second").unwrap(), Some(&b"version"[..]));
}

#[test]
fn killed_sync_resumes_without_refetching() {
    let dir = TempDir::new("bavl-cli", "sync-resume");
    let (src, dst, json, trace) =
        (dir.join("src"), dir.join("dst"), dir.join("s.json"), dir.join("trace.csv"));
    let (v, root) = make_store(&src);
    let (_server, url) = serve(&src);
    let slow = proxy(url.clone(), Duration::from_millis(15), false);
    let mut cmd = bavl_sync(&dst, &root, v, &[slow], &json);
    cmd.arg("--trace").arg(&trace).stderr(Stdio::null());
    let mut child = Kill(cmd.spawn().unwrap());
    // The trace's last column: chunks made durable in --db (flushed every second).
    let t = Instant::now();
    let durable = loop {
        assert!(t.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        let last = text.lines().last().and_then(|l| l.rsplit(',').next()?.parse::<u64>().ok());
        if let Some(n) = last.filter(|&n| n >= 40) {
            break n;
        }
    };
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // Killed mid-transfer: not a store.
    match Store::open(&dst, Options::default()) {
        Err(bavl_store::StoreError::UnfinishedIngest(_)) => {}
        Err(e) => panic!("refused, but as: {e}"),
        Ok(_) => panic!("a directory holding an unfinished sync opened as a store"),
    }
    let out = common::bavl(&["check", "--db", dst.to_str().unwrap()]);
    assert!(!out.status.success(), "bavl check of an unfinished sync");
    // Another root is refused, and changes nothing.
    let other = "00".repeat(32);
    let out = bavl_sync(&dst, &other, v, std::slice::from_ref(&url), &json).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("unfinished"), "{}", common::stderr(&out));
    let out = bavl_sync(&dst, &root, v, &[url], &json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let (resumed, fetched, chunks) = (
        s["resumed"].as_u64().unwrap(),
        s["fetched"].as_u64().unwrap(),
        s["chunks"].as_u64().unwrap(),
    );
    assert!(resumed >= durable, "{durable} were durable: {s}");
    assert!(resumed < chunks, "the kill came mid-transfer: {s}");
    assert_eq!(resumed + fetched, chunks, "nothing fetched twice: {s}");
    check_store(&dst, v, &root);
}

/// The empty tree has no chunk: its capacity (16 here, not the default) comes from the
/// root and the manifest, and the store installed has it.
#[test]
fn an_empty_state_syncs_at_its_capacity() {
    let dir = TempDir::new("bavl-cli", "sync-empty");
    let (src, dst, json) = (dir.join("src"), dir.join("dst"), dir.join("s.json"));
    let mut store =
        Store::open(&src, Options { capacity: Some(16), ..Options::default() }).unwrap();
    let (v, root) = store.commit().unwrap();
    store.close().unwrap();
    let (_server, url) = serve(&src);
    let out = bavl_sync(&dst, &hex::encode(root), v, &[url], &json).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let store = Store::open(&dst, Options { read_only: true, ..Options::paged(0) }).unwrap();
    assert_eq!((store.version(), store.root(), store.capacity()), (v, root, 16));
    assert_eq!(store.latest().len(), 0);
}

/// The library way to serve a store that keeps committing (`bavl serve` cannot: it holds
/// the store's lock; docs/sync-protocol.md §8): the owner publishes each committed
/// version's O(1) snapshot in a `Catalog` served on another thread and withdraws the ones
/// it prunes. A sync of a published version completes with its root while commits go on,
/// and the catalog ends with exactly the store's retained versions.
#[test]
fn a_store_served_while_it_commits() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    use bavl_sync::http::{self, BaseUrl, Catalog, Server, SyncConfig};
    let dir = TempDir::new("bavl-cli", "sync-live");
    let opts = Options { capacity: Some(16), keep_recent: 4, ..Options::default() };
    let mut store = Store::open(dir.join("db"), opts).unwrap();
    for i in 0u32..20_000 {
        store.insert(&i.to_be_bytes(), b"first").unwrap();
    }
    let (v, root) = store.commit().unwrap();
    let catalog = Catalog::new();
    catalog.publish(v, store.snapshot(v).unwrap());
    let server = Server::bind("127.0.0.1:0", catalog.clone()).unwrap().spawn().unwrap();
    let (stop, commits) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU32::new(0)));
    let writer = {
        let (catalog, stop, commits) = (catalog.clone(), stop.clone(), commits.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = commits.load(Ordering::Relaxed);
                store.insert(&n.to_be_bytes(), b"later").unwrap();
                let (v, _) = store.commit().unwrap();
                catalog.publish(v, store.snapshot(v).unwrap());
                // The synced version stays published until its sync ends (a snapshot
                // outlives the store's pruning); every other pruned version is withdrawn.
                let oldest = store.versions().next().unwrap();
                for old in catalog.versions().into_iter().filter(|&o| o < oldest && o != 1) {
                    catalog.withdraw(old);
                }
                commits.fetch_add(1, Ordering::Relaxed);
            }
            store.versions().collect::<Vec<_>>()
        })
    };
    let cfg = SyncConfig {
        sources: vec![BaseUrl::parse(&server.url()).unwrap()],
        options: bavl_sync::Options::default(),
        verify_threads: 2,
        connect_timeout: Duration::from_secs(2),
    };
    let before = commits.load(Ordering::Relaxed);
    // The sync can be faster than one commit: its first progress call waits (5 s at
    // most) for a commit, so the two certainly overlap.
    let waited = std::time::Instant::now();
    let (mut tree, _) = http::download_tree(root, v, &cfg, &mut |_| {
        while commits.load(Ordering::Relaxed) == before && waited.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    let during = commits.load(Ordering::Relaxed) - before;
    // Enough commits that version 1 has left the store's window (keep_recent 4), however
    // slowly the writer ran beside the sync.
    while commits.load(Ordering::Relaxed) < 6 && waited.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let retained = writer.join().unwrap();
    assert_eq!((v, tree.root_hash(), tree.len()), (1, root, 20_000));
    assert!(during > 0, "no commit while the sync ran");
    catalog.withdraw(v);
    assert_eq!(catalog.versions(), retained, "the catalog follows the store's retention");
    assert!(retained.len() <= 5 && !retained.contains(&v), "{retained:?}");
}
