//! The peer policy over real sockets: `bavl sync` from one `bavl-harness serve-liar
//! --byzantine KIND` process and one honest `bavl serve` process on loopback completes with
//! the trusted root, and its JSON summary names the liar banned (dropped, for `http-error`:
//! a 5xx is transient by the policy). One test per kind, and every kind at once beside one
//! honest source.
//!
//! The liars of the one-liar tests serve a store (`--db`), the honest source an export
//! directory (`--dir`); in the all-at-once test it is the other way round, so both
//! backends lie and tell the truth. The state is small (2,000 keys, capacity 16, about 150
//! chunks) and the grace period 1 s, so the whole file runs in seconds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{self, Kill, TempDir};
use bavl_store::{Options, Store};
use bavl_sync::http::Byzantine;
use serde_json::Value;

/// A store of two versions (2,000 keys; then 100 of them changed) and both exported.
struct Setup {
    dir: TempDir,
    store: PathBuf,
    export: PathBuf,
    version: u64,
    root: String,
}

fn setup(tag: &str) -> Setup {
    let dir = TempDir::new("bavl-harness", &format!("byz-{tag}"));
    let (store, export) = (dir.join("store"), dir.join("export"));
    let mut s = Store::open(&store, Options { capacity: Some(16), ..Options::default() }).unwrap();
    for i in 0u32..2000 {
        s.insert(&i.to_be_bytes(), format!("value {i}").as_bytes()).unwrap();
    }
    s.commit().unwrap();
    for i in (0u32..2000).step_by(20) {
        s.insert(&i.to_be_bytes(), b"changed in version 2").unwrap();
    }
    let (version, root) = s.commit().unwrap();
    for v in [version - 1, version] {
        let snap = s.snapshot(v).unwrap();
        bavl_sync::http::export(&snap, v, &export, &mut |_| {}).unwrap();
    }
    s.close().unwrap();
    Setup { dir, store, export, version, root: hex::encode(root) }
}

impl Setup {
    /// A copy of the store for one more serving process (a store is locked by its server).
    fn store_copy(&self, name: &str) -> PathBuf {
        let to = self.dir.join(name);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&self.store).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
        to
    }

    /// Runs `bavl sync` of the newest version from `peers` (short limits); its exit
    /// status and JSON summary.
    fn sync(&self, peers: &[String], extra: &[&str]) -> (std::process::Output, Value) {
        let (db, json) = (self.dir.join("synced"), self.dir.join("summary.json"));
        let mut cmd = Command::new(common::bavl_bin());
        cmd.args(["sync", "--quiet", "--grace", "1", "--timeout", "5", "--backoff", "0.05"])
            .args(["--root", &self.root, "--version", &self.version.to_string()])
            .arg("--db")
            .arg(&db)
            .arg("--json")
            .arg(&json)
            .args(extra);
        for p in peers {
            cmd.args(["--peer", p]);
        }
        let out = cmd.output().unwrap();
        let text = std::fs::read(&json).unwrap_or_default();
        let summary = serde_json::from_slice(&text).unwrap_or(Value::Null);
        (out, summary)
    }

    /// The synced store opens at the version with the trusted root.
    fn check_synced(&self) {
        let mut store = Store::open(self.dir.join("synced"), Options::default()).unwrap();
        assert_eq!((store.version(), hex::encode(store.root())), (self.version, self.root.clone()));
        assert_eq!(store.get(&0u32.to_be_bytes()).unwrap(), Some(&b"changed in version 2"[..]));
    }
}

fn serve(what: &str, path: &Path, kind: Option<Byzantine>) -> (Kill, String) {
    let args: Vec<OsString> = vec![what.into(), path.into()];
    common::serve(&args, kind.map(Byzantine::name))
}

/// What the summary must say of a liar.
enum Expect {
    /// Banned, the reason containing one of these.
    Banned(&'static [&'static str]),
    /// Banned, the reason containing one of these; or, if the sync did not wait long
    /// enough for the lie to show (a liar that has not proved itself never holds work an
    /// idle honest source could do: `docs/sync-protocol.md` §5), dropped as unproductive,
    /// or (a sync too short to tell it from a slightly slow source) still live. Nothing
    /// is accepted from it either way.
    Slow(&'static [&'static str]),
    /// Dropped (not banned), the reason containing this.
    Dropped(&'static str),
}

