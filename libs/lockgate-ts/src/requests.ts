/**
 * Requests to Lockgate's services over NATS: the reply decoded, a refusal raised as
 * `Refused`, the broker's refusal as `PermissionDenied`, and idempotent opens asked again.
 */

import { errors, type NatsConnection } from "@nats-io/nats-core";

import { ClientError, PermissionDenied, Refused } from "./errors.js";
import { decodeAs, encode } from "./encoding.js";
import type { Gateway } from "./gateway.js";
import { sleep } from "./wakeups.js";
import type { Refusal, WireTypes } from "./wire/messages.js";

/**
 * How long an idempotent open (a run or a turn under an id the client chose) is asked
 * again while nobody answers, or intake says it could not answer now: longer than a
 * cluster's leader election.
 */
export const OPEN_RETRY_MS = 20_000;

/** The subject of the broker's refusal in `error` or its causes, if it is one. */
function deniedSubject(error: unknown): string | null {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e instanceof errors.PermissionViolationError) {
      return e.subject;
    }
  }
  return null;
}

/** `PermissionDenied` when `error` is the broker refusing `user` a subject. */
export function denied(error: unknown, user: string): PermissionDenied | null {
  const subject = deniedSubject(error);
  return subject === null ? null
    : new PermissionDenied(`the broker refused user '${user}' permission to publish to ${subject}`, subject);
}

/** True when `error` (or a cause) is a request nobody answered, in time or at all. */
function unanswered(error: unknown): boolean {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e instanceof errors.TimeoutError || e instanceof errors.NoRespondersError) {
      return true;
    }
  }
  return false;
}

/**
 * Send `body` to `subject` and return the reply's bytes.
 *
 * @throws PermissionDenied the broker refused this user the subject.
 * @throws ClientError nobody answered in time (`lockgate.unavailable`).
 */
export async function ask(gateway: Gateway, nc: NatsConnection, subject: string, body: object, timeoutMs: number):
  Promise<Uint8Array> {
  try {
    return (await nc.request(subject, encode(body), { timeout: timeoutMs })).data;
  } catch (error) {
    const refused = denied(error, gateway.user);
    if (refused !== null) {
      throw refused;
    }
    if (unanswered(error)) {
      throw new ClientError(`no answer on ${subject}`, "lockgate.unavailable");
    }
    throw error;
  }
}

/** `ask`, the reply read as a `kind`, or raised as the `Refused` it is. */
export async function request<K extends keyof WireTypes>(
  gateway: Gateway, nc: NatsConnection, subject: string, body: object, kind: K, timeoutMs: number,
): Promise<WireTypes[K]> {
  const data = await ask(gateway, nc, subject, body, timeoutMs);
  const answer = decodeAs(kind, data);
  if (answer !== null) {
    return answer;
  }
  const refusal: Refusal | null = decodeAs("Refusal", data);
  if (refusal === null) {
    throw new ClientError(`unreadable answer on ${subject}`, "lockgate.error");
  }
  throw new Refused(refusal.error, refusal.detail ?? "");
}

/**
 * `request`, asked again while unanswered or `service.unavailable`, up to
 * `OPEN_RETRY_MS`: only for requests that mean the same however often they arrive.
 */
export async function requestAgain<K extends keyof WireTypes>(
  gateway: Gateway, nc: NatsConnection, subject: string, body: object, kind: K, timeoutMs: number,
): Promise<WireTypes[K]> {
  const deadline = performance.now() + OPEN_RETRY_MS;
  let pause = 100;
  for (;;) {
    try {
      return await request(gateway, nc, subject, body, kind, timeoutMs);
    } catch (error) {
      const again = error instanceof Refused ? error.code === "service.unavailable"
        : error instanceof ClientError && error.code === "lockgate.unavailable";
      if (!again || performance.now() + pause > deadline) {
        throw error;
      }
    }
    await sleep(pause);
    pause = Math.min(pause * 2, 2_000);
  }
}
