/**
 * Runs in headless Chromium (test/browser.test.ts): checks every vector of
 * docs/vectors/core.json with the package as the browser loads it (ES modules over HTTP,
 * @noble/hashes through an import map) and writes the verdict into the page.
 */
import { ERROR_KINDS } from "../src/index.js";
import { type VFile, run, unhex, validVectors } from "./cases.js";

function check(file: VFile): string[] {
  const failures: string[] = [];
  let accepted = 0;
  for (const v of validVectors(file)) {
    if ("ok" in run(v.root, v.kind, v.c, v.proof)) accepted++;
    else failures.push(`${v.name}: rejected`);
  }
  let rejected = 0;
  for (const t of file.trees) {
    for (const n of t.negative) {
      const r = run(unhex(t.root), n.kind ?? "", n, unhex(n.proof));
      if ("err" in r && r.err === n.error) rejected++;
      else failures.push(`${t.name}: ${n.description}: ${"err" in r ? r.err : "accepted"}`);
    }
  }
  failures.push(`accepted ${accepted} rejected ${rejected} kinds ${ERROR_KINDS.length}`);
  return failures;
}

async function main(): Promise<void> {
  const out = document.getElementById("result");
  if (out === null) return;
  try {
    const file = (await (await fetch("/vectors.json")).json()) as VFile;
    const lines = check(file);
    const ok = lines.length === 1 && typeof (globalThis as { process?: unknown }).process === "undefined";
    out.textContent = `${ok ? "PASS" : "FAIL"} ${lines.join("; ")}`;
  } catch (e) {
    out.textContent = `FAIL ${String(e)}`;
  }
}

void main();
