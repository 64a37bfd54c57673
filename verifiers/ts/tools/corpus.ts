/**
 * Runs the TypeScript verifier on the differential corpus written by the fuzz crate's
 * diff_corpus example and prints one verdict line per case, "CASE ok SUMMARY" or
 * "CASE err KIND", in the format every bavl verifier prints (docs/verifiers.md), for
 * scripts/verifiers.sh to compare with the Rust and Go verifiers' lines.
 *
 * Usage: node dist/tools/corpus.js CORPUS.json > VERDICTS.txt
 */
import { readFileSync, writeSync } from "node:fs";
import {
  type Bound,
  type Entry,
  kindOf,
  verifyAbsence,
  verifyChunk,
  verifyMembership,
  verifyRange,
} from "../src/index.js";
import { type VBound, bound, hex, unhex } from "../test/cases.js";

interface Base {
  kind: string;
  root: string;
  key?: string;
  value?: string;
  lo?: VBound;
  hi?: VBound;
  index?: string;
  proof: string;
}

type Case = [number, "asis"] | [number, "flip", number, number] | [number, "truncate" | "append", number];

const entries = (es: Entry[]): string => es.map((e) => `${hex(e.key)}:${hex(e.value)}`).join(",");

function verdict(b: Base, root: Uint8Array, proof: Uint8Array): string {
  try {
    switch (b.kind) {
      case "membership": {
        const m = verifyMembership(root, unhex(b.key), unhex(b.value), proof);
        return `ok index=${m.index} keys=${m.keyCount}`;
      }
      case "absence":
        return `ok keys=${verifyAbsence(root, unhex(b.key), proof).keyCount}`;
      case "range": {
        const r = verifyRange(root, bound(b.lo) as Bound, bound(b.hi) as Bound, proof);
        return `ok keys=${r.keyCount} entries=${entries(r.entries)}`;
      }
      case "chunk": {
        const c = verifyChunk(root, BigInt(b.index ?? "x"), proof);
        return (
          `ok index=${c.index} chunks=${c.chunkCount} keys=${c.keyCount} before=${c.keysBefore} ` +
          `height=${c.keyHeight} capacity=${c.capacity} entries=${entries(c.entries)}`
        );
      }
    }
  } catch (e) {
    const k = kindOf(e);
    if (k === undefined) throw e;
    return `err ${k}`;
  }
  throw new Error(`unknown kind ${b.kind}`);
}

function mutate(c: Case, proof: Uint8Array): Uint8Array {
  switch (c[1]) {
    case "asis":
      return proof;
    case "flip": {
      const p = Uint8Array.from(proof);
      p[c[2]]! ^= c[3];
      return p;
    }
    case "truncate":
      return proof.subarray(0, c[2]);
    case "append":
      return Uint8Array.of(...proof, c[2]);
  }
}

const path = process.argv[2];
if (path === undefined) {
  process.stderr.write("usage: node dist/tools/corpus.js CORPUS.json > VERDICTS.txt\n");
  process.exit(2);
}
const corpus = JSON.parse(readFileSync(path, "utf8")) as { bases: Base[]; cases: Case[] };
const proofs = corpus.bases.map((b) => unhex(b.proof));
const roots = corpus.bases.map((b) => unhex(b.root));
let buf: string[] = [];
corpus.cases.forEach((c, i) => {
  const b = c[0];
  buf.push(`${i} ${verdict(corpus.bases[b]!, roots[b]!, mutate(c, proofs[b]!))}\n`);
  if (buf.length >= 4096) {
    writeSync(1, buf.join(""));
    buf = [];
  }
});
writeSync(1, buf.join(""));
