/**
 * Why the light client refused: a stable `kind` and a message. Every failure of a header,
 * a validator set, a commit or an answer is one of these; a fetch failure is "Node".
 */
export const LIGHT_ERROR_KINDS = [
  "Malformed", // untrusted JSON that does not decode as CometBFT writes it
  "TrustRoot", // the trusted header does not match --trust-hash, or is outside the trust period
  "HeaderHash", // a header does not hash to the block ID its commit signs
  "Validators", // a validator set does not hash to the header's
  "Signatures", // a bad signature, or not enough voting power
  "Chain", // another chain, an old or future time, a height out of order
  "Conflict", // a witness holds another header at the same height
  "Answer", // the query's answer does not verify against the app hash
  "Node", // a node could not be reached or answered with an error
] as const;

export type LightErrorKind = (typeof LIGHT_ERROR_KINDS)[number];

export class LightError extends Error {
  readonly kind: LightErrorKind;
  constructor(kind: LightErrorKind, message: string) {
    super(`${kind}: ${message}`);
    this.name = "LightError";
    this.kind = kind;
  }
}
