/**
 * Runs in headless Chromium (test/browser.test.ts): the light client as the browser loads
 * it (ES modules over HTTP, @noble/curves and @bufbuild/protobuf through an import map) on
 * the CometBFT headers captured in test/fixtures/light-localnet.json: the three headers hash
 * to their signed block IDs, header 2 (adjacent) and H (skipping) verify from header 1,
 * and a flipped signature and a changed app hash are refused. Writes the verdict into the page.
 */
import { LightError, headerHash, parseTime, signedHeader, validator, verifyStep } from "../src/light/index.js";

type J = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const hexOf = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("").toUpperCase();

function check(fx: J): string {
  let hashes = 0;
  for (const c of ["commit_1", "commit_2", "commit_h"]) {
    if (hexOf(headerHash(signedHeader(fx[c]["signed_header"]).header)) === fx[c]["signed_header"]["commit"]["block_id"]["hash"]) hashes++;
  }
  const t = parseTime(fx["commit_h"]["signed_header"]["header"]["time"]);
  const clock = { nowMs: Number(t.seconds) * 1000 + 5_000, trustPeriodMs: 3_600_000, maxClockDriftMs: 10_000 };
  const trusted = (f: J) => ({
    header: signedHeader(f["commit_1"]["signed_header"]).header,
    nextValidators: (f["validators_2"]["validators"] as unknown[]).map(validator),
  });
  const step = (f: J, which: string, vals: string) =>
    verifyStep(trusted(f), { signed: signedHeader(f[which]["signed_header"]), validators: (f[vals]["validators"] as unknown[]).map(validator) }, clock);
  let verified = 0;
  step(fx, "commit_2", "validators_2");
  verified++;
  step(fx, "commit_h", "validators_h");
  verified++;
  let refused = 0;
  const lies: ((f: J) => void)[] = [
    (f) => {
      const s = f["commit_h"]["signed_header"]["commit"]["signatures"][0];
      const b = Uint8Array.from(atob(s["signature"]), (c) => c.charCodeAt(0));
      b[5]! ^= 1;
      s["signature"] = btoa(String.fromCharCode(...b));
    },
    (f) => (f["commit_h"]["signed_header"]["header"]["app_hash"] = "AB".repeat(32)),
  ];
  for (const lie of lies) {
    const f = structuredClone(fx) as J;
    lie(f);
    try {
      step(f, "commit_h", "validators_h");
    } catch (e) {
      if (e instanceof LightError) refused++;
    }
  }
  return `hashes ${hashes} verified ${verified} refused ${refused}`;
}

async function main(): Promise<void> {
  const out = document.getElementById("result");
  if (out === null) return;
  try {
    const fx = (await (await fetch("/light.json")).json()) as J;
    const line = check(fx);
    const ok = line === "hashes 3 verified 2 refused 2" && typeof (globalThis as { process?: unknown }).process === "undefined";
    out.textContent = `${ok ? "PASS" : "FAIL"} ${line}`;
  } catch (e) {
    out.textContent = `FAIL ${String(e)}`;
  }
}

void main();
