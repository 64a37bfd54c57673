/**
 * Runs the TypeScript verifier on the differential corpus written by the fuzz crate's
 * diff_corpus example and prints one verdict line per case, "CASE ok SUMMARY" or
 * "CASE err KIND", in the format every bavl verifier prints (docs/verifiers.md), for
 * scripts/verifiers.sh to compare with the Rust and Go verifiers' lines.
 *
 * Usage: node dist/tools/corpus.js CORPUS.json > VERDICTS.txt
 */
import { readFileSync, writeSync } from "node:fs";
import type { Absence, Chunk, Entry, Membership, Range } from "../src/index.js";
import { type VCase, hex, run, unhex } from "../test/cases.js";

type Base = VCase & { kind: string; root: string; proof: string };

type Case = [number, "asis"] | [number, "flip", number, number] | [number, "truncate" | "append", number];

const entries = (es: Entry[]): string => es.map((e) => `${hex(e.key)}:${hex(e.value)}`).join(",");

/** The verdict line's text: what the verifier established, or the error kind. */
function verdict(b: Base, root: Uint8Array, proof: Uint8Array): string {
  const r = run(root, b.kind, b, proof);
  if ("err" in r) return `err ${r.err}`;
  switch (b.kind) {
    case "membership": {
      const m = r.ok as Membership;
      return `ok index=${m.index} keys=${m.keyCount}`;
    }
    case "absence":
      return `ok keys=${(r.ok as Absence).keyCount}`;
    case "range": {
      const g = r.ok as Range;
      return `ok keys=${g.keyCount} entries=${entries(g.entries)}`;
    }
  }
  const c = r.ok as Chunk;
  return (
    `ok index=${c.index} chunks=${c.chunkCount} keys=${c.keyCount} before=${c.keysBefore} ` +
    `height=${c.keyHeight} capacity=${c.capacity} entries=${entries(c.entries)}`
  );
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
