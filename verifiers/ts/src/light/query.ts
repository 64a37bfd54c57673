/**
 * A trustless query of bavl-abci's "/key" path (docs/chain.md §4): the light client
 * verifies header h+1, whose app hash is the root of the state after block h (h = the
 * height the answer reads), and the answer's bavl membership or absence proof is checked
 * against that root with this package's verifier. The node answering is not trusted.
 */
import { verifyAbsence, verifyMembership } from "../index.js";
import { equalBytes } from "./bytes.js";
import { LightError } from "./errors.js";
import { array, base64, field, int, str, toHex } from "./json.js";
import { LightClient } from "./client.js";
import { Rpc } from "./rpc.js";
import type { Fetch } from "./rpc.js";

export const OP_MEMBERSHIP = "bavl:membership:v1";
export const OP_ABSENCE = "bavl:absence:v1";

export interface QueryOptions {
  rpc: string;
  witnesses: string[];
  trustHeight: bigint;
  trustHash: Uint8Array;
  trustPeriodMs: number;
  key: Uint8Array;
  /** Read the state after this block (default: the latest the node holds). */
  height?: bigint;
  /** Give up waiting for header h+1 after this long (default 30 s). */
  waitMs?: number;
  fetch?: Fetch;
}

export interface QueryResult {
  /** The state after block `height` ... */
  height: bigint;
  /** ... whose root header `height + 1` carries. */
  appHash: Uint8Array;
  present: boolean;
  value: Uint8Array | null;
  keyCount: bigint;
}

interface Answer {
  height: bigint;
  value: Uint8Array;
  opType: string;
  opKey: Uint8Array;
  proof: Uint8Array;
}

async function ask(rpc: Rpc, key: Uint8Array, height: bigint): Promise<Answer> {
  const r = field(await rpc.get(`/abci_query?path=%22%2Fkey%22&data=0x${toHex(key)}&height=${height}&prove=true`), "response");
  const code = field(r, "code") ?? 0;
  if (code !== 0) throw new LightError("Node", `abci_query answered code ${String(code)}: ${String(field(r, "log"))}`);
  const ops = array(field(field(r, "proofOps"), "ops"), "proofOps.ops");
  if (ops.length !== 1) throw new LightError("Answer", `${ops.length} proof ops, want 1`);
  const op = ops[0];
  return {
    height: int(field(r, "height"), "answer height"),
    value: base64(field(r, "value"), "value"),
    opType: str(field(op, "type"), "op type"),
    opKey: base64(field(op, "key"), "op key"),
    proof: base64(field(op, "data"), "op data"),
  };
}

/** Checks an answer for `key` against `root` (the app hash of the verified header). */
export function checkAnswer(root: Uint8Array, key: Uint8Array, a: Answer): { present: boolean; value: Uint8Array | null; keyCount: bigint } {
  if (!equalBytes(a.opKey, key)) throw new LightError("Answer", `the proof op is for key ${toHex(a.opKey)}, not ${toHex(key)}`);
  try {
    if (a.opType === OP_MEMBERSHIP) {
      return { present: true, value: a.value, keyCount: verifyMembership(root, key, a.value, a.proof).keyCount };
    }
    if (a.opType === OP_ABSENCE) {
      if (a.value.length !== 0) throw new LightError("Answer", "an absence proof with a value");
      return { present: false, value: null, keyCount: verifyAbsence(root, key, a.proof).keyCount };
    }
  } catch (e) {
    if (e instanceof LightError) throw e;
    throw new LightError("Answer", `${a.opType} proof: ${e instanceof Error ? e.message : String(e)}`);
  }
  throw new LightError("Answer", `unknown proof op type ${JSON.stringify(a.opType)}`);
}

/** Runs one trustless query (see the module comment). */
export async function trustlessQuery(o: QueryOptions): Promise<QueryResult> {
  const primary = new Rpc(o.rpc, o.fetch);
  const client = await LightClient.start({
    primary,
    witnesses: o.witnesses.map((w) => new Rpc(w, o.fetch)),
    trustHeight: o.trustHeight,
    trustHash: o.trustHash,
    trustPeriodMs: o.trustPeriodMs,
  });
  const a = await ask(primary, o.key, o.height ?? 0n);
  if (a.height <= 0n || (o.height !== undefined && o.height !== 0n && a.height !== o.height)) {
    throw new LightError("Answer", `the answer is for height ${a.height}`);
  }
  // The state after block h is committed to by the app hash of header h+1.
  const deadline = Date.now() + (o.waitMs ?? 30_000);
  while ((await primary.latestHeight()) < a.height + 1n) {
    if (Date.now() > deadline) throw new LightError("Node", `header ${a.height + 1n} did not appear`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const header = await client.verify(a.height + 1n);
  if (header.appHash.length !== 32) throw new LightError("Answer", `header ${header.height} carries a ${header.appHash.length}-byte app hash`);
  return { height: a.height, appHash: header.appHash, ...checkAnswer(header.appHash, o.key, a) };
}