fn expected(kind: Byzantine) -> Expect {
    use Byzantine::*;
    const LIMIT: &str = "over its limit";
    const REJECTED: &str = "rejected: ";
    Expect::Banned(match kind {
        WrongBytes | Truncate => &[REJECTED],
        // Another chunk's bytes: invalid, or longer than the size this one has.
        WrongIndex | OtherVersion => &[REJECTED, LIMIT],
        // Chunk 0 is asked for before a manifest gives its size, with the largest limit:
        // the extra bytes then fail its verification.
        Overlong => &[LIMIT, REJECTED],
        Endless => return Expect::Slow(&[LIMIT]),
        Stall | Trickle => return Expect::Slow(&["stalled"]),
        HttpError => return Expect::Dropped("HTTP status 500"),
        Garbage => &["malformed"],
        RedirectLoop => return Expect::Slow(&["too many redirects"]),
        LyingManifest => &["manifest rejected: contradicted"],
        WrongVersion => &["manifest rejected: asked for version"],
        // Attacks on progress rather than lies of §9: crates/sync/tests/hostile.rs.
        DripHead | DripBody | EndlessTrailers | NoChunkZero | HugeManifest | Slow | EarlyHints
        | GzipManifest | ResetTruncate => unreachable!("{kind} is not a kind of §9"),
    })
}

fn check_liar(kind: Byzantine, s: &Value) {
    let reason = s["reason"].as_str().unwrap_or_default();
    match expected(kind) {
        Expect::Banned(any) => {
            assert_eq!(s["health"], "banned", "{kind}: {s}");
            assert!(any.iter().any(|w| reason.contains(w)), "{kind}: reason {reason:?}");
        }
        Expect::Dropped(why) => {
            assert_eq!(s["health"], "dropped", "{kind}: {s}");
            assert!(reason.contains(why), "{kind}: reason {reason:?}");
        }
        Expect::Slow(any) => {
            let banned = s["health"] == "banned" && any.iter().any(|w| reason.contains(w));
            let outrun = s["health"] == "dropped" && reason.contains("unproductive");
            assert!(banned || outrun || s["health"] == "live", "{kind}: {s}");
        }
    }
    // Its chunks are all lies, except those of the two that lie only in their manifests:
    // their chunks are true (chunk 0 may be taken from them before their manifest is).
    if !matches!(kind, Byzantine::LyingManifest | Byzantine::WrongVersion) {
        assert_eq!(s["chunks"], 0, "{kind}: a lie was accepted: {s}");
    }
}

