/**
 * Decoding of untrusted CometBFT RPC JSON (`/commit`, `/validators`, `/abci_query`) into
 * typed values. Anything missing, of the wrong type or out of range is a LightError
 * "Malformed"; nothing here trusts a field it has not checked, and nothing throws anything
 * else.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import type { BlockId, Header, Time, Validator } from "./encode.js";
import { parseTime } from "./encode.js";
import { LightError } from "./errors.js";

type Json = unknown;

function bad(what: string): LightError {
  return new LightError("Malformed", what);
}

export function field(v: Json, key: string): Json {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw bad(`${key}: not in an object`);
  return (v as Record<string, Json>)[key];
}

export function str(v: Json, what: string): string {
  if (typeof v !== "string") throw bad(what);
  return v;
}

/** A decimal int64 (CometBFT writes them as strings). */
export function int(v: Json, what: string): bigint {
  const s = typeof v === "number" && Number.isSafeInteger(v) ? String(v) : v;
  if (typeof s !== "string" || !/^-?\d{1,19}$/.test(s)) throw bad(what);
  const n = BigInt(s);
  if (n > 0x7fffffffffffffffn || n < -0x8000000000000000n) throw bad(what);
  return n;
}

export function hex(v: Json, what: string): Uint8Array {
  const s = str(v, what);
  if (s.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(s)) throw bad(what);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function base64(v: Json, what: string): Uint8Array {
  if (v === null || v === undefined) return new Uint8Array(0);
  const s = str(v, what);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) throw bad(what);
  const bin = atob(s);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

export function array(v: Json, what: string): Json[] {
  if (!Array.isArray(v)) throw bad(what);
  return v;
}

export function toHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export function blockId(v: Json): BlockId {
  const parts = field(v, "parts");
  const total = int(field(parts, "total"), "parts.total");
  if (total < 0n || total > 0xffffffffn) throw bad("parts.total");
  return { hash: hex(field(v, "hash"), "block_id.hash"), partsTotal: Number(total), partsHash: hex(field(parts, "hash"), "parts.hash") };
}

export function header(h: Json): Header {
  const version = field(h, "version");
  const app = field(version, "app");
  const x = (k: string) => hex(field(h, k), k);
  return {
    versionBlock: int(field(version, "block"), "version.block"),
    versionApp: app === undefined ? 0n : int(app, "version.app"),
    chainId: str(field(h, "chain_id"), "chain_id"),
    height: int(field(h, "height"), "height"),
    time: parseTime(field(h, "time")),
    lastBlockId: blockId(field(h, "last_block_id")),
    lastCommitHash: x("last_commit_hash"),
    dataHash: x("data_hash"),
    validatorsHash: x("validators_hash"),
    nextValidatorsHash: x("next_validators_hash"),
    consensusHash: x("consensus_hash"),
    appHash: x("app_hash"),
    lastResultsHash: x("last_results_hash"),
    evidenceHash: x("evidence_hash"),
    proposerAddress: x("proposer_address"),
  };
}

/** One commit signature. flag: 1 absent, 2 commit (for the block), 3 nil. */
export interface CommitSig {
  flag: number;
  address: Uint8Array;
  time: Time;
  signature: Uint8Array;
}

export interface Commit {
  height: bigint;
  round: bigint;
  blockId: BlockId;
  signatures: CommitSig[];
}

export interface SignedHeader {
  header: Header;
  commit: Commit;
}

export function signedHeader(v: Json): SignedHeader {
  const c = field(v, "commit");
  const signatures = array(field(c, "signatures"), "signatures").map((s, i): CommitSig => {
    const flag = Number(int(field(s, "block_id_flag"), `signature ${i} flag`));
    if (flag < 1 || flag > 3) throw bad(`signature ${i} flag`);
    return flag === 1
      ? { flag, address: new Uint8Array(0), time: { seconds: 0n, nanos: 0 }, signature: new Uint8Array(0) }
      : {
          flag,
          address: hex(field(s, "validator_address"), `signature ${i} address`),
          time: parseTime(field(s, "timestamp")),
          signature: base64(field(s, "signature"), `signature ${i}`),
        };
  });
  return {
    header: header(field(v, "header")),
    commit: {
      height: int(field(c, "height"), "commit.height"),
      round: int(field(c, "round"), "commit.round"),
      blockId: blockId(field(c, "block_id")),
      signatures,
    },
  };
}

/** One validator of `/validators`; its address is recomputed from its key, never read. */
export function validator(v: Json, i: number): Validator {
  const pk = field(v, "pub_key");
  if (field(pk, "type") !== "tendermint/PubKeyEd25519") throw bad(`validator ${i}: not an Ed25519 key`);
  const pubKey = base64(field(pk, "value"), `validator ${i} key`);
  if (pubKey.length !== 32) throw bad(`validator ${i} key length`);
  const power = int(field(v, "voting_power"), `validator ${i} power`);
  if (power <= 0n) throw bad(`validator ${i} power`);
  return { address: sha256(pubKey).slice(0, 20), pubKey, power };
}
