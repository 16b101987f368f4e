/**
 * Lockgate's client for agent runtimes on Node: open a run as the trusted host, open
 * turns, propose the model's tool calls exactly as it emitted them, and read what the
 * model may see of each — the same protocol, ids and guarantees as the Python SDK.
 */

export { connect, type ConnectOptions, type CredentialsLike } from "./connect.js";
export { MAX_CANDIDATE_MESSAGE_BYTES, MAX_ENVELOPE_DEPTH } from "./encoding.js";
export { Gateway, type OpenRunOptions } from "./gateway.js";
export { OPEN_RETRY_MS } from "./requests.js";
export { KNOWN_WITHIN_MS, Run, Turn, type ProposeOptions } from "./run.js";
export { DEFAULT_URL, findLocal, loadCredentials, type Credentials, type Local } from "./discovery.js";
export {
  CandidateTooLarge,
  ClientError,
  InvalidCandidate,
  OutcomeSettled,
  PermissionDenied,
  Refused,
  ResponseTimeout,
  Unauthorized,
  UnknownCandidate,
} from "./errors.js";
export { callDigest, callIdFor, intentIdFor, isSubjectToken, isWellFormed, reusedCallIdIntent } from "./ids.js";
export type * from "./wire/messages.js";
