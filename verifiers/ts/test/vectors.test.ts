import assert from "node:assert/strict";
import { test } from "node:test";
import { type Chunk, ERROR_KINDS, type Membership, type Range, verifyMembership } from "../src/index.js";
import { entriesHex, loadVectors, run, unhex, validVectors } from "./vectors.js";

const file = loadVectors();

test("the vectors file is of format 1 and SHA-256", () => {
  assert.equal(file.format_version, 1);
  assert.equal(file.hash, "sha256");
  assert.ok(file.trees.length >= 5);
});

test("every positive vector verifies with exactly its recorded results", () => {
  let seen = 0;
  for (const t of file.trees) {
    const root = unhex(t.root);
    for (const m of t.membership) {
      const got = verifyMembership(root, unhex(m.key), unhex(m.value), unhex(m.proof)) as Membership;
      assert.deepEqual([got.index, got.keyCount], [BigInt(m.index!), BigInt(m.key_count!)], t.name);
      seen++;
    }
    for (const a of t.absence) {
      const r = run(root, "absence", a, unhex(a.proof));
      assert.ok("ok" in r, `${t.name}: absence rejected`);
      assert.equal((r.ok as { keyCount: bigint }).keyCount, BigInt(a.key_count!));
      seen++;
    }
    for (const c of t.range) {
      const r = run(root, "range", c, unhex(c.proof));
      assert.ok("ok" in r, `${t.name}: range rejected: ${"err" in r ? r.err : ""}`);
      const got = r.ok as Range;
      assert.deepEqual(entriesHex(got.entries), c.entries, t.name);
      assert.equal(got.keyCount, BigInt(c.key_count!));
      seen++;
    }
    let before = 0;
    for (const c of t.chunks) {
      const r = run(root, "chunk", c, unhex(c.bytes));
      assert.ok("ok" in r, `${t.name}: chunk ${c.index} rejected: ${"err" in r ? r.err : ""}`);
      const got = r.ok as Chunk;
      assert.deepEqual(
        [got.index, got.chunkCount, got.keyCount, got.keysBefore, got.keyHeight, got.capacity],
        [BigInt(c.index!), BigInt(c.chunk_count!), BigInt(c.key_count!), BigInt(before), c.key_height, t.capacity],
      );
      assert.deepEqual(entriesHex(got.entries), t.entries.slice(before, before + c.len!));
      before += c.len!;
      seen++;
    }
    assert.equal(before, t.key_count, `${t.name}: chunks cover the entries`);
  }
  assert.ok(seen >= 50, `only ${seen} positive vectors`);
});

test("every negative vector is rejected with its error kind", () => {
  const kinds = new Set<string>();
  let seen = 0;
  for (const t of file.trees) {
    for (const n of t.negative) {
      const r = run(unhex(t.root), n.kind!, n, unhex(n.proof));
      assert.deepEqual(r, { err: n.error }, `${t.name}: ${n.description}`);
      kinds.add(n.error!);
      seen++;
    }
  }
  assert.deepEqual([...kinds].sort(), [...ERROR_KINDS].sort());
  assert.ok(seen >= 30);
});

test("every byte of every valid vector flipped (xor 0xff), every truncation and extensions are rejected", () => {
  let tried = 0;
  for (const v of validVectors(file)) {
    assert.ok("ok" in run(v.root, v.kind, v.c, v.proof), `${v.name}: the unmodified vector`);
    const m = Uint8Array.from(v.proof);
    for (let i = 0; i < m.length; i++) {
      for (const x of [0xff]) {
        m[i]! ^= x;
        assert.ok("err" in run(v.root, v.kind, v.c, m), `${v.name}: accepted with byte ${i} xor ${x}`);
        m[i]! ^= x;
        tried++;
      }
    }
    for (let n = 0; n < v.proof.length; n++) {
      assert.ok("err" in run(v.root, v.kind, v.c, v.proof.slice(0, n)), `${v.name}: truncated to ${n}`);
      tried++;
    }
    for (const b of [0, 1]) {
      const longer = Uint8Array.of(...v.proof, b);
      assert.deepEqual(run(v.root, v.kind, v.c, longer), { err: "Decode" }, `${v.name}: extended`);
      tried++;
    }
  }
  assert.ok(tried > 10000, `only ${tried} mutants`);
});
