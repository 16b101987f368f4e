/**
 * The subjects of the agent-facing protocol, built in one place as Lockgate builds them
 * (`lockgate.contracts.subjects`).
 *
 * Each is made by the builder `scripts/generate.mjs` writes for its channel from the
 * contract's addresses (`schemas/asyncapi.json`), its parameters passed by name: a channel
 * renamed or re-shaped there fails `tsc` here. Every part that comes from a caller is
 * checked before it becomes a subject token: the broker closes the connection of a client
 * that sends a malformed control line.
 */

import * as channels from "./wire/channels.js";

/** Where model-facing responses are kept (only intake writes it). */
export const RESPONSES_STREAM = "LG_RESPONSES";

/** `lg.run.<tenant>.open`: the trusted host opens a run. */
export function runOpen(tenant: string): string {
  return channels.runOpen({ tenant });
}

/** `lg.run.<tenant>.close`: the trusted host ends a run. */
export function runClose(tenant: string): string {
  return channels.runClose({ tenant });
}

/** `lg.turn.<tenant>.<run>`: an agent runtime opens a turn. */
export function turn(tenant: string, runId: string): string {
  return channels.turn({ tenant, run: runId });
}

/** `lg.propose.<tenant>.<run>`: where a candidate is published (stream `LG_CANDIDATES`). */
export function propose(tenant: string, runId: string): string {
  return channels.propose({ tenant, run: runId });
}

/** `lg.response.<tenant>.<run>.<candidate>`: what the model may learn of a candidate. */
export function response(tenant: string, runId: string, candidateId: string): string {
  return channels.response({ tenant, run: runId, candidate: candidateId });
}

/** Every model-facing response of one run: `lg.response.<tenant>.<run>.*`. */
export function responsesOfRun(tenant: string, runId: string): string {
  return channels.responseWildcard({ tenant, run: runId });
}

/** `lg.withdraw.<tenant>.<run>.<intent>.<principal>`: stop a candidate by its state. */
export function withdraw(tenant: string, runId: string, intentId: string, principal: string): string {
  return channels.withdraw({ tenant, run: runId, intent: intentId, user: principal });
}

/** The builder of each verb of a review request. */
const REVIEW = {
  show: channels.reviewShow,
  decide: channels.reviewDecide,
  edit: channels.reviewEdit,
} as const;

/** The verbs of a review request. */
export type ReviewVerb = keyof typeof REVIEW;

/** `lg.review.<tenant>.<intent>.<verb>.<principal>`. */
export function review(tenant: string, intentId: string, verb: ReviewVerb, principal: string): string {
  return REVIEW[verb]({ tenant, intent: intentId, reviewer: principal });
}

/** `lg.reconcile.<tenant>.<intent>.resolve.<principal>`: an operator settles an outcome. */
export function resolve(tenant: string, intentId: string, principal: string): string {
  return channels.reconcileResolve({ tenant, intent: intentId, operator: principal });
}
