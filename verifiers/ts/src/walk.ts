import { VerifyError, decodeError } from "./errors.js";
import {
  chunkHash,
  chunkNodeHash,
  compareBytes,
  equalBytes,
  FORMAT_VERSION,
  innerHash,
  leafHash,
  mth,
  rootHash,
  splitPoint,
  valueHash,
} from "./hash.js";
import { Reader } from "./reader.js";

/**
 * The one pass over a proof of docs/design.md §3: every field checked as it is read, in
 * encoding order, every hash recomputed bottom-up. The order of the checks decides the
 * error kind, so it follows the specification's list step by step.
 */

export const MAX_KEY_LEN = 1024;
export const MAX_VALUE_LEN = 16 * 1024 * 1024;
const MAX_HEIGHT = 96;
const MAX_PRUNED_KEYS = (1n << 48n) - 1n;
const U64_MAX = (1n << 64n) - 1n;

export const KIND_MEMBERSHIP = 1;
export const KIND_RANGE = 2;
export const KIND_CHUNK = 3;

const T_EMPTY = 0;
const T_INNER = 1;
const T_CHUNK = 2;
const T_PRUNED = 3;
export const L_HASH = 0;
export const L_VALUE = 1;
const L_SUBJECT = 2;

export interface Entry {
  key: Uint8Array;
  value: Uint8Array;
}

export interface Leaf {
  index: bigint;
  key: Uint8Array;
  value: Uint8Array | null;
  tag: number;
}

interface Info {
  hash: Uint8Array;
  kc: bigint;
  cc: bigint;
  expanded: boolean;
  /** The subtree holds the expanded chunk, reached by left turns only. */
  pending: boolean;
}

export interface ExpandedChunk {
  index: bigint;
  keysBefore: bigint;
  full: boolean;
  entries: Entry[] | null;
}

export interface Walked {
  keyCount: bigint;
  chunkCount: bigint;
  leaves: Leaf[];
  chunks: ExpandedChunk[];
  /** -1 if unknown. */
  keyHeight: number;
  capacity: number;
  subjectUsed: boolean;
}

const sat = (a: bigint, b: bigint): bigint => (a + b > U64_MAX ? U64_MAX : a + b);

class Walker {
  capacity = 0n;
  keysBefore = 0n;
  chunksBefore = 0n;
  leaves: Leaf[] = [];
  chunks: ExpandedChunk[] = [];
  keyHeight = -1;

  constructor(
    readonly r: Reader,
    public subject: Entry | null,
    readonly build: boolean,
  ) {}

  node(depth: number): Info {
    const at = this.r.pos;
    if (depth > MAX_HEIGHT) throw decodeError(at, "structure nested too deeply");
    const tag = this.r.u8();
    if (tag === T_PRUNED) return this.pruned();
    if (tag === T_CHUNK) return this.chunk();
    if (tag === T_INNER) return this.inner(depth, at);
    throw decodeError(at, `unknown node tag ${tag}`);
  }

  inner(depth: number, at: number): Info {
    const hat = this.r.pos;
    const height = this.r.u8();
    if (height === 0 || height > MAX_HEIGHT) throw decodeError(hat, `height = ${height} out of range`);
    const l = this.node(depth + 1);
    const r = this.node(depth + 1);
    if (!l.expanded && !r.expanded) {
      throw new VerifyError("Structure", "expanded node over two pruned subtrees");
    }
    const kc = l.kc + r.kc;
    const cc = l.cc + r.cc;
    if (kc > U64_MAX || cc > U64_MAX) throw decodeError(at, "key count overflows");
    if (r.pending) this.keyHeight = height;
    const hash = innerHash(height, kc, cc, l.hash, r.hash);
    return { hash, kc, cc, expanded: true, pending: l.pending };
  }

  pruned(): Info {
    const at = this.r.pos;
    const kc = this.r.varintIn(1n, MAX_PRUNED_KEYS, "key count");
    const cc = this.r.varintIn(1n, kc, "chunk count");
    if (cc === 1n && kc > this.capacity) throw decodeError(at, `key count = ${kc} out of range`);
    const hash = this.r.digest();
    this.keysBefore = sat(this.keysBefore, kc);
    this.chunksBefore = sat(this.chunksBefore, cc);
    return { hash, kc, cc, expanded: false, pending: false };
  }

