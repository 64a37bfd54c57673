//! `bavl get` and `bavl prove`: a value, or a membership or absence proof, at any retained
//! version of a store opened read-only (with the `bavl verify` command that checks it).

use super::*;

/// A key at a retained version: the arguments `get` and `prove` share.
#[derive(clap::Args)]
pub struct KeyAt {
    /// The key, in hex (1 to 1024 bytes).
    #[arg(long, value_name = "HEX", value_parser = parse_key)]
    key: HexBytes,
    /// A retained version (default: the latest).
    #[arg(long, value_name = "V")]
    version: Option<u64>,
    /// How many of the newest versions to retain while opening (for --version).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    #[command(flatten)]
    cache: CacheArg,
}

#[derive(clap::Args)]
pub struct GetArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    at: KeyAt,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const GET_HELP: &str = "Examples:
  bavl get --db /var/lib/bavl --key 6b3031
  bavl get --db /var/lib/bavl --key 6b3031 --version 41 --json

Prints the value in hex, or `absent`. Versions older than the newest checkpoint are gone;
of the later ones, the --keep newest are retained. The store is opened read-only (a shared
lock; nothing on disk is changed), so a backup or a read-only mount can be read.

Exit status: 0 the key is present, 1 it is absent, 2 bad arguments, no store there, the
store is in use by a writer or unreadable, or the version is not retained, 3 the store is
damaged, 141 the reader of the output went away.";

#[derive(clap::Args)]
pub struct ProveArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    at: KeyAt,
    /// Write the proof's raw bytes to FILE instead of printing it in hex.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub const PROVE_HELP: &str = "Examples:
  bavl prove --db /var/lib/bavl --key 6b3031
  bavl prove --db /var/lib/bavl --key 6b3031 --version 41 --out proof.bin
  bavl prove --db /var/lib/bavl --key 6b3031 --json | jq -r .verify_command | sh

A membership proof if the key is present at that version (it proves the value), else an
absence proof. Either verifies against the version's root alone: the output ends with the
`bavl verify` command that checks it. The store is opened read-only (a shared lock;
nothing on disk is changed).

Exit status: 0 a proof was produced, 2 bad arguments, no store there, the store is in use
by a writer or unreadable, or the version is not retained, 3 the store is damaged, 141 the
reader of the output went away.";

fn version_snapshot(db: &Path, store: &Store, version: Option<u64>) -> Result<Snapshot> {
    match version {
        None => Ok(store.latest()),
        Some(v) => store.snapshot(v).map_err(|e| store_error(db, e)),
    }
}

pub fn get(args: &GetArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing_with(db, args.at.keep, Some(args.at.cache.cache_mib))?;
    let snap = version_snapshot(db, &store, args.at.version)?;
    let version = args.at.version.unwrap_or(store.version());
    let key = &args.at.key[..];
    let snap = store.resident_for(&snap, |s| s.get(key).err()).map_err(|e| store_error(db, e))?;
    let value = snap.get(key)?;
    if args.json {
        let out = json!({
            "version": version,
            "root": hex::encode(snap.root_hash()),
            "key": hex::encode(&args.at.key),
            "present": value.is_some(),
            "value": value.map(hex::encode),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match value {
            Some(v) => println!("{}", hex::encode(v)),
            None => println!("absent"),
        }
    }
    Ok(if value.is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The `bavl verify` command line that checks a proof.
fn verify_command(
    root: &Digest,
    kind: &str,
    key: &[u8],
    value: Option<&[u8]>,
    proof: Result<&Path, &[u8]>,
) -> String {
    let mut c = format!(
        "bavl verify --root {} --kind {kind} --key {}",
        hex::encode(root),
        hex::encode(key)
    );
    if let Some(v) = value {
        c += &format!(" --value {}", hex::encode(v));
    }
    match proof {
        Ok(path) => c += &format!(" --proof {}", shell_word(&path.to_string_lossy())),
        Err(bytes) => c += &format!(" --proof-hex {}", hex::encode(bytes)),
    }
    c
}

pub fn prove(args: &ProveArgs) -> Result<ExitCode> {
    let db = &args.db.db;
    let store = open_existing_with(db, args.at.keep, Some(args.at.cache.cache_mib))?;
    let snap = version_snapshot(db, &store, args.at.version)?;
    let version = args.at.version.unwrap_or(store.version());
    let root = snap.root_hash();
    let key = &args.at.key[..];
    let needs = |s: &Snapshot| match s.get(key) {
        Ok(Some(_)) => s.prove_membership(key).err()?.page().cloned(),
        Ok(None) => s.prove_absence(key).err()?.page().cloned(),
        Err(page) => Some(page),
    };
    let snap = store.resident_for(&snap, needs).map_err(|e| store_error(db, e))?;
    let value = snap.get(key)?;
    let (kind, proof) = match value {
        Some(_) => ("membership", snap.prove_membership(key)),
        None => ("absence", snap.prove_absence(key)),
    };
    let proof = proof.with_context(|| {
        format!("the snapshot gave no proof for key {} (a bug)", hex::encode(key))
    })?;
    if let Some(path) = &args.out {
        std::fs::write(path, &proof).with_context(|| format!("writing {}", path.display()))?;
    }
    let how = match &args.out {
        Some(path) => Ok(path.as_path()),
        None => Err(&proof[..]),
    };
    let command = verify_command(&root, kind, key, value, how);
    if args.json {
        let out = json!({
            "version": version,
            "root": hex::encode(root),
            "kind": kind,
            "key": hex::encode(key),
            "value": value.map(hex::encode),
            "proof": if args.out.is_none() { Some(hex::encode(&proof)) } else { None },
            "proof_file": args.out.as_ref().map(|p| p.display().to_string()),
            "proof_bytes": proof.len(),
            "verify_command": command,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("version  {version}");
        println!("root     {}", hex::encode(root));
        println!("kind     {kind}");
        println!("key      {}", hex::encode(key));
        if let Some(v) = value {
            println!("value    {}", hex::encode(v));
        }
        match &args.out {
            Some(path) => println!("proof    {} bytes written to {}", proof.len(), path.display()),
            None => println!("proof    {} ({} bytes)", hex::encode(&proof), proof.len()),
        }
        println!("verify   {command}");
    }
    Ok(ExitCode::SUCCESS)
}
