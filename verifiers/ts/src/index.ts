/**
 * @bavl/verifier: checks bavl proofs and chunks against a trusted root hash, written from
 * the specification (docs/design.md §2-§3 of the bavl repository). ES modules, no
 * Node-only API: runs in browsers and Node.js.
 *
 * Every function takes the trusted root and untrusted bytes; it never reads past them,
 * allocates only in proportion to the bytes read, and returns what the proof establishes
 * or throws a VerifyError whose `kind` is one of the six stable error kinds every bavl
 * verifier reports for the same input. Counts and indices are bigints (they reach 2^64).
 */
import { VerifyError } from "./errors.js";
import { compareBytes } from "./hash.js";
import {
  type Entry,
  KIND_CHUNK,
  KIND_MEMBERSHIP,
  KIND_RANGE,
  L_HASH,
  L_VALUE,
  MAX_KEY_LEN,
  MAX_VALUE_LEN,
  walk,
} from "./walk.js";

export { ERROR_KINDS, type ErrorKind, VerifyError } from "./errors.js";
export type { Entry } from "./walk.js";

/** One end of a range; `key` is ignored when unbounded. */
export type Bound =
  | { kind: "included"; key: Uint8Array }
  | { kind: "excluded"; key: Uint8Array }
  | { kind: "unbounded" };

export interface Membership {
  /** The key's position among all keys. */
  index: bigint;
  keyCount: bigint;
}

export interface Range {
  /** Every entry within the bounds, in key order; none omitted. */
  entries: Entry[];
  keyCount: bigint;
}

export interface Absence {
  keyCount: bigint;
}

export interface Chunk {
  index: bigint;
  chunkCount: bigint;
  keyCount: bigint;
  /** Keys in the chunks before this one. */
  keysBefore: bigint;
  /** Height of the inner node whose separator is its first key (0 for chunk 0). */
  keyHeight: number;
  capacity: number;
  entries: Entry[];
}

function checkKey(key: Uint8Array): void {
  if (key.length === 0) throw new VerifyError("Input", "empty key");
  if (key.length > MAX_KEY_LEN) throw new VerifyError("Input", "key longer than 1024 bytes");
}

function below(k: Uint8Array, lo: Bound): boolean {
  if (lo.kind === "included") return compareBytes(k, lo.key) < 0;
  if (lo.kind === "excluded") return compareBytes(k, lo.key) <= 0;
  return false;
}

function above(k: Uint8Array, hi: Bound): boolean {
  if (hi.kind === "included") return compareBytes(k, hi.key) > 0;
  if (hi.kind === "excluded") return compareBytes(k, hi.key) >= 0;
  return false;
}

function checkBounds(lo: Bound, hi: Bound): void {
  for (const b of [lo, hi]) if (b.kind !== "unbounded") checkKey(b.key);
  if (lo.kind !== "unbounded" && hi.kind !== "unbounded" && compareBytes(lo.key, hi.key) > 0) {
    throw new VerifyError("Input", "inverted range");
  }
}

/** Checks that `key` maps to `value` in the tree with root `root`. */
export function verifyMembership(
  root: Uint8Array,
  key: Uint8Array,
  value: Uint8Array,
  proof: Uint8Array,
): Membership {
  checkKey(key);
  if (value.length > MAX_VALUE_LEN) throw new VerifyError("Input", "value longer than 16 MiB");
  const w = walk(root, KIND_MEMBERSHIP, proof, { key, value }, false);
  const leaf = w.leaves[0];
  if (w.leaves.length !== 1 || leaf === undefined || !w.subjectUsed) {
    throw new VerifyError("Structure", "a membership proof expands exactly its subject");
  }
  return { index: leaf.index, keyCount: w.keyCount };
}

/** Checks a range proof and returns every entry within `lo`..`hi`. */
export function verifyRange(root: Uint8Array, lo: Bound, hi: Bound, proof: Uint8Array): Range {
  checkBounds(lo, hi);
  const w = walk(root, KIND_RANGE, proof, null, false);
  const n = w.keyCount;
  if (n === 0n) return { entries: [], keyCount: 0n };
  const ls = w.leaves;
  const first = ls[0];
  const last = ls[ls.length - 1];
  if (first === undefined || last === undefined) throw new VerifyError("Structure", "no leaves");
  for (let i = 1; i < ls.length; i++) {
    const [a, b] = [ls[i - 1]!, ls[i]!];
    if (b.index !== a.index + 1n) throw new VerifyError("Structure", "leaves are not contiguous");
    if (compareBytes(a.key, b.key) >= 0) throw new VerifyError("Structure", "keys out of order");
  }
  if (!(first.index === 0n || below(first.key, lo)) || !(last.index === n - 1n || above(last.key, hi))) {
    throw new VerifyError("Structure", "range not covered to its bounds");
  }
  if (ls.length > 1 && (below(ls[1]!.key, lo) || above(ls[ls.length - 2]!.key, hi))) {
    throw new VerifyError("Structure", "more boundary leaves than needed");
  }
  const entries: Entry[] = [];
  for (const l of ls) {
    const inside = !below(l.key, lo) && !above(l.key, hi);
    if (inside && l.tag === L_VALUE && l.value !== null) entries.push({ key: l.key, value: l.value });
    else if (!(!inside && l.tag === L_HASH)) {
      throw new VerifyError("Structure", "leaf carries the wrong content for its place");
    }
  }
  return { entries, keyCount: n };
}

/** Checks that `key` is absent from the tree with root `root`. */
export function verifyAbsence(root: Uint8Array, key: Uint8Array, proof: Uint8Array): Absence {
  const b: Bound = { kind: "included", key };
  const r = verifyRange(root, b, b, proof);
  if (r.entries.length !== 0) throw new VerifyError("Structure", "the key is present");
  return { keyCount: r.keyCount };
}

/** Checks exported chunk bytes as some chunk of the tree, and says which. */
export function verifyChunkUnindexed(root: Uint8Array, bytes: Uint8Array): Chunk {
  const w = walk(root, KIND_CHUNK, bytes, null, true);
  const c = w.chunks[0];
  if (w.chunks.length !== 1 || c === undefined) {
    throw new VerifyError("Structure", "a chunk proof expands exactly one chunk");
  }
  if (!c.full || c.entries === null || w.keyHeight < 0) {
    throw new VerifyError("Structure", "a chunk proof expands every entry of its chunk");
  }
  return {
    index: c.index,
    chunkCount: w.chunkCount,
    keyCount: w.keyCount,
    keysBefore: c.keysBefore,
    keyHeight: w.keyHeight,
    capacity: w.capacity,
    entries: c.entries,
  };
}

/** Checks exported chunk bytes as chunk `index` of the tree with root `root`. */
export function verifyChunk(root: Uint8Array, index: bigint, bytes: Uint8Array): Chunk {
  const c = verifyChunkUnindexed(root, bytes);
  if (c.index !== index) throw new VerifyError("WrongIndex", "the chunk is of another index");
  return c;
}

/** The error kind of a thrown value, or undefined if it is not a VerifyError. */
export function kindOf(e: unknown): string | undefined {
  return e instanceof VerifyError ? e.kind : undefined;
}