  chunk(): Info {
    const m = this.r.varintIn(1n, this.capacity, "chunk key count");
    const p = this.r.varintIn(0n, m - 1n, "first expanded leaf");
    const q = this.r.varintIn(1n, m - p, "expanded leaf count");
    const full = p === 0n && q === m;
    const offset = this.keysBefore;
    let entries: Entry[] | null = null;
    let hash: Uint8Array;
    if (full && this.build) {
      [entries, hash] = this.fullChunk(Number(m));
    } else {
      hash = chunkHash(Number(m), this.inChunk(0, Number(m), Number(p), Number(p + q), offset));
    }
    this.chunks.push({ index: this.chunksBefore, keysBefore: offset, full, entries });
    this.keysBefore = sat(this.keysBefore, m);
    this.chunksBefore = sat(this.chunksBefore, 1n);
    return { hash, kc: m, cc: 1n, expanded: true, pending: true };
  }

  /** The n leaves of a chunk proof's full chunk: values only, keys strictly increasing. */
  fullChunk(n: number): [Entry[], Uint8Array] {
    const entries: Entry[] = [];
    const leaves: Uint8Array[] = [];
    for (let i = 0; i < n; i++) {
      if (this.leafTag() !== L_VALUE) {
        throw new VerifyError("Structure", "chunk entries must carry values");
      }
      const key = this.key();
      const value = this.r.lengthPrefixed(BigInt(MAX_VALUE_LEN), "value length");
      const prev = entries[i - 1];
      if (prev !== undefined && compareBytes(prev.key, key) >= 0) {
        throw new VerifyError("Structure", "keys out of order");
      }
      entries.push({ key, value });
      leaves.push(leafHash(key, valueHash(value)));
    }
    return [entries, chunkHash(n, mth(leaves))];
  }

  inChunk(a: number, b: number, p: number, e: number, offset: bigint): Uint8Array {
    if (b <= p || a >= e) return this.r.digest();
    if (b - a === 1) return this.leaf(offset + BigInt(a));
    const k = splitPoint(b - a);
    const l = this.inChunk(a, a + k, p, e, offset);
    const r = this.inChunk(a + k, b, p, e, offset);
    return chunkNodeHash(l, r);
  }

  leafTag(): number {
    const at = this.r.pos;
    const t = this.r.u8();
    if (t > L_SUBJECT) throw decodeError(at, `unknown leaf tag ${t}`);
    return t;
  }

  key(): Uint8Array {
    const at = this.r.pos;
    const k = this.r.lengthPrefixed(BigInt(MAX_KEY_LEN), "key length");
    if (k.length === 0) throw decodeError(at, "key length = 0 out of range");
    return k;
  }

  leaf(index: bigint): Uint8Array {
    const tag = this.leafTag();
    let key: Uint8Array;
    let value: Uint8Array | null = null;
    let hash: Uint8Array;
    if (tag === L_HASH) {
      key = this.key();
      hash = leafHash(key, this.r.digest());
    } else if (tag === L_VALUE) {
      key = this.key();
      value = this.r.lengthPrefixed(BigInt(MAX_VALUE_LEN), "value length");
      hash = leafHash(key, valueHash(value));
    } else {
      if (this.subject === null) throw new VerifyError("Structure", "unexpected subject leaf");
      ({ key, value } = this.subject);
      this.subject = null;
      hash = leafHash(key, valueHash(value));
    }
    this.leaves.push({ index, key, value, tag });
    return hash;
  }
}

/** Reads a whole proof: steps 2-8 of docs/design.md §3. */
export function walk(
  root: Uint8Array,
  expectedKind: number,
  bytes: Uint8Array,
  subject: Entry | null,
  build: boolean,
): Walked {
  const r = new Reader(bytes);
  const version = r.u8();
  if (version !== FORMAT_VERSION) throw decodeError(0, `format version ${version} is not supported`);
  if (r.u8() !== expectedKind) throw new VerifyError("WrongKind", "proof of another kind");
  const capacity = r.varintIn(4n, 65536n, "capacity");
  const w = new Walker(r, subject, build);
  w.capacity = capacity;
  let top: Uint8Array = new Uint8Array(32);
  let kc = 0n;
  let cc = 0n;
  let pending = false;
  if (r.remaining() > 0 && bytes[r.pos] === T_EMPTY) {
    r.pos += 1;
  } else {
    const info = w.node(0);
    if (!info.expanded) throw new VerifyError("Structure", "nothing expanded");
    ({ hash: top, kc, cc, pending } = info);
  }
  if (r.remaining() !== 0) throw decodeError(r.pos, "trailing bytes");
  if (!equalBytes(rootHash(Number(capacity), top), root)) {
    throw new VerifyError("RootMismatch", "the proof is for another tree or version, or was altered");
  }
  return {
    keyCount: kc,
    chunkCount: cc,
    leaves: w.leaves,
    chunks: w.chunks,
    keyHeight: pending ? 0 : w.keyHeight,
    capacity: Number(capacity),
    subjectUsed: w.subject === null,
  };
}
