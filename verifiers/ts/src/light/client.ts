/**
 * The light client: from a trusted header (height and hash, obtained out of band) to a
 * verified later header, by skipping verification with bisection (verify.ts), each
 * verified header cross-checked against every witness (a witness holding another header at
 * that height is a conflict, and nothing is verified).
 */
import { equalBytes } from "./bytes.js";
import type { Header } from "./encode.js";
import { headerHash, validatorsHash } from "./encode.js";
import { LightError } from "./errors.js";
import { toHex } from "./json.js";
import type { SignedHeader } from "./json.js";
import type { Rpc } from "./rpc.js";
import type { Clock, LightBlock, Trusted } from "./verify.js";
import { NotEnoughTrust, verifyStep } from "./verify.js";

export interface LightClientOptions {
  primary: Rpc;
  witnesses: Rpc[];
  trustHeight: bigint;
  trustHash: Uint8Array;
  trustPeriodMs: number;
  maxClockDriftMs?: number;
  /** How long a witness behind the primary is waited for before it counts as down
   * (default 10 s, CometBFT's maxBlockLag): a witness may not hold the primary's newest block yet. */
  maxBlockLagMs?: number;
  now?: () => number;
}

export class LightClient {
  private constructor(
    private readonly o: LightClientOptions,
    readonly root: Trusted,
  ) {}

  /** Fetches the trusted header from the primary and checks it against the trust hash. */
  static async start(o: LightClientOptions): Promise<LightClient> {
    if (o.witnesses.length === 0) throw new LightError("TrustRoot", "at least one witness is needed");
    const sh = await o.primary.signedHeader(o.trustHeight);
    if (!equalBytes(headerHash(sh.header), o.trustHash)) {
      throw new LightError("TrustRoot", `header ${o.trustHeight} hashes to ${toHex(headerHash(sh.header))}, the trusted hash is ${toHex(o.trustHash)}`);
    }
    const c = new LightClient(o, { header: sh.header, nextValidators: [] });
    return new LightClient(o, await c.trusted(sh.header));
  }

  private clock(): Clock {
    return { nowMs: (this.o.now ?? Date.now)(), trustPeriodMs: this.o.trustPeriodMs, maxClockDriftMs: this.o.maxClockDriftMs ?? 10_000 };
  }

  private async trusted(header: Header): Promise<Trusted> {
    const next = await this.o.primary.validators(header.height + 1n);
    if (!equalBytes(validatorsHash(next), header.nextValidatorsHash)) {
      throw new LightError("Validators", `the next validator set of header ${header.height} is not the one it names`);
    }
    return { header, nextValidators: next };
  }

  private async lightBlock(height: bigint): Promise<LightBlock> {
    const [signed, validators] = await Promise.all([this.o.primary.signedHeader(height), this.o.primary.validators(height)]);
    return { signed, validators };
  }

  /** Verifies header `height` (after the trusted one) and returns it. */
  async verify(height: bigint): Promise<Header> {
    if (height < this.root.header.height) throw new LightError("Chain", `header ${height} is below the trusted height ${this.root.header.height}`);
    if (height === this.root.header.height) return this.root.header;
    const header = await this.verifyFrom(this.root, height, 0);
    const hash = headerHash(header);
    for (const w of this.o.witnesses) {
      const theirs = await this.witnessHeader(w, height);
      if (!equalBytes(headerHash(theirs.header), hash)) {
        throw new LightError("Conflict", `witness ${w.url} holds another header ${height} (${toHex(headerHash(theirs.header))}) than the primary (${toHex(hash)})`);
      }
    }
    return header;
  }

  /** The witness's header `height`, waiting (up to maxBlockLagMs, wall clock) while the
   * witness says its latest block is below it. Any other failure is the witness's. */
  private async witnessHeader(w: Rpc, height: bigint): Promise<SignedHeader> {
    const lag = this.o.maxBlockLagMs ?? 10_000;
    const deadline = Date.now() + lag;
    let holdsIt = false; // the witness said it holds `height`: one more try, then its failure stands
    for (;;) {
      try {
        return await w.signedHeader(height);
      } catch (e) {
        if (!(e instanceof LightError) || e.kind !== "Node" || holdsIt) throw e;
        const latest = await w.latestHeight();
        holdsIt = latest >= height;
        if (!holdsIt && Date.now() >= deadline) {
          throw new LightError("Node", `witness ${w.url} is at height ${latest}, still behind header ${height} after ${lag} ms`);
        }
      }
      if (!holdsIt) await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async verifyFrom(trusted: Trusted, height: bigint, depth: number): Promise<Header> {
    const lb = await this.lightBlock(height);
    try {
      verifyStep(trusted, lb, this.clock());
      return lb.signed.header;
    } catch (e) {
      if (!(e instanceof NotEnoughTrust) || depth > 64) throw e;
    }
    const mid = (trusted.header.height + height) / 2n;
    const pivot = await this.trusted(await this.verifyFrom(trusted, mid, depth + 1));
    return this.verifyFrom(pivot, height, depth + 1);
  }
}
