/**
 * `@bavl/verifier/light`: a CometBFT v0.38 light client and trustless queries of a
 * bavl-abci chain, for browsers and Node.js (fetch, no Node-only APIs). It verifies
 * headers from a trusted one (hash and validator set hashes, +2/3 Ed25519 precommit
 * signatures, skipping verification with bisection, witnesses), then the bavl proof of an
 * ABCI query against the verified app hash. See docs/verifiers.md.
 */
export { LIGHT_ERROR_KINDS, LightError, type LightErrorKind } from "./errors.js";
export { headerHash, validatorsHash, precommitSignBytes, merkleRoot, parseTime } from "./encode.js";
export type { BlockId, Header, Time, Validator } from "./encode.js";
export { signedHeader, validator } from "./json.js";
export type { SignedHeader, Commit, CommitSig } from "./json.js";
export { checkBasics, signedPower, verifyStep, NotEnoughTrust, type Trusted, type LightBlock, type Clock } from "./verify.js";
export { LightClient, type LightClientOptions } from "./client.js";
export { Rpc, type Fetch } from "./rpc.js";
export { trustlessQuery, checkAnswer, OP_MEMBERSHIP, OP_ABSENCE, type QueryOptions, type QueryResult } from "./query.js";
