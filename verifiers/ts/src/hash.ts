import { sha256 } from "@noble/hashes/sha2.js";

/**
 * The hash inputs of docs/design.md §2: a one-byte domain tag, length-prefixed variable
 * fields, big-endian integers, SHA-256 (@noble/hashes: audited, no dependencies, runs in
 * browsers and Node.js alike).
 */

export const FORMAT_VERSION = 1;

/** Node inputs are short: laid out in one buffer and hashed in one call. */
function hashParts(...parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const buf = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    buf.set(p, at);
    at += p.length;
  }
  return sha256(buf);
}

function be(n: bigint, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  if (bytes === 8) {
    new DataView(out.buffer).setBigUint64(0, n);
    return out;
  }
  let x = Number(n);
  for (let i = bytes - 1; i >= 0; i--) {
    out[i] = x & 0xff;
    x = Math.floor(x / 256);
  }
  return out;
}

export function valueHash(value: Uint8Array): Uint8Array {
  return hashParts(Uint8Array.of(0x00), value);
}

/** `key` was checked to be 1..=1024 bytes, so its two-byte length cannot wrap. */
export function leafHash(key: Uint8Array, vh: Uint8Array): Uint8Array {
  return hashParts(Uint8Array.of(0x01), be(BigInt(key.length), 2), key, vh);
}

export function chunkNodeHash(l: Uint8Array, r: Uint8Array): Uint8Array {
  return hashParts(Uint8Array.of(0x02), l, r);
}

export function chunkHash(n: number, inChunkRoot: Uint8Array): Uint8Array {
  return hashParts(Uint8Array.of(0x03), be(BigInt(n), 4), inChunkRoot);
}

export function innerHash(
  height: number,
  kc: bigint,
  cc: bigint,
  l: Uint8Array,
  r: Uint8Array,
): Uint8Array {
  return hashParts(Uint8Array.of(0x04, height), be(kc, 8), be(cc, 8), l, r);
}

export function rootHash(capacity: number, top: Uint8Array): Uint8Array {
  return hashParts(Uint8Array.of(0x05, FORMAT_VERSION), be(BigInt(capacity), 4), top);
}

/** The largest power of two strictly below n (n >= 2): the RFC 6962 split. */
export function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** The in-chunk root over leaf hashes. */
export function mth(leaves: Uint8Array[], a = 0, b = leaves.length): Uint8Array {
  if (b - a === 1) return leaves[a]!;
  const k = splitPoint(b - a);
  return chunkNodeHash(mth(leaves, a, a + k), mth(leaves, a + k, b));
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

/** Lexicographic byte-string order: negative, zero or positive. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = a[i]! - b[i]!;
    if (d !== 0) return d;
  }
  return a.length - b.length;
}
