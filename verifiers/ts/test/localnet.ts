/**
 * The TypeScript trustless query against a running bavl-abci localnet. Not part of
 * `node --test dist/test/*.test.js`: scripts/trustless-query.sh starts the localnet and
 * runs `node --test dist/test/localnet.js` with BAVL_LOCALNET_RPC set to three or more
 * validators' RPC addresses (the first serves the trust root, header 1; the second is the
 * primary; the third the witness). Each test writes its own key. A tampering fetch in
 * front of the primary changes one thing of its answers; each lie must be refused with
 * its kind, and the same wrapper without a lie must pass.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { type Fetch, LightError, trustlessQuery } from "../src/light/index.js";

type J = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const env = process.env["BAVL_LOCALNET_RPC"] ?? "";
const rpc = env.split(",").filter((u) => u !== "");
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

async function result(url: string): Promise<J> {
  const r = (await (await fetch(url)).json()) as J;
  if (r["error"] !== undefined) throw new Error(`${url}: ${JSON.stringify(r["error"])}`);
  return r["result"] as J;
}

async function setup(): Promise<{ trustHash: Uint8Array }> {
  assert.ok(rpc.length >= 3, `BAVL_LOCALNET_RPC must name 3 or more RPC addresses (scripts/trustless-query.sh), got "${env}"`);
  const c = await result(`${rpc[0]}/commit?height=1`);
  return { trustHash: Buffer.from(c["signed_header"]["commit"]["block_id"]["hash"] as string, "hex") };
}

/** Commits key=value (crates/abci/src/tx.rs: 0xB1, one op, 0x01 set, short lengths). */
async function write(key: Uint8Array, value: Uint8Array): Promise<void> {
  const tx = Buffer.concat([Buffer.from([0xb1, 1, 1, key.length]), key, Buffer.from([value.length]), value]);
  const r = await result(`${rpc[0]}/broadcast_tx_commit?tx=0x${hex(tx)}`);
  assert.equal(r["check_tx"]["code"], 0);
  assert.equal(r["tx_result"]["code"] ?? 0, 0);
  // The primary may not hold that block yet, and would answer (correctly, verified) from the
  // state before it: wait for the other nodes as the Go test does. A witness still lagging a
  // block behind the primary's newest is the light client's to wait for (maxBlockLagMs).
  const height = BigInt(r["height"] as string);
  for (const addr of rpc.slice(1)) await waitHeight(addr, height);
}

async function waitHeight(addr: string, height: bigint): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const s = await result(`${addr}/status`).catch(() => undefined);
    if (s !== undefined && BigInt(s["sync_info"]["latest_block_height"] as string) >= height) return;
    assert.ok(Date.now() < deadline, `${addr} has not committed block ${height} after a minute`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const fresh = (p: string) => Buffer.from(p + randomBytes(8).toString("hex"));

function tampering(path: string, edit: (r: J) => void, hits: { n: number }): Fetch {
  return async (url) => {
    const r = await fetch(url);
    const body = (await r.json()) as J;
    if (url.startsWith(rpc[1]!) && url.includes(path) && body["result"] !== undefined) {
      edit(body["result"] as J);
      hits.n++;
    }
    return { ok: r.ok, status: r.status, json: async () => body };
  };
}

const b64flip = (s: string, at: (n: number) => number) => {
  const b = Buffer.from(s, "base64");
  b[at(b.length)]! ^= 0x10;
  return b.toString("base64");
};
const op = (r: J) => r["response"]["proofOps"]["ops"][0] as J;

const lies: [string, string, string, (r: J) => void][] = [
  ["the value", "/abci_query", "Answer", (r) => (r["response"]["value"] = b64flip(r["response"]["value"], (n) => n - 1))],
  ["a proof byte", "/abci_query", "Answer", (r) => (op(r)["data"] = b64flip(op(r)["data"], (n) => n >> 1))],
  ["absence claimed", "/abci_query", "Answer", (r) => {
    op(r)["type"] = "bavl:absence:v1";
    r["response"]["value"] = null;
  }],
  ["an op for another key", "/abci_query", "Answer", (r) => (op(r)["key"] = Buffer.from("another").toString("base64"))],
  ["the app hash in a header", "/commit", "HeaderHash", (r) => {
    if (r["signed_header"]["header"]["height"] !== "1") r["signed_header"]["header"]["app_hash"] = "AB".repeat(32);
  }],
];

test("a key written, then read back verified; a key never written, verified absent", async () => {
  const { trustHash } = await setup();
  const key = fresh("lc-ts-");
  const value = fresh("value-");
  await write(key, value);
  const base = { rpc: rpc[1]!, witnesses: [rpc[2]!], trustHeight: 1n, trustHash, trustPeriodMs: 86_400_000 };
  const r = await trustlessQuery({ ...base, key });
  assert.equal(r.present, true);
  assert.equal(hex(r.value!), hex(value));
  const a = await trustlessQuery({ ...base, key: fresh("lc-ts-never-written-") });
  assert.equal(a.present, false);
  assert.equal(a.value, null);
});

test("every lie of the primary is refused with its kind", async () => {
  const { trustHash } = await setup();
  const key = fresh("lc-ts-tamper-");
  await write(key, fresh("value-"));
  const base = { rpc: rpc[1]!, witnesses: [rpc[2]!], trustHeight: 1n, trustHash, trustPeriodMs: 86_400_000, key };
  const honest = { n: 0 };
  await trustlessQuery({ ...base, fetch: tampering("/nothing", () => {}, honest) });
  for (const [name, path, kind, edit] of lies) {
    const hits = { n: 0 };
    await assert.rejects(
      trustlessQuery({ ...base, fetch: tampering(path, edit, hits) }),
      (e: unknown) => e instanceof LightError && e.kind === kind,
      `${name}: want ${kind}`,
    );
    assert.ok(hits.n > 0, `${name}: the lie was never told`);
  }
});

test("a wrong trust hash is refused", async () => {
  const { trustHash } = await setup();
  const bad = Uint8Array.from(trustHash);
  bad[0]! ^= 1;
  await assert.rejects(
    trustlessQuery({ rpc: rpc[1]!, witnesses: [rpc[2]!], trustHeight: 1n, trustHash: bad, trustPeriodMs: 86_400_000, key: Buffer.from("k") }),
    (e: unknown) => e instanceof LightError && e.kind === "TrustRoot",
  );
});
