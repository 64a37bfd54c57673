/**
 * The six stable error kinds of docs/design.md §3 ("Order of checks and error kinds"):
 * every bavl verifier, in any language, reports the same kind for the same input.
 */
export const ERROR_KINDS = [
  "Input",
  "Decode",
  "WrongKind",
  "Structure",
  "RootMismatch",
  "WrongIndex",
] as const;

export type ErrorKind = (typeof ERROR_KINDS)[number];

/** Every error the verifiers throw. `kind` is the contract; the message is informative. */
export class VerifyError extends Error {
  readonly kind: ErrorKind;
  /** Byte offset of a Decode error, else -1. */
  readonly at: number;
  constructor(kind: ErrorKind, message: string, at = -1) {
    super(at >= 0 ? `${kind}: ${message} at byte ${at}` : `${kind}: ${message}`);
    this.name = "VerifyError";
    this.kind = kind;
    this.at = at;
  }
}

export function decodeError(at: number, message: string): VerifyError {
  return new VerifyError("Decode", message, at);
}
