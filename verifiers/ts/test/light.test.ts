/**
 * The light client offline, on RPC results captured from a real CometBFT v0.38.26 localnet
 * (test/fixtures/light-localnet.json): the encodings reproduce CometBFT's own hashes (each
 * header hashes to the block ID its validators signed, each validator set to the hash its
 * header names), a real commit verifies, adjacent and skipping, and every single lie is
 * refused with its kind: a signature byte, the app hash, a voting power, a chain ID, too
 * few signers, an expired trust period, a header from the future, a wrong trust hash.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  type Clock,
  LightError,
  type LightBlock,
  type Trusted,
  headerHash,
  parseTime,
  signedHeader,
  validator,
  validatorsHash,
  verifyStep,
} from "../src/light/index.js";
import { LightClient, Rpc } from "../src/light/index.js";

type J = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const fx = JSON.parse(readFileSync(new URL("../../test/fixtures/light-localnet.json", import.meta.url), "utf8")) as J;
const copy = (): J => structuredClone(fx) as J;

function vals(r: J) {
  return (r["validators"] as unknown[]).map(validator);
}
function trusted(f: J): Trusted {
  return { header: signedHeader(f["commit_1"]["signed_header"]).header, nextValidators: vals(f["validators_2"]) };
}
function block(f: J, which: "h" | "2"): LightBlock {
  const validators = vals(which === "h" ? f["validators_h"] : f["validators_2"]);
  return { signed: signedHeader(f[`commit_${which}`]["signed_header"]), validators };
}
function clock(f: J): Clock {
  const t = parseTime(f["commit_h"]["signed_header"]["header"]["time"]);
  return { nowMs: Number(t.seconds) * 1000 + 5_000, trustPeriodMs: 3_600_000, maxClockDriftMs: 10_000 };
}
function refused(kind: string, fn: () => void, what = "") {
  assert.throws(fn, (e: unknown) => e instanceof LightError && e.kind === kind, `${what}: want ${kind}`);
}
const hexOf = (b: Uint8Array) => Buffer.from(b).toString("hex").toUpperCase();

test("headers hash to the block IDs CometBFT signed; validator sets to their headers' hashes", () => {
  for (const c of ["commit_1", "commit_2", "commit_h"]) {
    const sh = signedHeader(fx[c]["signed_header"]);
    assert.equal(hexOf(headerHash(sh.header)), fx[c]["signed_header"]["commit"]["block_id"]["hash"], c);
  }
  assert.equal(hexOf(validatorsHash(vals(fx["validators_h"]))), fx["commit_h"]["signed_header"]["header"]["validators_hash"]);
});

test("a real commit verifies, adjacent and skipping", () => {
  verifyStep(trusted(fx), block(fx, "2"), clock(fx));
  verifyStep(trusted(fx), block(fx, "h"), clock(fx));
});

test("every lie is refused with its kind", () => {
  const cases: [string, string, (f: J) => void][] = [
    ["a signature byte", "Signatures", (f) => {
      const s = f["commit_h"]["signed_header"]["commit"]["signatures"][1];
      const b = Buffer.from(s["signature"], "base64");
      b[10]! ^= 1;
      s["signature"] = b.toString("base64");
    }],
    ["the app hash", "HeaderHash", (f) => (f["commit_h"]["signed_header"]["header"]["app_hash"] = "AB".repeat(32))],
    ["a voting power", "Validators", (f) => (f["validators_h"]["validators"][0]["voting_power"] = "11")],
    ["a validator's key", "Validators", (f) => {
      const v = f["validators_h"]["validators"];
      [v[0]["pub_key"], v[1]["pub_key"]] = [v[1]["pub_key"], v[0]["pub_key"]];
    }],
    ["the chain ID", "Chain", (f) => (f["commit_h"]["signed_header"]["header"]["chain_id"] = "another")],
    ["two of four signers", "Signatures", (f) => {
      for (const s of f["commit_h"]["signed_header"]["commit"]["signatures"].slice(0, 2)) s["block_id_flag"] = 1;
    }],
    ["a signature moved to another validator", "Signatures", (f) => {
      const s = f["commit_h"]["signed_header"]["commit"]["signatures"];
      [s[0]["signature"], s[1]["signature"]] = [s[1]["signature"], s[0]["signature"]];
    }],
    ["the commit's round", "Signatures", (f) => (f["commit_h"]["signed_header"]["commit"]["round"] = 1)],
    ["a vote's time", "Signatures", (f) => (f["commit_h"]["signed_header"]["commit"]["signatures"][0]["timestamp"] = "2026-01-01T00:00:00Z")],
  ];
  for (const [name, kind, lie] of cases) {
    const f = copy();
    lie(f);
    refused(kind, () => verifyStep(trusted(f), block(f, "h"), clock(f)), name);
  }
});

test("the trust period and the clock bound what is accepted", () => {
  const c = clock(fx);
  refused("TrustRoot", () => verifyStep(trusted(fx), block(fx, "h"), { ...c, nowMs: c.nowMs + 2 * c.trustPeriodMs }));
  refused("Chain", () => verifyStep(trusted(fx), block(fx, "h"), { ...c, nowMs: c.nowMs - 60_000 }));
});

test("an adjacent header must name the trusted next validator set", () => {
  const f = copy();
  const t = trusted(f);
  t.header = { ...t.header, nextValidatorsHash: new Uint8Array(32) };
  refused("Validators", () => verifyStep(t, block(f, "2"), clock(f)));
});

test("the light client refuses a trust hash its header does not have", async () => {
  const fetch = async (url: string) => ({
    ok: true,
    status: 200,
    json: async () => ({ result: url.includes("/commit") ? fx["commit_1"] : fx["validators_2"] }),
  });
  const good = Buffer.from(fx["commit_1"]["signed_header"]["commit"]["block_id"]["hash"], "hex");
  const o = { primary: new Rpc("http://x", fetch), witnesses: [new Rpc("http://y", fetch)], trustHeight: 1n, trustPeriodMs: 1e12 };
  await LightClient.start({ ...o, trustHash: good });
  const bad = Uint8Array.from(good);
  bad[0]! ^= 1;
  await assert.rejects(LightClient.start({ ...o, trustHash: bad }), (e: unknown) => e instanceof LightError && e.kind === "TrustRoot");
});

/** A node serving the fixture; `behind` answers how far its chain reaches at each call. */
function node(reach: () => bigint) {
  const h = BigInt(fx["commit_h"]["signed_header"]["header"]["height"]);
  return async (url: string) => {
    const at = BigInt(/height=(\d+)/.exec(url)?.[1] ?? "0");
    const top = reach();
    let body: J;
    if (url.includes("/status")) body = { result: { sync_info: { latest_block_height: String(top) } } };
    else if (at > top) body = { error: { code: -32603, message: "Internal error", data: `height ${at} must be less than or equal to the current blockchain height ${top}` } };
    else if (url.includes("/commit")) body = { result: at === 1n ? fx["commit_1"] : at === h ? fx["commit_h"] : {} };
    else body = { result: at === 2n ? fx["validators_2"] : fx["validators_h"] };
    return { ok: true, status: 200, json: async () => body };
  };
}

