/**
 * A CometBFT RPC client over fetch (browsers and Node.js 18+): the JSON-RPC `result` of a
 * GET, or a LightError "Node". What it returns is untrusted and decoded by json.ts.
 */
import { LightError } from "./errors.js";
import { array, field, int, signedHeader, validator } from "./json.js";
import type { SignedHeader } from "./json.js";
import type { Validator } from "./encode.js";

export type Fetch = (url: string) => Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>;

export class Rpc {
  constructor(
    readonly url: string,
    private readonly fetchFn: Fetch = (u) => fetch(u),
  ) {}

  async get(path: string): Promise<unknown> {
    let body: unknown;
    try {
      const r = await this.fetchFn(this.url.replace(/\/+$/, "") + path);
      body = await r.json();
    } catch (e) {
      throw new LightError("Node", `${this.url}${path}: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (typeof body !== "object" || body === null) throw new LightError("Node", `${this.url}${path}: not a JSON-RPC answer`);
    const err = (body as Record<string, unknown>)["error"];
    if (err !== undefined) throw new LightError("Node", `${this.url}${path}: ${JSON.stringify(err)}`);
    return field(body, "result");
  }

  async latestHeight(): Promise<bigint> {
    return int(field(field(await this.get("/status"), "sync_info"), "latest_block_height"), "latest_block_height");
  }

  async signedHeader(height: bigint): Promise<SignedHeader> {
    const sh = signedHeader(field(await this.get(`/commit?height=${height}`), "signed_header"));
    if (sh.header.height !== height) throw new LightError("Malformed", `asked header ${height}, got ${sh.header.height}`);
    return sh;
  }

  /** The whole validator set at `height`, in the set's order, every page. */
  async validators(height: bigint): Promise<Validator[]> {
    const out: Validator[] = [];
    for (let page = 1; page <= 100; page++) {
      const r = await this.get(`/validators?height=${height}&page=${page}&per_page=100`);
      const list = array(field(r, "validators"), "validators");
      const all = int(field(r, "total"), "validators total");
      list.forEach((v, i) => out.push(validator(v, out.length + i)));
      if (BigInt(out.length) >= all || list.length === 0) {
        if (BigInt(out.length) !== all) throw new LightError("Malformed", `validators: ${out.length} of ${all}`);
        return out;
      }
    }
    throw new LightError("Malformed", "validators: more than 100 pages");
  }
}
