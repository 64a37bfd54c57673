/**
 * The package in a real browser: serves the built ES modules, its npm dependencies
 * (@noble/hashes; for the light client @noble/curves and @bufbuild/protobuf), the vectors
 * and the light client's captured CometBFT headers over loopback HTTP, loads a page in
 * headless Chromium (Debian's `chromium`,
 * installed by scripts/install-verifier-tools.sh; CHROMIUM overrides the binary) and reads
 * the verdict the page wrote, with --dump-dom.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, normalize, sep } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { vectorsUrl } from "./vectors.js";

const pkg = fileURLToPath(new URL("../../", import.meta.url));
const modules = fileURLToPath(new URL("../../node_modules/", import.meta.url));
const lightFixture = new URL("../../test/fixtures/light-localnet.json", import.meta.url);

const IMPORTS = {
  "@noble/hashes/": "/modules/@noble/hashes/",
  "@noble/curves/": "/modules/@noble/curves/",
  "@bufbuild/protobuf/wire": "/modules/@bufbuild/protobuf/dist/esm/wire/index.js",
};
const page = (script: string) => `<!doctype html><html><head><meta charset="utf-8">
<script type="importmap">${JSON.stringify({ imports: IMPORTS })}</script>
<script type="module" src="/dist/test/${script}"></script></head>
<body><pre id="result">PENDING</pre></body></html>`;

const TYPES: Record<string, string> = { ".js": "text/javascript", ".json": "application/json" };

/** Maps a URL path to a file under `base`, refusing to leave it. */
function under(base: string, rest: string): string | null {
  const p = normalize(base + rest);
  return p.startsWith(base.endsWith(sep) ? base : base + sep) ? p : null;
}

function resolve(path: string): string | null {
  if (path === "/vectors.json") return fileURLToPath(vectorsUrl);
  if (path === "/light.json") return fileURLToPath(lightFixture);
  if (path.startsWith("/dist/")) return under(pkg + "dist", path.slice("/dist".length));
  if (path.startsWith("/modules/")) return under(modules.replace(/\/$/, ""), path.slice("/modules".length));
  return null;
}

function chromium(url: string): Promise<string> {
  const bin = process.env.CHROMIUM ?? "chromium";
  const args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--virtual-time-budget=60000", "--dump-dom", url];
  return new Promise((ok, fail) => {
    execFile(bin, args, { timeout: 120_000, maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      if (err) fail(new Error(`${bin} failed (install it: bash scripts/install-verifier-tools.sh): ${err.message}\n${stderr}`));
      else ok(stdout);
    });
  });
}

/** Serves the page running `script` and returns the verdict it wrote. */
async function verdictOf(script: string): Promise<string> {
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    if (path === "/page.html") {
      res.writeHead(200, { "content-type": "text/html" }).end(page(script));
      return;
    }
    const file = resolve(path);
    if (file === null) {
      res.writeHead(404).end();
      return;
    }
    readFile(file).then(
      (body) => res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body),
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  try {
    const { port } = server.address() as AddressInfo;
    const dom = await chromium(`http://127.0.0.1:${port}/page.html`);
    return /<pre id="result">([^<]*)<\/pre>/.exec(dom)?.[1] ?? `no verdict in: ${dom.slice(0, 500)}`;
  } finally {
    server.close();
  }
}

test("the verifier passes every vector in headless Chromium", async (t) => {
  const verdict = await verdictOf("browser-page.js");
  t.diagnostic(verdict);
  assert.match(verdict, /^PASS accepted \d+ rejected \d+ kinds 6$/, verdict);
  const [, accepted, rejected] = /accepted (\d+) rejected (\d+)/.exec(verdict) ?? [];
  assert.ok(Number(accepted) >= 50 && Number(rejected) >= 30, verdict);
});

test("the light client verifies a real CometBFT commit and refuses a forged one in headless Chromium", async (t) => {
  const verdict = await verdictOf("light-page.js");
  t.diagnostic(verdict);
  assert.equal(verdict, "PASS hashes 3 verified 2 refused 2", verdict);
});