test("a witness a block behind the primary is waited for; one that stays behind is a Node failure", async () => {
  const h = BigInt(fx["commit_h"]["signed_header"]["header"]["height"]);
  const t = parseTime(fx["commit_h"]["signed_header"]["header"]["time"]);
  const o = {
    primary: new Rpc("http://primary", node(() => h)),
    trustHeight: 1n,
    trustHash: Buffer.from(fx["commit_1"]["signed_header"]["commit"]["block_id"]["hash"], "hex"),
    trustPeriodMs: 1e12,
    now: () => Number(t.seconds) * 1000 + 5_000,
  };
  let calls = 0; // the witness reaches h on its fourth answer
  const catching = new Rpc("http://witness", node(() => (++calls > 3 ? h : h - 1n)));
  const c = await LightClient.start({ ...o, witnesses: [catching], maxBlockLagMs: 5_000 });
  assert.equal((await c.verify(h)).height, h);
  assert.ok(calls > 3, "the witness was asked again");
  const stuck = new Rpc("http://stuck", node(() => h - 1n));
  const s = await LightClient.start({ ...o, witnesses: [stuck], maxBlockLagMs: 300 });
  await assert.rejects(s.verify(h), (e: unknown) => e instanceof LightError && e.kind === "Node" && /still behind/.test(e.message));
});
