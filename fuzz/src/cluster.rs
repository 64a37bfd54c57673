//! Inputs of the `cluster_wire` target: what a cluster node decodes from other machines
//! (TCP request and reply bodies) and from its disk (the Raft log file).
//!
//! Layout: `selector: u8 | rest`.
//! - `0`: `rest` is a request body (`tcp::Request`), `1`: a reply body (`msg::Reply`).
//! - `2`: `rest` is a Raft log file, as is.
//! - `3`: `rest` is a sequence of `len: u16 LE | payload` records; the target frames each
//!   payload the way the log does (`len: u32 LE | crc32: u32 LE | payload`) behind the
//!   file's header, so the fuzzer reaches the record decoder instead of stopping at the
//!   checksum.
//! - `4`: `rest` is the byte stream of a multiplexed connection after its hello
//!   (`mux::take_tagged` frames, each body a request).

use bavl_cluster::log_store::MAGIC;

pub const REQUEST: u8 = 0;
pub const REPLY: u8 = 1;
pub const LOG_FILE: u8 = 2;
pub const LOG_RECORDS: u8 = 3;
pub const MUX_STREAM: u8 = 4;

/// The log file a [`LOG_RECORDS`] input stands for (a cut last record is kept, cut).
pub fn log_file_of_records(mut rest: &[u8]) -> Vec<u8> {
    let mut file = MAGIC.to_vec();
    while rest.len() >= 2 {
        let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        let payload = &rest[2..(2 + len).min(rest.len())];
        file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        file.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        file.extend_from_slice(payload);
        rest = &rest[2 + payload.len()..];
    }
    file
}

/// The payloads of the records of a log file (after its header), for seeds.
pub fn records_of_log_file(file: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut rest = file.get(MAGIC.len()..).unwrap_or_default();
    while rest.len() >= 8 {
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let Some(payload) = rest.get(8..8 + len) else { break };
        out.push(payload.to_vec());
        rest = &rest[8 + len..];
    }
    out
}

/// A [`LOG_RECORDS`] input holding `payloads`.
pub fn encode_records_input(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut input = vec![LOG_RECORDS];
    for p in payloads {
        input.extend_from_slice(&(p.len() as u16).to_le_bytes());
        input.extend_from_slice(p);
    }
    input
}

/// Valid seeds of every kind: requests and replies of each family, and log files (whole,
/// cut, and as records) holding a purge, a vote and entries of each payload kind.
pub fn seeds() -> Vec<Vec<u8>> {
    use bavl_cluster::msg::{
        ClientOp, ClientReply, ClientRequest, Message, RaftReply, RaftRpc, Reply,
    };
    use bavl_cluster::types::{typ, BatchOp, Command, Epoch};
    use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};

    let enc = |sel: u8, bytes: Vec<u8>| [vec![sel], bytes].concat();
    let epoch = Epoch { conf_ver: 2, version: 7 };
    let log_id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    let put = Command::Put { epoch, key: b"key".to_vec(), value: vec![9; 40] };
    let entries: Vec<typ::Entry> = vec![
        typ::Entry { log_id: log_id(1, 1), payload: EntryPayload::Blank },
        typ::Entry { log_id: log_id(1, 2), payload: EntryPayload::Normal(put.clone()) },
        typ::Entry {
            log_id: log_id(1, 3),
            payload: EntryPayload::Normal(Command::Proposals(vec![
                put,
                Command::Delete { epoch, key: b"gone".to_vec() },
            ])),
        },
        typ::Entry {
            log_id: log_id(2, 4),
            payload: EntryPayload::Membership(Membership::new(
                vec![[1, 2, 3].into()],
                [(1, Default::default()), (2, Default::default()), (3, Default::default())]
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, openraft::BasicNode>>(),
            )),
        },
    ];
    let vote = typ::Vote::new_committed(2, 1);
    let client = |op| Message::Client(ClientRequest { group: 7, epoch, op });
    let requests = vec![
        client(ClientOp::Put(b"k".to_vec(), b"v".to_vec())),
        client(ClientOp::Get(b"k".to_vec())),
        client(ClientOp::Batch(vec![
            BatchOp::Put(vec![1; 20], vec![2; 100]),
            BatchOp::Delete(b"x".to_vec()),
        ])),
        client(ClientOp::Scan { start: b"a".to_vec(), end: vec![], limit: 10 }),
        client(ClientOp::Lookup(b"k".to_vec())),
        Message::Raft {
            group: 7,
            from: 1,
            rpc: Box::new(RaftRpc::Append(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(1, 0)),
                entries: entries.clone(),
                leader_commit: Some(log_id(1, 1)),
            })),
        },
        Message::Raft {
            group: 7,
            from: 1,
            rpc: Box::new(RaftRpc::Vote(VoteRequest { vote, last_log_id: Some(log_id(2, 4)) })),
        },
    ];
    let mut out = vec![];
    let mut stream = vec![];
    for (id, msg) in requests.into_iter().enumerate() {
        let req = bavl_cluster::tcp::Request { from: 1, msg };
        let body = bavl_cluster::codec::encode(&req).expect("encodes");
        stream.extend_from_slice(&(body.len() as u32 + 8).to_le_bytes());
        stream.extend_from_slice(&(id as u64).to_le_bytes());
        stream.extend_from_slice(&body);
        out.push(enc(REQUEST, body));
    }
    out.push(enc(MUX_STREAM, stream));
    let replies = vec![
        Reply::Client(ClientReply::Value(Some(b"v".to_vec()))),
        Reply::Client(ClientReply::NotLeader(Some(2))),
        Reply::Raft(RaftReply::Append(AppendEntriesResponse::Success)),
        Reply::Raft(RaftReply::Refused("no such group".into())),
    ];
    for r in replies {
        out.push(enc(REPLY, bavl_cluster::codec::encode(&r).expect("encodes")));
    }
    // Log files: as the node writes them (a purge), and as records with a vote, a
    // committed id and entries (`Record` is private: its variant order is Entries,
    // Truncate, Purge, Vote, Committed, as docs/cluster.md section 2 gives).
    let dir = std::env::temp_dir().join(format!("bavl-fuzz-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("raft.log");
    bavl_cluster::log_store::seed(&path, log_id(1, 0)).expect("seed a log");
    let file = std::fs::read(&path).expect("read it");
    std::fs::remove_dir_all(&dir).ok();
    for cut in [file.len(), file.len() - 1, MAGIC.len(), 3] {
        out.push(enc(LOG_FILE, file[..cut].to_vec()));
    }
    let mut records = records_of_log_file(&file);
    records.push(record(3, &vote));
    records.push(record(4, &Some(log_id(1, 2))));
    records.push(record(0, &entries));
    records.push(record(1, &3u64));
    out.push(encode_records_input(&records));
    out.push(encode_records_input(&records[..2]));
    out
}

/// A record's payload: its variant's tag, then the variant's value.
fn record<T: serde::Serialize>(tag: u8, value: &T) -> Vec<u8> {
    [vec![tag], bavl_cluster::codec::encode(value).expect("encodes")].concat()
}
