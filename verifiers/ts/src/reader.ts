import { decodeError } from "./errors.js";

/**
 * A cursor over untrusted bytes: never reads past its array; every length it returns has
 * been checked against the bytes left. Varints are minimal unsigned LEB128 of at most 64
 * bits, returned as bigint.
 */
export class Reader {
  pos = 0;
  constructor(readonly bytes: Uint8Array) {}

  remaining(): number {
    return this.bytes.length - this.pos;
  }

  u8(): number {
    const b = this.bytes[this.pos];
    if (b === undefined) throw decodeError(this.pos, "input truncated");
    this.pos += 1;
    return b;
  }

  take(n: bigint): Uint8Array {
    if (n > BigInt(this.remaining())) throw decodeError(this.pos, "input truncated");
    const s = this.bytes.subarray(this.pos, this.pos + Number(n));
    this.pos += Number(n);
    return s;
  }

  digest(): Uint8Array {
    return this.take(32n);
  }

  varint(): bigint {
    const start = this.pos;
    let v = 0n;
    for (let i = 0; i < 10; i++) {
      const b = this.u8();
      if (i === 9 && b > 1) throw decodeError(start, "malformed varint");
      v |= BigInt(b & 0x7f) << BigInt(7 * i);
      if ((b & 0x80) === 0) {
        if (i > 0 && b === 0) throw decodeError(start, "malformed varint");
        return v;
      }
    }
    throw decodeError(start, "malformed varint");
  }

  varintIn(min: bigint, max: bigint, what: string): bigint {
    const at = this.pos;
    const v = this.varint();
    if (v < min || v > max) throw decodeError(at, `${what} = ${v} out of range`);
    return v;
  }

  lengthPrefixed(max: bigint, what: string): Uint8Array {
    return this.take(this.varintIn(0n, max, what));
  }
}
