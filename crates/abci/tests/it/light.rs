//! The light-client check against a real CometBFT v0.38.26 header and commit (captured
//! from `scripts/localnet.sh` into `tests/data/`): it passes, and every alteration an
//! attacker could make to the header, the commit or the trust anchor is refused.

use bavl_abci::light::{header_hash, parse_time, verify, LightError, Trusted};
use serde_json::Value;

fn data(name: &str) -> Value {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn signed_header() -> Value {
    data("commit.json")["result"]["signed_header"].clone()
}

fn trusted() -> Trusted {
    Trusted::from_genesis(&data("genesis.json")).unwrap()
}

#[test]
fn a_real_header_verifies_against_its_genesis() {
    let sh = signed_header();
    let want = hex::decode(sh["commit"]["block_id"]["hash"].as_str().unwrap()).unwrap();
    assert_eq!(header_hash(&sh["header"]).unwrap().to_vec(), want);
    let v = verify(&trusted(), &sh).unwrap();
    assert_eq!(v.height.to_string(), sh["header"]["height"].as_str().unwrap());
    assert_eq!(hex::encode_upper(&v.app_hash), sh["header"]["app_hash"].as_str().unwrap());
    assert_eq!((v.signed_power, v.total_power), (4, 4));
}

#[test]
fn every_altered_header_field_changes_the_hash() {
    let fields = [
        "chain_id",
        "height",
        "time",
        "last_commit_hash",
        "data_hash",
        "validators_hash",
        "next_validators_hash",
        "consensus_hash",
        "app_hash",
        "last_results_hash",
        "evidence_hash",
        "proposer_address",
    ];
    let good = header_hash(&signed_header()["header"]).unwrap();
    for f in fields {
        let mut sh = signed_header();
        let old = sh["header"][f].as_str().unwrap().to_string();
        let new = match f {
            "chain_id" => format!("{old}x"),
            "height" => "7".to_string(),
            "time" => format!("{}1Z", &old[..old.len() - 2]), // the last nanosecond digit
            _ => format!("00{}", &old[2..]),
        };
        sh["header"][f] = Value::from(new);
        assert_ne!(header_hash(&sh["header"]).ok(), Some(good), "{f}");
        assert!(verify(&trusted(), &sh).is_err(), "{f}");
    }
}

#[test]
fn forged_commits_and_wrong_anchors_are_refused() {
    let mut sh = signed_header();
    let sig = sh["commit"]["signatures"][1]["signature"].as_str().unwrap().to_string();
    let flipped =
        if sig.starts_with('A') { sig.replacen('A', "B", 1) } else { format!("A{}", &sig[1..]) };
    sh["commit"]["signatures"][1]["signature"] = Value::from(flipped);
    assert!(matches!(verify(&trusted(), &sh), Err(LightError::BadSignature { index: 1, .. })));
    // Two of four precommits marked absent: half the power is not more than 2/3.
    let mut sh = signed_header();
    for i in [0, 2] {
        sh["commit"]["signatures"][i]["block_id_flag"] = Value::from(1);
    }
    assert!(matches!(
        verify(&trusted(), &sh),
        Err(LightError::NotEnoughPower { signed: 2, total: 4 })
    ));
    // Another genesis: another chain, or another validator set.
    let mut g = data("genesis.json");
    g["chain_id"] = Value::from("another-chain");
    let other = Trusted::from_genesis(&g).unwrap();
    assert!(matches!(verify(&other, &signed_header()), Err(LightError::ChainId { .. })));
    let mut g = data("genesis.json");
    g["validators"].as_array_mut().unwrap().pop();
    let fewer = Trusted::from_genesis(&g).unwrap();
    assert!(matches!(verify(&fewer, &signed_header()), Err(LightError::Validators { .. })));
    let mut g = data("genesis.json");
    g["validators"][0]["pub_key"]["value"] = Value::from("AAAA");
    assert!(Trusted::from_genesis(&g).is_err());
}

#[test]
fn times_parse_as_cometbft_writes_them() {
    let t = parse_time("1970-01-01T00:00:00Z").unwrap();
    assert_eq!((t.seconds, t.nanos), (0, 0));
    let t = parse_time("2026-11-25T01:38:10.006773885Z").unwrap();
    assert_eq!((t.seconds, t.nanos), (1_795_570_690, 6_773_885));
    let t = parse_time("2000-03-01T12:00:00.5Z").unwrap();
    assert_eq!((t.seconds, t.nanos), (951_912_000, 500_000_000));
    for bad in
        ["", "2026-11-25 01:38:10Z", "2026-13-01T00:00:00Z", "2026-11-25T01:38:10", "x-1-1T0:0:0Z"]
    {
        assert!(parse_time(bad).is_err(), "{bad}");
    }
}
