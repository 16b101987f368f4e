/**
 * The wire's JSON, and a candidate's bytes: encoded as the Python SDK encodes them, and
 * refused before sending when intake would not read them or they are too large.
 */

import { CandidateTooLarge, InvalidCandidate, Refused } from "./errors.js";
import { isSubjectToken, isWellFormed } from "./ids.js";
import { REQUIRED, type Candidate, type WireTypes } from "./wire/messages.js";

/** The most a candidate message may hold (the candidates stream's `max_msg_size`). */
export const MAX_CANDIDATE_MESSAGE_BYTES = 2 * 1024 * 1024;
/** Deepest nesting of `{` and `[` intake reads in a candidate's envelope. */
export const MAX_ENVELOPE_DEPTH = 64;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `body` as JSON text's UTF-8 bytes. */
export function encode(body: object): Uint8Array {
  return encoder.encode(JSON.stringify(body));
}

/** `data` as a message of type `kind` when it carries that type's required fields, else `null`. */
export function decodeAs<K extends keyof WireTypes>(kind: K, data: Uint8Array): WireTypes[K] | null {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(data));
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return null;
  }
  const fields = REQUIRED[kind] as readonly string[];
  return fields.every((f) => f in value) ? (value as WireTypes[K]) : null;
}

/**
 * True when the JSON text nests `{`/`[` at most about `limit` deep, decided exactly as
 * intake decides (`lockgate.intake.parsing.nesting_within`): innermost pairs removed
 * `limit` times from the brackets outside strings.
 */
function nestingWithin(json: string, limit: number): boolean {
  let opened = 0;
  for (const c of json) {
    if (c === "{" || c === "[") {
      opened++;
    }
  }
  if (opened <= limit) {
    return true;
  }
  let brackets = "";
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (inString) {
      if (c === "\\") {
        i++;
      } else if (c === '"') {
        inString = false;
      }
    } else if (c === '"') {
      inString = true;
    } else if (c === "{" || c === "}" || c === "[" || c === "]") {
      brackets += c;
    }
  }
  for (let n = 0; n < limit; n++) {
    const shorter = brackets.replaceAll("{}", "").replaceAll("[]", "");
    if (!shorter) {
      return true;
    }
    if (shorter.length === brackets.length) {
      return false;
    }
    brackets = shorter;
  }
  return false;
}

/** The first string in `value` (keys included) that UTF-8 cannot carry, if any. */
function illFormed(value: unknown): string | null {
  if (typeof value === "string") {
    return isWellFormed(value) ? null : value;
  }
  if (Array.isArray(value)) {
    for (const item of value) {
      const found = illFormed(item);
      if (found !== null) {
        return found;
      }
    }
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const found = illFormed(key) ?? illFormed(item);
      if (found !== null) {
        return found;
      }
    }
  }
  return null;
}

/**
 * The candidate's bytes, refused here when intake would not read them or they exceed
 * `maxPayload` (the broker's) or `MAX_CANDIDATE_MESSAGE_BYTES`.
 *
 * @throws Refused the call id is not a subject token (`candidate.malformed`).
 * @throws InvalidCandidate a string holds a lone surrogate, or the candidate nests deeper than intake reads.
 * @throws CandidateTooLarge larger than Lockgate accepts in one message.
 */
export function candidateBytes(candidate: Candidate, maxPayload: number | undefined): Uint8Array {
  if (!isSubjectToken(candidate.call_id)) {
    throw new Refused("candidate.malformed", "call ids must be [A-Za-z0-9_-]{1,64}");
  }
  // UTF-8 cannot carry a lone surrogate: TextEncoder would send U+FFFD instead, other
  // bytes than the model's. Refused as the Python client refuses a string it cannot encode.
  if (illFormed(candidate) !== null) {
    throw new InvalidCandidate("the candidate cannot be encoded: a string holds a lone surrogate");
  }
  let text: string;
  try {
    text = JSON.stringify(candidate);
  } catch (error) {
    throw new InvalidCandidate(`the candidate cannot be encoded: ${String(error)}`);
  }
  // What intake would refuse unread it records under an id of its own, where nobody waits.
  if (!nestingWithin(text, MAX_ENVELOPE_DEPTH)) {
    throw new InvalidCandidate(`intake would not read this candidate: nested deeper than ${MAX_ENVELOPE_DEPTH} levels`);
  }
  const body = encoder.encode(text);
  const limit = Math.min(maxPayload ?? MAX_CANDIDATE_MESSAGE_BYTES, MAX_CANDIDATE_MESSAGE_BYTES);
  if (body.length > limit) {
    throw new CandidateTooLarge(`${body.length} bytes exceed the ${limit} a candidate may have`);
  }
  return body;
}
