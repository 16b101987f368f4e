/**
 * Lockgate's client for agent runtimes on Node: open a run as the trusted host, open
 * turns, propose the model's tool calls exactly as it emitted them, and read what the
 * model may see of each — the same protocol, ids and guarantees as the Python SDK.
 */

export {
  connect,
  Gateway,
  KNOWN_WITHIN_MS,
  MAX_CANDIDATE_MESSAGE_BYTES,
  MAX_ENVELOPE_DEPTH,
  OPEN_RETRY_MS,
  Run,
  Turn,
  type ConnectOptions,
  type CredentialsLike,
  type OpenRunOptions,
  type ProposeOptions,
} from "./client.js";
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
