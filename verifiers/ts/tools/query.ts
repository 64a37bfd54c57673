/**
 * bavl-query in TypeScript (Node.js): a trustless read of one key of a bavl-abci chain,
 * the same options and output as the Go command (verifiers/go/cmd/bavl-query).
 *
 * Usage: node dist/tools/query.js --rpc URL --witness URL[,URL] --trust-height H
 *          --trust-hash HEX --key HEX [--height H] [--trust-period-hours N]
 * Exit status: 0 verified, 1 refused or failed (the reason on stderr), 2 usage.
 */
import { parseArgs } from "node:util";
import { LightError, trustlessQuery } from "../src/light/index.js";

const USAGE = `bavl-query (TypeScript): a trustless read of one key of a bavl-abci chain

  node dist/tools/query.js --rpc URL --witness URL --trust-height H --trust-hash HEX --key HEX
      [--height H] [--trust-period-hours N (default 168)]

The light client starts from the trusted header (H, HEX), verifies header h+1 (h = the
height the abci_query answer reads; header h+1 carries the root of the state after block h)
by skipping verification with bisection, checks it against every --witness, and verifies
the answer's bavl proof against that app hash. Prints height, header, app_hash, key, value
(hex, or "absent"), keys, and "verified".
`;

function hexArg(name: string, s: string | undefined, min: number, max: number): Uint8Array {
  if (s === undefined || s.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(s)) throw new Error(`${name}: not hex`);
  const b = Uint8Array.from(s.match(/../g) ?? [], (x) => parseInt(x, 16));
  if (b.length < min || b.length > max) throw new Error(`${name}: ${b.length} bytes, want ${min}..=${max}`);
  return b;
}

function posInt(name: string, s: string | undefined): bigint {
  if (s === undefined || !/^\d{1,18}$/.test(s) || BigInt(s) <= 0n) throw new Error(`${name}: a positive integer is required`);
  return BigInt(s);
}

async function main(): Promise<number> {
  let opts;
  try {
    const { values } = parseArgs({
      options: {
        rpc: { type: "string" },
        witness: { type: "string", multiple: true },
        "trust-height": { type: "string" },
        "trust-hash": { type: "string" },
        "trust-period-hours": { type: "string", default: "168" },
        key: { type: "string" },
        height: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    });
    if (values.help) {
      process.stderr.write(USAGE);
      return 0;
    }
    if (values.rpc === undefined) throw new Error("--rpc is required");
    const witnesses = (values.witness ?? []).flatMap((w) => w.split(",")).filter((w) => w !== "");
    if (witnesses.length === 0) throw new Error("--witness is required (the primary's headers are checked against it)");
    opts = {
      rpc: values.rpc,
      witnesses,
      trustHeight: posInt("--trust-height", values["trust-height"]),
      trustHash: hexArg("--trust-hash", values["trust-hash"], 32, 32),
      trustPeriodMs: Number(posInt("--trust-period-hours", values["trust-period-hours"])) * 3_600_000,
      key: hexArg("--key", values.key, 1, 1024),
      ...(values.height === undefined ? {} : { height: posInt("--height", values.height) }),
    };
  } catch (e) {
    process.stderr.write(`bavl-query: ${e instanceof Error ? e.message : String(e)} (see --help)\n`);
    return 2;
  }
  try {
    const r = await trustlessQuery(opts);
    const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
    process.stdout.write(
      `height=${r.height}\nheader=${r.height + 1n}\napp_hash=${hex(r.appHash).toUpperCase()}\nkey=${hex(opts.key)}\n` +
        `value=${r.value === null ? "absent" : hex(r.value)}\nkeys=${r.keyCount}\nverified\n`,
    );
    return 0;
  } catch (e) {
    const why = e instanceof LightError ? e.message : `unexpected: ${e instanceof Error ? e.stack : String(e)}`;
    process.stderr.write(`bavl-query: NOT VERIFIED: ${why}\n`);
    return 1;
  }
}

process.exitCode = await main();
