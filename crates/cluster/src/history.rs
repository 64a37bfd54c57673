//! Operation histories in the JSON-lines format the linearizability checker (lab/lincheck)
//! reads: one line per operation,
//! `{"client":u64,"op":"get"|"put"|"delete","key":hex,"value":hex|null,"call":ns,"return":ns|null}`.
//! For a get `value` is what was read (null: absent); for a put the value written; for a
//! delete null. `return: null` means the outcome is unknown (it may or may not have
//! happened). Times are nanoseconds since the history's start.

use std::io::Write;

use serde::{Deserialize, Serialize};

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub client: u64,
    pub op: Kind,
    #[serde(with = "hex::serde")]
    pub key: Vec<u8>,
    pub value: Option<HexBytes>,
    pub call: u64,
    #[serde(rename = "return")]
    pub ret: Option<u64>,
}

/// The operation kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Get,
    Put,
    Delete,
}

/// Bytes written as hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HexBytes(#[serde(with = "hex::serde")] pub Vec<u8>);

/// Writes `ops` as JSON lines.
pub fn write_jsonl(ops: &[Op], out: &mut impl Write) -> std::io::Result<()> {
    for op in ops {
        serde_json::to_writer(&mut *out, op)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A necessary condition for linearizability that needs no search (the full check is the
/// Go checker's): every value a completed get returns was written by a put to that key
/// called before the get returned. Values are unique per put in the simulation, so a read
/// of a value never written, or written only later, is a violation. Returns the offenders.
pub fn reads_from_writes(ops: &[Op]) -> Vec<Op> {
    let mut bad = Vec::new();
    for r in ops.iter().filter(|o| o.op == Kind::Get && o.ret.is_some()) {
        let Some(v) = &r.value else { continue };
        let ok = ops.iter().any(|w| {
            w.op == Kind::Put
                && w.key == r.key
                && w.value.as_ref() == Some(v)
                && w.call < r.ret.unwrap_or(0)
        });
        if !ok {
            bad.push(r.clone());
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_checker_format() {
        let op = Op {
            client: 3,
            op: Kind::Put,
            key: vec![0xab],
            value: Some(HexBytes(vec![1])),
            call: 5,
            ret: None,
        };
        let mut out = Vec::new();
        write_jsonl(&[op], &mut out).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert_eq!(line, "{\"client\":3,\"op\":\"put\",\"key\":\"ab\",\"value\":\"01\",\"call\":5,\"return\":null}\n");
    }

    #[test]
    fn a_read_of_an_unwritten_value_is_caught() {
        let put = Op {
            client: 1,
            op: Kind::Put,
            key: vec![1],
            value: Some(HexBytes(vec![7])),
            call: 10,
            ret: Some(20),
        };
        let good = Op {
            client: 2,
            op: Kind::Get,
            key: vec![1],
            value: Some(HexBytes(vec![7])),
            call: 15,
            ret: Some(30),
        };
        let early = Op { call: 1, ret: Some(5), ..good.clone() };
        let other = Op { value: Some(HexBytes(vec![8])), ..good.clone() };
        assert!(reads_from_writes(&[put.clone(), good.clone()]).is_empty());
        assert_eq!(reads_from_writes(&[put.clone(), early.clone()]), vec![early]);
        assert_eq!(reads_from_writes(&[put, other.clone()]), vec![other]);
    }
}
