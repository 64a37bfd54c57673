//! What a cluster node decodes from untrusted bytes (layout in `src/cluster.rs`): request
//! and reply bodies from the network, and its Raft log file from the disk.
//! - A body decodes to an error or to a message that encodes back to bytes that decode to
//!   the same encoding again (never a panic, never an unbounded allocation: postcard reads
//!   lengths against the input).
//! - A multiplexed connection's stream is cut into frames or refused, never a panic: each
//!   frame taken is its 12-byte head and a body of the length the head gives, within the
//!   bytes left; each body is then a request body as above.
//! - A log file opens or is refused, never a panic. Refused means not a log of ours: the
//!   file is left exactly as it was. Opened means the file is now a prefix of what it was
//!   (a torn or damaged tail is cut, nothing is invented; an empty file or a cut header
//!   becomes the header alone), and opening it again changes nothing more.
#![no_main]

use std::path::PathBuf;

use bavl_cluster::codec;
use bavl_cluster::log_store::{Durability, LogStore, MAGIC};
use bavl_cluster::msg::Reply;
use bavl_cluster::tcp::Request;
use bavl_fuzz::cluster::{log_file_of_records, LOG_FILE, LOG_RECORDS, MUX_STREAM, REPLY, REQUEST};
use libfuzzer_sys::fuzz_target;

fn stable<T: serde::Serialize + serde::de::DeserializeOwned>(body: &[u8]) {
    if let Ok(msg) = codec::decode::<T>(body) {
        let again = codec::encode(&msg).expect("a decoded message encodes");
        let back: T = codec::decode(&again).expect("an encoding decodes");
        assert_eq!(codec::encode(&back).expect("encodes"), again, "re-encoding is stable");
    }
}

fn mux_stream(mut rest: &[u8]) {
    while let Ok(Some((_, body, taken))) = bavl_cluster::mux::take_tagged(rest) {
        assert!(taken <= rest.len() && taken == 12 + body.len(), "a frame within the stream");
        stable::<Request>(body);
        rest = &rest[taken..];
    }
}

fn log_path() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bavl-fuzz-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("raft.log")
}

fn open_log(file: &[u8]) {
    let path = log_path();
    std::fs::write(&path, file).expect("write the input file");
    let opened = LogStore::open(&path, Durability::NoSync);
    let after = std::fs::read(&path).expect("read back");
    match opened {
        Err(_) => assert_eq!(after, file, "a refused file was changed"),
        Ok(store) => {
            drop(store);
            // An empty file or a cut header is an empty log: written as the header alone.
            if MAGIC.starts_with(file) {
                assert_eq!(after, MAGIC, "an empty log is its header");
            } else {
                assert!(file.starts_with(&after), "opening did more than cut a tail");
            }
            LogStore::open(&path, Durability::NoSync).expect("what opened once opens again");
            assert_eq!(std::fs::read(&path).expect("read back"), after, "a second open cut more");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    match selector {
        REQUEST => stable::<Request>(rest),
        REPLY => stable::<Reply>(rest),
        LOG_FILE => open_log(rest),
        LOG_RECORDS => open_log(&log_file_of_records(rest)),
        MUX_STREAM => mux_stream(rest),
        _ => {}
    }
});