/// One liar of `kind` (serving a store) beside one honest source (an export directory).
fn one_liar(kind: Byzantine) {
    let setup = setup(kind.name());
    let (_liar, liar) = serve("--db", &setup.store_copy("liar"), Some(kind));
    let (_honest, honest) = serve("--dir", &setup.export, None);
    // A 5xx source is dropped at its first failure. (Speculation off or on, an idle
    // honest source that delivers takes over what a staller holds: see `Expect::Slow`.)
    let (out, s) = setup.sync(&[liar, honest], &["--no-speculate", "--max-retries", "0"]);
    assert!(out.status.success(), "{kind}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(s["ok"], true, "{s}");
    assert_eq!(s["root"], setup.root.as_str());
    check_liar(kind, &s["sources"][0]);
    let honest = &s["sources"][1];
    assert_eq!(honest["health"], "live", "{kind}: {s}");
    assert!(honest["chunks"].as_u64().unwrap() > 0);
    let total: u64 =
        s["sources"].as_array().unwrap().iter().map(|x| x["chunks"].as_u64().unwrap()).sum();
    assert_eq!(total, s["chunks"].as_u64().unwrap(), "every chunk came from a source: {s}");
    setup.check_synced();
}

macro_rules! one_liar_tests {
    ($($name:ident: $kind:ident,)*) => {$(
        #[test]
        fn $name() {
            one_liar(Byzantine::$kind);
        }
    )*};
}

one_liar_tests! {
    wrong_bytes_liar_is_banned: WrongBytes,
    wrong_index_liar_is_banned: WrongIndex,
    other_version_liar_is_banned: OtherVersion,
    truncating_liar_is_banned: Truncate,
    overlong_liar_is_banned: Overlong,
    endless_liar_is_banned: Endless,
    stalling_liar_is_banned: Stall,
    trickling_liar_is_banned: Trickle,
    http_error_source_is_dropped: HttpError,
    garbage_liar_is_banned: Garbage,
    redirect_loop_liar_is_banned: RedirectLoop,
    lying_manifest_liar_is_banned: LyingManifest,
    wrong_version_liar_is_banned: WrongVersion,
}

#[test]
fn every_kind_of_liar_at_once_beside_one_honest_source() {
    let setup = setup("all");
    let mut procs = Vec::new();
    let mut urls = Vec::new();
    for kind in Byzantine::CLASSIC {
        let (p, url) = serve("--dir", &setup.export, Some(kind));
        procs.push(p);
        urls.push(url);
    }
    let (_honest, honest) = serve("--db", &setup.store_copy("honest"), None);
    urls.push(honest);
    let (out, s) = setup.sync(&urls, &["--no-speculate"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(s["ok"], true, "{s}");
    let sources = s["sources"].as_array().unwrap();
    for (kind, src) in Byzantine::CLASSIC.into_iter().zip(sources) {
        if kind == Byzantine::HttpError {
            // Retried with backoff: dropped if the sync lasted long enough, never banned.
            assert_ne!(src["health"], "banned", "{src}");
            assert_eq!(src["chunks"], 0, "{src}");
            assert!(src["transient_failures"].as_u64().unwrap() >= 1, "{src}");
        } else {
            check_liar(kind, src);
        }
    }
    assert_eq!(sources[13]["health"], "live", "the honest source: {s}");
    // Every liar but the 5xx one is banned, or (a staller, trickler or redirect loop the
    // sync did not wait for) dropped as unproductive or left live with nothing accepted.
    let slow = |x: &Value| {
        x["health"] == "live" || x["reason"].as_str().unwrap_or("").contains("unproductive")
    };
    let liars = Byzantine::CLASSIC.into_iter().zip(sources);
    let unjudged = liars.filter(|(k, x)| *k != Byzantine::HttpError && slow(x)).count() as u64;
    assert!(unjudged <= 3, "{s}");
    assert_eq!(s["banned"].as_u64().unwrap() + unjudged, 12, "{s}");
    setup.check_synced();
}

#[test]
fn a_sync_from_liars_alone_fails_and_still_writes_its_summary() {
    let setup = setup("fail");
    let (_a, a) = serve("--dir", &setup.export, Some(Byzantine::WrongBytes));
    let (_b, b) = serve("--dir", &setup.export, Some(Byzantine::Garbage));
    // A port nobody listens on: connection refused, a transient failure.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (out, s) = setup.sync(&[a, b, refused], &["--max-retries", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(s["ok"], false, "{s}");
    assert_eq!(s["reason"], "no_sources");
    assert!(s["error"].as_str().unwrap().contains("no usable source"), "{s}");
    assert_eq!(s["root"], setup.root.as_str());
    assert_eq!((s["banned"].as_u64(), s["dropped"].as_u64()), (Some(2), Some(1)), "{s}");
    let src = s["sources"].as_array().unwrap();
    check_liar(Byzantine::WrongBytes, &src[0]);
    check_liar(Byzantine::Garbage, &src[1]);
    assert_eq!(src[2]["health"], "dropped");
    assert!(src[2]["reason"].as_str().unwrap().contains("transport error"), "{s}");
    assert_eq!(src[2]["transient_failures"], 2);
    // Nothing verified, nothing written; the directory holds the unfinished sync (what the
    // same command resumes), which is no store.
    assert_eq!((s["written"].as_u64(), s["resumed"].as_u64()), (Some(0), Some(0)), "{s}");
    match Store::open(setup.dir.join("synced"), Options::default()) {
        Err(bavl_store::StoreError::UnfinishedIngest(_)) => {}
        Err(e) => panic!("refused, but as: {e}"),
        Ok(_) => panic!("a failed sync left a store"),
    }
}
