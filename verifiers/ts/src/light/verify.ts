/**
 * CometBFT's light-client verification rules (light/verifier.go, v0.38), for one step from
 * a trusted header to a later one:
 *  - the untrusted header belongs to the trusted chain ID, hashes to the block ID its
 *    commit signs, names (validators_hash) the validator set given with it, is later in
 *    height and time than the trusted one, and is not from the future (clock drift);
 *  - the trusted header is within the trust period;
 *  - adjacent (height + 1): its validators hash is the trusted next_validators_hash;
 *    non-adjacent (skipping): validators the trusted header named as next signed it with
 *    more than 1/3 of their power (the trust level), else the caller bisects;
 *  - validators of the untrusted header signed it with more than 2/3 of their power.
 * Signatures are Ed25519 over the canonical precommit sign bytes, verified with
 * @noble/curves (ZIP-215 rules, as CometBFT's curve25519-voi); a bad signature of a
 * validator counted is a failure, as in CometBFT.
 */
import { ed25519 } from "@noble/curves/ed25519.js";
import { equalBytes } from "./bytes.js";
import type { Header, Validator } from "./encode.js";
import { headerHash, precommitSignBytes, timeMs, validatorsHash } from "./encode.js";
import { LightError } from "./errors.js";
import type { SignedHeader } from "./json.js";
import { toHex } from "./json.js";

/** A header the client trusts, with the validator set it names as next. */
export interface Trusted {
  header: Header;
  nextValidators: Validator[];
}

/** An untrusted header, its commit and its validator set. */
export interface LightBlock {
  signed: SignedHeader;
  validators: Validator[];
}

export interface Clock {
  nowMs: number;
  trustPeriodMs: number;
  maxClockDriftMs: number;
}

/** Thrown when the trusted validators signed less than 1/3: verify a header in between first. */
export class NotEnoughTrust extends LightError {
  constructor(message: string) {
    super("Signatures", message);
  }
}

/** Checks what a light block says about itself: chain, commit height, hashes. */
export function checkBasics(chainId: string, lb: LightBlock): void {
  const { header, commit } = lb.signed;
  if (header.chainId !== chainId) throw new LightError("Chain", `header of chain ${header.chainId}, want ${chainId}`);
  if (commit.height !== header.height) throw new LightError("Malformed", "the commit is for another height");
  const computed = headerHash(header);
  if (!equalBytes(computed, commit.blockId.hash)) {
    throw new LightError("HeaderHash", `header ${header.height} hashes to ${toHex(computed)}, its commit signs ${toHex(commit.blockId.hash)}`);
  }
  if (!equalBytes(validatorsHash(lb.validators), header.validatorsHash)) {
    throw new LightError("Validators", `the validator set of height ${header.height} is not the one its header names`);
  }
}

/**
 * The power of `vals` whose valid precommits for the block the commit carries.
 * aligned: signature i is validator i's (the header's own set); else matched by address.
 */
export function signedPower(chainId: string, sh: SignedHeader, vals: Validator[], aligned: boolean): bigint {
  const { commit } = sh;
  if (aligned && commit.signatures.length !== vals.length) {
    throw new LightError("Signatures", `${commit.signatures.length} signatures for ${vals.length} validators`);
  }
  const seen = new Set<string>();
  let power = 0n;
  commit.signatures.forEach((sig, i) => {
    if (sig.flag !== 2) return; // absent or nil: no power for this block
    const addr = toHex(sig.address);
    const val = aligned ? vals[i] : vals.find((v) => equalBytes(v.address, sig.address));
    if (val === undefined) return;
    if (!equalBytes(val.address, sig.address)) throw new LightError("Signatures", `signature ${i} is not validator ${i}'s`);
    if (seen.has(addr)) throw new LightError("Signatures", `validator ${addr} signed twice`);
    seen.add(addr);
    const msg = precommitSignBytes(chainId, commit.height, commit.round, commit.blockId, sig.time);
    let ok = false;
    try {
      ok = sig.signature.length === 64 && ed25519.verify(sig.signature, msg, val.pubKey);
    } catch {
      ok = false;
    }
    if (!ok) throw new LightError("Signatures", `signature ${i} (validator ${addr}) does not verify`);
    power += val.power;
  });
  return power;
}

function total(vals: Validator[]): bigint {
  return vals.reduce((n, v) => n + v.power, 0n);
}

/** One verification step from `trusted` to the later `lb` (see the module comment). */
export function verifyStep(trusted: Trusted, lb: LightBlock, clock: Clock): void {
  const t = trusted.header;
  const u = lb.signed.header;
  if (timeMs(t.time) + clock.trustPeriodMs <= clock.nowMs) {
    throw new LightError("TrustRoot", `the trusted header ${t.height} is older than the trust period`);
  }
  checkBasics(t.chainId, lb);
  if (u.height <= t.height) throw new LightError("Chain", `header ${u.height} is not after the trusted ${t.height}`);
  if (timeMs(u.time) <= timeMs(t.time)) throw new LightError("Chain", `header ${u.height} is not later in time than the trusted one`);
  if (timeMs(u.time) >= clock.nowMs + clock.maxClockDriftMs) throw new LightError("Chain", `header ${u.height} is from the future`);
  if (u.height === t.height + 1n) {
    if (!equalBytes(u.validatorsHash, t.nextValidatorsHash)) {
      throw new LightError("Validators", `header ${u.height} names another validator set than the trusted header's next`);
    }
  } else {
    const trustedPower = signedPower(t.chainId, lb.signed, trusted.nextValidators, false);
    if (trustedPower * 3n <= total(trusted.nextValidators)) {
      throw new NotEnoughTrust(`trusted validators signed ${trustedPower} of ${total(trusted.nextValidators)}`);
    }
  }
  const power = signedPower(t.chainId, lb.signed, lb.validators, true);
  if (power * 3n <= total(lb.validators) * 2n) {
    throw new LightError("Signatures", `header ${u.height}: signed by ${power} of ${total(lb.validators)} voting power, not more than 2/3`);
  }
}
