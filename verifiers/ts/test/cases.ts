/**
 * The vectors of docs/vectors/core.json read with nothing but the package, shared by the
 * Node.js tests and the browser page (so: no Node-only API here).
 */
import {
  type Bound,
  type Entry,
  kindOf,
  verifyAbsence,
  verifyChunk,
  verifyMembership,
  verifyRange,
} from "../src/index.js";

export interface VBound {
  kind: "included" | "excluded" | "unbounded";
  key?: string;
}
export interface VEntry {
  key: string;
  value: string;
}
export interface VCase {
  description?: string;
  kind?: string;
  key?: string;
  value?: string;
  lo?: VBound;
  hi?: VBound;
  /** A number in the vectors, a decimal string in the differential corpus. */
  index?: number | string;
  proof?: string;
  bytes?: string;
  entries?: VEntry[];
  key_count?: number;
  chunk_count?: number;
  keys_before?: number;
  key_height?: number;
  len?: number;
  error?: string;
  expected?: string;
}
export interface VTree {
  name: string;
  capacity: number;
  root: string;
  entries: VEntry[];
  key_count: number;
  chunk_count: number;
  membership: VCase[];
  absence: VCase[];
  range: VCase[];
  chunks: VCase[];
  negative: VCase[];
}
export interface VFile {
  format_version: number;
  hash: string;
  trees: VTree[];
}

export function unhex(s: string | undefined): Uint8Array {
  if (s === undefined || s.length % 2 !== 0 || !/^[0-9a-f]*$/.test(s)) throw new Error(`bad hex ${s}`);
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

export function bound(b: VBound | undefined): Bound {
  if (b === undefined) throw new Error("missing bound");
  if (b.kind === "unbounded") return { kind: "unbounded" };
  return { kind: b.kind, key: unhex(b.key) };
}

export function entriesHex(es: Entry[]): VEntry[] {
  return es.map((e) => ({ key: hex(e.key), value: hex(e.value) }));
}

/** Runs the verifier a case names: its result, or the error kind it threw. */
export function run(root: Uint8Array, kind: string, c: VCase, proof: Uint8Array): { ok: unknown } | { err: string } {
  try {
    switch (kind) {
      case "membership":
        return { ok: verifyMembership(root, unhex(c.key), unhex(c.value), proof) };
      case "absence":
        return { ok: verifyAbsence(root, unhex(c.key), proof) };
      case "range":
        return { ok: verifyRange(root, bound(c.lo), bound(c.hi), proof) };
      case "chunk":
        return { ok: verifyChunk(root, BigInt(c.index ?? -1), proof) };
    }
  } catch (e) {
    const k = kindOf(e);
    if (k === undefined) throw e;
    return { err: k };
  }
  throw new Error(`unknown kind ${kind}`);
}

export interface Valid {
  name: string;
  kind: string;
  root: Uint8Array;
  c: VCase;
  proof: Uint8Array;
}

export function validVectors(file: VFile): Valid[] {
  const out: Valid[] = [];
  for (const t of file.trees) {
    const root = unhex(t.root);
    const add = (kind: string, cs: VCase[], field: (c: VCase) => string | undefined) => {
      for (const c of cs) out.push({ name: `${t.name}/${kind}`, kind, root, c, proof: unhex(field(c)) });
    };
    add("membership", t.membership, (c) => c.proof);
    add("absence", t.absence, (c) => c.proof);
    add("range", t.range, (c) => c.proof);
    add("chunk", t.chunks, (c) => c.bytes);
  }
  return out;
}
