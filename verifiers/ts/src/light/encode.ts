/**
 * The bytes CometBFT v0.38 hashes and signs, rebuilt from RPC JSON: `Header.Hash()` (a
 * simple Merkle tree of 14 protobuf-encoded fields, primitives in gogo wrapper messages,
 * types/block.go), the validator set hash (`SimpleValidator`s, types/validator_set.go)
 * and the length-delimited `CanonicalVote` a validator signs for a precommit
 * (types/canonical.go). Protobuf wire encoding comes from @bufbuild/protobuf's
 * BinaryWriter; the field numbers and the gogo rules (zero scalars omitted, non-nullable
 * embedded messages always written) are CometBFT's .proto files'. The same inputs as
 * crates/abci/src/light.rs. Every function is pure: it never fetches anything.
 */
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { sha256 } from "@noble/hashes/sha2.js";
import { LightError } from "./errors.js";

/** A protobuf Timestamp: seconds since the epoch and nanoseconds. */
export interface Time {
  seconds: bigint;
  nanos: number;
}

/** A block ID: the header hash and the part set header. */
export interface BlockId {
  hash: Uint8Array;
  partsTotal: number;
  partsHash: Uint8Array;
}

/** A header as the RPC writes it, decoded. */
export interface Header {
  versionBlock: bigint;
  versionApp: bigint;
  chainId: string;
  height: bigint;
  time: Time;
  lastBlockId: BlockId;
  lastCommitHash: Uint8Array;
  dataHash: Uint8Array;
  validatorsHash: Uint8Array;
  nextValidatorsHash: Uint8Array;
  consensusHash: Uint8Array;
  appHash: Uint8Array;
  lastResultsHash: Uint8Array;
  evidenceHash: Uint8Array;
  proposerAddress: Uint8Array;
}

/** One validator: its Ed25519 key, power, and address (first 20 bytes of SHA-256(key)). */
export interface Validator {
  address: Uint8Array;
  pubKey: Uint8Array;
  power: bigint;
}

/** CometBFT's simple Merkle tree (RFC 6962 shape: split at the largest power of two below n). */
export function merkleRoot(leaves: Uint8Array[]): Uint8Array {
  const n = leaves.length;
  if (n === 0) return sha256(new Uint8Array(0));
  if (n === 1) return sha256(concat(Uint8Array.of(0), leaves[0] as Uint8Array));
  let k = 1;
  while (k * 2 < n) k *= 2;
  return sha256(concat(Uint8Array.of(1), merkleRoot(leaves.slice(0, k)), merkleRoot(leaves.slice(k))));
}

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function timestamp(w: BinaryWriter, t: Time): BinaryWriter {
  if (t.seconds !== 0n) w.tag(1, WireType.Varint).int64(t.seconds);
  if (t.nanos !== 0) w.tag(2, WireType.Varint).int32(t.nanos);
  return w;
}

/** A gogo BytesValue / StringValue / Int64Value: field 1, omitted when empty or zero. */
function wrapped(b: Uint8Array): Uint8Array {
  return b.length === 0 ? new Uint8Array(0) : new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(b).finish();
}

function blockId(id: BlockId): Uint8Array {
  const w = new BinaryWriter();
  if (id.hash.length > 0) w.tag(1, WireType.LengthDelimited).bytes(id.hash);
  // part_set_header is non-nullable: always written, even when empty.
  w.tag(2, WireType.LengthDelimited).fork();
  if (id.partsTotal !== 0) w.tag(1, WireType.Varint).uint32(id.partsTotal);
  if (id.partsHash.length > 0) w.tag(2, WireType.LengthDelimited).bytes(id.partsHash);
  return w.join().finish();
}

/** `Header.Hash()`. */
export function headerHash(h: Header): Uint8Array {
  const version = new BinaryWriter();
  if (h.versionBlock !== 0n) version.tag(1, WireType.Varint).uint64(h.versionBlock);
  if (h.versionApp !== 0n) version.tag(2, WireType.Varint).uint64(h.versionApp);
  const height = new BinaryWriter();
  if (h.height !== 0n) height.tag(1, WireType.Varint).int64(h.height);
  return merkleRoot([
    version.finish(),
    wrapped(new TextEncoder().encode(h.chainId)),
    height.finish(),
    timestamp(new BinaryWriter(), h.time).finish(),
    blockId(h.lastBlockId),
    wrapped(h.lastCommitHash),
    wrapped(h.dataHash),
    wrapped(h.validatorsHash),
    wrapped(h.nextValidatorsHash),
    wrapped(h.consensusHash),
    wrapped(h.appHash),
    wrapped(h.lastResultsHash),
    wrapped(h.evidenceHash),
    wrapped(h.proposerAddress),
  ]);
}

/** `ValidatorSet.Hash()`: SimpleValidator{pub_key: PublicKey{ed25519}, voting_power}, in set order. */
export function validatorsHash(vals: Validator[]): Uint8Array {
  return merkleRoot(
    vals.map((v) => {
      const w = new BinaryWriter();
      w.tag(1, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).bytes(v.pubKey).join();
      if (v.power !== 0n) w.tag(2, WireType.Varint).int64(v.power);
      return w.finish();
    }),
  );
}

/** The bytes a validator signs for a precommit: length-delimited CanonicalVote. */
export function precommitSignBytes(
  chainId: string,
  height: bigint,
  round: bigint,
  id: BlockId | null,
  time: Time,
): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.Varint).int32(2); // SIGNED_MSG_TYPE_PRECOMMIT
  if (height !== 0n) w.tag(2, WireType.Bit64).sfixed64(height);
  if (round !== 0n) w.tag(3, WireType.Bit64).sfixed64(round);
  if (id !== null) {
    // CanonicalBlockID (nullable: absent for a nil vote); its part set header is not.
    w.tag(4, WireType.LengthDelimited).fork();
    if (id.hash.length > 0) w.tag(1, WireType.LengthDelimited).bytes(id.hash);
    w.tag(2, WireType.LengthDelimited).fork();
    if (id.partsTotal !== 0) w.tag(1, WireType.Varint).uint32(id.partsTotal);
    if (id.partsHash.length > 0) w.tag(2, WireType.LengthDelimited).bytes(id.partsHash);
    w.join().join();
  }
  w.tag(5, WireType.LengthDelimited).fork(); // timestamp: non-nullable
  timestamp(w, time).join();
  if (chainId.length > 0) w.tag(6, WireType.LengthDelimited).string(chainId);
  return new BinaryWriter().bytes(w.finish()).finish();
}

/** Parses an RFC 3339 UTC time as CometBFT writes it (`2026-11-25T01:36:18.536732Z`). */
export function parseTime(s: unknown): Time {
  const m = typeof s === "string" ? /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$/.exec(s) : null;
  if (m === null) throw new LightError("Malformed", `time ${JSON.stringify(s)}`);
  const [y, mo, d, hh, mm, ss] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || hh > 23 || mm > 59 || ss > 60) {
    throw new LightError("Malformed", `time ${s}`);
  }
  const ms = Date.UTC(y, mo - 1, d, hh, mm, ss);
  return { seconds: BigInt(ms / 1000), nanos: Number((m[7] ?? "").padEnd(9, "0")) };
}

/** Milliseconds since the epoch (for trust-period and clock checks). */
export function timeMs(t: Time): number {
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);
}
