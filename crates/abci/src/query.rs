//! `Query`: the value of a key at a retained height, with a bavl proof.
//!
//! Path `/key`, `data` = the key's raw bytes, `height` = 0 for the last committed height
//! or any height the store still retains (by default the last 4). On a paged store the
//! chunks a read or proof needs are read back (verified) outside the application's lock.
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

use bavl_core::{PageRef, Snapshot};
use bavl_store::PageLoader;
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

/// The version at `height` (0: the last committed), if retained, and the reader of its
/// absent chunks (a paged store).
fn version_at(app: &App, height: i64) -> Result<(u64, Snapshot, Option<PageLoader>), String> {
    let node = app.node();
    let h = if height <= 0 { node.store.version() } else { height as u64 };
    match node.store.snapshot(h) {
        Ok(s) => Ok((h, s, node.store.page_loader())),
        Err(_) => {
            let versions: Vec<u64> = node.store.versions().collect();
            Err(format!("height {h} is not held (retained versions {versions:?})"))
        }
    }
}

/// `snap` with the chunks `needs` names loaded, asked again after each load until it
/// names none (`Store::resident_for`, without the store's lock).
fn resident_for(
    snap: Snapshot,
    loader: Option<&PageLoader>,
    mut needs: impl FnMut(&Snapshot) -> Option<PageRef>,
) -> Result<Snapshot, String> {
    let mut snap = snap;
    while let Some(page) = needs(&snap) {
        let Some(loader) = loader else { return Err(page.to_string()) };
        snap = loader.load(&snap, &[page]).map_err(|e| e.to_string())?;
    }
    Ok(snap)
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
    let (height, snap, loader) = match version_at(app, req.height) {
        Ok(v) => v,
        Err(log) => return refuse(2, log),
    };
    // The chunks the read and its proof need, read back; one that cannot be read is
    // refused, never answered "absent".
    let snap = match resident_for(snap, loader.as_ref(), |s| match s.get(key) {
        Err(page) => Some(page),
        Ok(Some(_)) => s.prove_membership(key).err()?.page().cloned(),
        Ok(None) => s.prove_absence(key).err()?.page().cloned(),
    }) {
        Ok(s) => s,
        Err(log) => return refuse(5, log),
    };
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
