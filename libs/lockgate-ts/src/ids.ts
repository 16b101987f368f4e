/**
 * Identities the client computes exactly as Lockgate does (`lockgate.core.ids`,
 * `lockgate.integrations.governed.call_id_for`): the same inputs give the same bytes in
 * either language, so a call retried from Node is the intent Python would name.
 */

import { createHash, randomUUID } from "node:crypto";

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
/** A code point that is a surrogate: in a JavaScript string, only a lone one matches. */
const LONE_SURROGATE = /\p{Cs}/u;

/** True when `value` can stand as one token of a NATS subject (`[A-Za-z0-9_-]{1,64}`). */
export function isSubjectToken(value: string): boolean {
  return TOKEN.test(value);
}

/** True when `text` has no lone surrogate, so UTF-8 can carry it unchanged. */
export function isWellFormed(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}

/**
 * `text` as UTF-8, a lone surrogate written as its own three bytes (Python's
 * `surrogatepass`): the ids of hostile text stay the ones Python computes. Well-formed
 * text encodes exactly as with plain UTF-8.
 */
export function utf8SurrogatePass(text: string): Buffer {
  if (isWellFormed(text)) {
    return Buffer.from(text, "utf8");
  }
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    let code = text.charCodeAt(i);
    const next = text.charCodeAt(i + 1);
    if (code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      code = 0x10000 + ((code - 0xd800) << 10) + (next - 0xdc00);
      i++;
    }
    if (code < 0x80) {
      bytes.push(code);
    } else if (code < 0x800) {
      bytes.push(0xc0 | (code >> 6), 0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      bytes.push(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f));
    } else {
      bytes.push(0xf0 | (code >> 18), 0x80 | ((code >> 12) & 0x3f), 0x80 | ((code >> 6) & 0x3f),
        0x80 | (code & 0x3f));
    }
  }
  return Buffer.from(bytes);
}

function sha256Hex(data: Buffer | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** A stable 32-hex-digit id derived from `parts` (`lockgate.core.ids.derived_id`). */
export function derivedId(...parts: string[]): string {
  return sha256Hex(utf8SurrogatePass(parts.join("\x1f"))).slice(0, 32);
}

/** A fresh 32-hex-digit id. */
export function randomId(): string {
  return randomUUID().replaceAll("-", "");
}

/**
 * The intent id (the candidate id) of the call `callId` in a run: one call id in one
 * run is one intent, however often it is proposed.
 */
export function intentIdFor(tenant: string, runId: string, callId: string): string {
  return derivedId("intent", tenant, runId, callId);
}

/**
 * The digest of what makes a proposal the same call: its id, tool and raw argument text
 * (`lockgate.core.ids.call_digest`); `sha256:<hex>`.
 */
export function callDigest(call: {
  callId: string;
  tool: string;
  arguments: string;
  assemblyFailure?: string | null | undefined;
}): string {
  const h = createHash("sha256");
  for (const part of [call.callId, call.tool, call.arguments, call.assemblyFailure ?? ""]) {
    // Length-prefixed, so no choice of parts collides with another by moving a separator.
    const encoded = utf8SurrogatePass(part);
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(encoded.length));
    h.update(length).update(encoded);
  }
  h.update(Buffer.from([call.assemblyFailure != null ? 1 : 0]));
  return "sha256:" + h.digest("hex");
}

/** The intent id that records a call id reused with other bytes (`digest`). */
export function reusedCallIdIntent(tenant: string, runId: string, callId: string, digest: string): string {
  return derivedId("intent-reused", tenant, runId, callId, digest);
}

/**
 * A Lockgate call id for a framework's tool-call id: used as it is when it is one
 * (`call_…`, `toolu_…`), else a stable digest of it, so one framework id is always one call.
 */
export function callIdFor(frameworkId: string): string {
  if (isSubjectToken(frameworkId)) {
    return frameworkId;
  }
  return "fw-" + sha256Hex(utf8SurrogatePass(frameworkId)).slice(0, 40);
}
