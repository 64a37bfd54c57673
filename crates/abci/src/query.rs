//! `Query`: the value of a key at a retained height, with a bavl proof.
//!
//! Path `/key`, `data` = the key's raw bytes, `height` = 0 for the last committed height
//! or any height the node still holds (the store's retained versions and its snapshots).
//! The answer's `height` is the version read; its root is the app hash in the header of
//! block `height + 1`. With `prove = true`, `proof_ops` holds one [`ProofOp`]:
//!
//! | field  | membership                | absence                  |
//! |--------|---------------------------|--------------------------|
//! | `type` | [`OP_MEMBERSHIP`]         | [`OP_ABSENCE`]           |
//! | `key`  | the key                   | the key                  |
//! | `data` | a bavl membership proof   | a bavl absence proof     |
//!
//! checked with `bavl_core::verify_membership(root, key, value, data)` or
//! `verify_absence(root, key, data)` (`docs/design.md` gives the byte layout). Codes: 0
//! found or absent (`log` says which, `value` is empty when absent), 1 unknown path,
//! 2 height not held, 3 invalid key, 4 no proof (never expected).
//!
//! [`ProofOp`]: tendermint_proto::v0_38::crypto::ProofOp

use bavl_core::Snapshot;
use tendermint_proto::v0_38::abci as pb;
use tendermint_proto::v0_38::crypto::{ProofOp, ProofOps};

use crate::app::App;

/// `ProofOp.type` of a membership proof.
pub const OP_MEMBERSHIP: &str = "bavl:membership:v1";
/// `ProofOp.type` of an absence proof.
pub const OP_ABSENCE: &str = "bavl:absence:v1";

fn refuse(code: u32, log: String) -> pb::ResponseQuery {
    pb::ResponseQuery { code, log, ..Default::default() }
}

/// The version at `height` (0: the last committed), if held.
fn version_at(app: &App, height: i64) -> Result<(u64, Snapshot), String> {
    let node = app.node();
    let h = if height <= 0 { node.store.version() } else { height as u64 };
    if let Ok(s) = node.store.snapshot(h) {
        return Ok((h, s));
    }
    if let Some(held) = node.snapshots.iter().find(|s| s.height == h) {
        return Ok((h, held.snap.clone()));
    }
    let versions: Vec<u64> = node.store.versions().collect();
    let snaps: Vec<u64> = node.snapshots.iter().map(|s| s.height).collect();
    Err(format!("height {h} is not held (versions {versions:?}, snapshots {snaps:?})"))
}

pub(crate) fn query(app: &App, req: pb::RequestQuery) -> pb::ResponseQuery {
    if req.path != "/key" {
        return refuse(1, format!("unknown path {:?}: the only path is \"/key\"", req.path));
    }
    let key = &req.data[..];
    if key.is_empty() || key.len() > bavl_core::MAX_KEY_LEN {
        let log = format!("a key is 1..={} bytes, not {}", bavl_core::MAX_KEY_LEN, key.len());
        return refuse(3, log);
    }
    let (height, snap) = match version_at(app, req.height) {
        Ok(v) => v,
        Err(log) => return refuse(2, log),
    };
    // A chunk this version cannot read is refused, never answered "absent".
    let value = match snap.get(key) {
        Ok(v) => v.map(<[u8]>::to_vec),
        Err(page) => return refuse(5, page.to_string()),
    };
    let mut proof_ops = None;
    if req.prove {
        let (r#type, data) = match &value {
            Some(_) => (OP_MEMBERSHIP, snap.prove_membership(key)),
            None => (OP_ABSENCE, snap.prove_absence(key)),
        };
        // Both exist for a key read from the same snapshot.
        let data = match data {
            Ok(data) => data,
            Err(e) => return refuse(4, format!("no proof for this key: {e}")),
        };
        proof_ops = Some(ProofOps {
            ops: vec![ProofOp { r#type: r#type.into(), key: key.to_vec(), data }],
        });
    }
    pb::ResponseQuery {
        log: if value.is_some() { "exists" } else { "absent" }.into(),
        key: key.to_vec().into(),
        value: value.unwrap_or_default().into(),
        proof_ops,
        height: height as i64,
        ..Default::default()
    }
}
