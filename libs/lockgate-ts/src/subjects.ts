/**
 * The subjects of the agent-facing protocol, built in one place as Lockgate builds them
 * (`lockgate.contracts.subjects`).
 *
 * Every part that comes from a caller is checked before it becomes a subject token: the
 * broker closes the connection of a client that sends a malformed control line.
 */

import { isSubjectToken } from "./ids.js";

/** Where model-facing responses are kept (only intake writes it). */
export const RESPONSES_STREAM = "LG_RESPONSES";

function token(value: string, what: string): string {
  if (!isSubjectToken(value)) {
    throw new RangeError(`${what} ${JSON.stringify(value.slice(0, 80))} is not a subject token`);
  }
  return value;
}

/** `lg.run.<tenant>.open`: the trusted host opens a run. */
export function runOpen(tenant: string): string {
  return `lg.run.${token(tenant, "tenant")}.open`;
}

/** `lg.run.<tenant>.close`: the trusted host ends a run. */
export function runClose(tenant: string): string {
  return `lg.run.${token(tenant, "tenant")}.close`;
}

/** `lg.turn.<tenant>.<run>`: an agent runtime opens a turn. */
export function turn(tenant: string, runId: string): string {
  return `lg.turn.${token(tenant, "tenant")}.${token(runId, "run id")}`;
}

/** `lg.propose.<tenant>.<run>`: where a candidate is published (stream `LG_CANDIDATES`). */
export function propose(tenant: string, runId: string): string {
  return `lg.propose.${token(tenant, "tenant")}.${token(runId, "run id")}`;
}

/** `lg.response.<tenant>.<run>.<candidate>`: what the model may learn of a candidate. */
export function response(tenant: string, runId: string, candidateId: string): string {
  return `${responsesOfRun(tenant, runId).slice(0, -1)}${token(candidateId, "candidate id")}`;
}

/** Every model-facing response of one run. */
export function responsesOfRun(tenant: string, runId: string): string {
  return `lg.response.${token(tenant, "tenant")}.${token(runId, "run id")}.*`;
}

/** `lg.withdraw.<tenant>.<run>.<intent>.<principal>`: stop a candidate by its state. */
export function withdraw(tenant: string, runId: string, intentId: string, principal: string): string {
  return `lg.withdraw.${token(tenant, "tenant")}.${token(runId, "run id")}.${token(intentId, "intent id")}.`
    + token(principal, "principal");
}

/** The verbs of a review request. */
export type ReviewVerb = "show" | "decide" | "edit";

/** `lg.review.<tenant>.<intent>.<verb>.<principal>`. */
export function review(tenant: string, intentId: string, verb: ReviewVerb, principal: string): string {
  return `lg.review.${token(tenant, "tenant")}.${token(intentId, "intent id")}.${verb}.`
    + token(principal, "principal");
}

/** `lg.reconcile.<tenant>.<intent>.resolve.<principal>`: an operator settles an outcome. */
export function resolve(tenant: string, intentId: string, principal: string): string {
  return `lg.reconcile.${token(tenant, "tenant")}.${token(intentId, "intent id")}.resolve.`
    + token(principal, "principal");
}
