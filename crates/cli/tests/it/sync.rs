//! `bavl serve`, `bavl export` and `bavl sync` as processes on loopback: a sync from the
//! server, a static export behind `python3 -m http.server` and a lying server bans the
//! liar and writes a store that opens at the version and root; a killed sync resumes
//! without fetching again what it had.

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
    let mut store = Store::open(&dst, Options::default()).unwrap();
    assert_eq!(store.version(), v);
    assert_eq!(hex::encode(store.root()), root);
    assert_eq!(store.get(b"second").unwrap(), Some(&b"version"[..]));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
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
    assert!(s["error"].as_str().unwrap().contains("is not empty"), "{s}");
}

#[test]
fn killed_sync_resumes_without_refetching() {
    let dir = TempDir::new("bavl-cli", "sync-resume");
    let (src, dst, json) = (dir.join("src"), dir.join("dst"), dir.join("s.json"));
    let (v, root) = make_store(&src);
    let (_server, url) = serve(&src);
    let slow = proxy(url.clone(), Duration::from_millis(15), false);
    let mut child =
        Kill(bavl_sync(&dst, &root, v, &[slow], &json).stderr(Stdio::null()).spawn().unwrap());
    let resume = dir.join("dst.sync-resume");
    let rootd = bavl_sync::protocol::parse_root(&root).unwrap();
    let t = Instant::now();
    let held = loop {
        assert!(t.elapsed() < Duration::from_secs(20), "no progress");
        std::thread::sleep(Duration::from_millis(50));
        let Ok(bytes) = std::fs::read(&resume) else { continue };
        let n = bavl_sync::resume::read(&bytes, &rootd, v).map_or(0, |r| r.chunks.len());
        if n >= 40 {
            break n;
        }
    };
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(!dst.exists(), "no store before the sync completes");
    let out = bavl_sync(&dst, &root, v, &[url], &json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let (resumed, fetched, chunks) = (
        s["resumed"].as_u64().unwrap(),
        s["fetched"].as_u64().unwrap(),
        s["chunks"].as_u64().unwrap(),
    );
    assert!(resumed >= held as u64, "{s}");
    assert_eq!(resumed + fetched, chunks, "nothing fetched twice: {s}");
    assert!(!resume.exists(), "the resume file is removed once the store is written");
    let store = Store::open(&dst, Options::default()).unwrap();
    assert_eq!((store.version(), hex::encode(store.root())), (v, root));
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
        resume: None,
        connect_timeout: Duration::from_secs(2),
    };
    let before = commits.load(Ordering::Relaxed);
    // The sync can be faster than one commit: its first progress call waits (5 s at
    // most) for a commit, so the two certainly overlap.
    let waited = std::time::Instant::now();
    let done = http::download(root, v, &cfg, &mut |_, _, _| {
        while commits.load(Ordering::Relaxed) == before && waited.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    let during = commits.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    let retained = writer.join().unwrap();
    let mut tree = done.tree;
    assert_eq!((v, tree.root_hash(), tree.len()), (1, root, 20_000));
    assert!(during > 0, "no commit while the sync ran");
    catalog.withdraw(v);
    assert_eq!(catalog.versions(), retained, "the catalog follows the store's retention");
    assert!(retained.len() <= 5 && !retained.contains(&v), "{retained:?}");
}
