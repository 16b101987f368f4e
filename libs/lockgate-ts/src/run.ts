/**
 * A run (one agent task, opened by the trusted host) and its turns (one model step each):
 * proposing a tool call in a turn, and waiting on, withdrawing or reading its response.
 */

import { InvalidCandidate, ResponseTimeout, UnknownCandidate } from "./errors.js";
import type { Gateway } from "./gateway.js";
import { intentIdFor, isSubjectToken, randomId } from "./ids.js";
import { request, requestAgain } from "./requests.js";
import * as subjects from "./subjects.js";
import { sleep } from "./wakeups.js";
import type { Candidate, CloseRun, ModelResponse, OpenTurn, RunClosed, Tool } from "./wire/messages.js";

/**
 * How long a candidate id may have no response before `Run.wait` says it is none of the
 * run's: intake answers a candidate as soon as it reads it.
 */
export const KNOWN_WITHIN_MS = 3_000;

/** What one proposal carries besides its tool and argument text. */
export interface ProposeOptions {
  /** The tool (capability) the model called. */
  tool: string;
  /** The raw argument text the model emitted, untouched (not an object). */
  arguments: string;
  /**
   * The call's id: the framework's tool-call id (`callIdFor`), so a retried step is the
   * same intent. Random when not given.
   */
  callId?: string | undefined;
  timeoutMs?: number | undefined;
  /** The provider's own item the call came in, kept on the record. */
  providerItem?: Record<string, unknown> | null | undefined;
  /** The format the call came in (`openai.chat`, `anthropic.messages`, ...). */
  provider?: string | undefined;
  /** The model the runtime says produced the call (evidence only). */
  model?: string | undefined;
  /** The call id of an earlier candidate of this run this one corrects or follows. */
  follows?: string | null | undefined;
  /** A `stream.*` code: the call could not be assembled from a stream (it is never run). */
  assemblyFailure?: string | null | undefined;
}

/** One model step: the tools offered in it and the proposals made from it. */
export class Turn {
  constructor(
    readonly run: Run,
    readonly id: string,
    readonly catalogueDigest: string,
    readonly tools: readonly Tool[],
  ) {}

  /**
   * Propose one tool call exactly as the model emitted it; return what the model sees.
   *
   * Proposing the same `callId` again with the same tool and argument text is safe, in
   * this turn or any later turn of the run: it is one intent, and the answer is its
   * current one. Other text or another tool under a call id already used is refused
   * (`rejected`/`proposal.invalid`); the earlier call's response is never returned for it.
   *
   * @throws InvalidCandidate `arguments` is not text, holds a lone surrogate, or the
   *   candidate is one intake would refuse unread; nothing was sent.
   * @throws CandidateTooLarge larger than Lockgate accepts in one message; nothing was sent.
   * @throws PermissionDenied this connection's user may not propose in this tenant.
   * @throws ResponseTimeout no response within `timeoutMs`.
   */
  async propose(options: ProposeOptions): Promise<ModelResponse> {
    if (typeof options.arguments !== "string") {
      // Intake would refuse it unread, under an id of its own: say so now instead.
      throw new InvalidCandidate(
        `arguments must be the raw argument text the model emitted (a string), not ${typeof options.arguments}: `
        + "pass it as the model wrote it, or JSON.stringify(...) it");
    }
    const candidate: Candidate = {
      run_id: this.run.id,
      turn_id: this.id,
      call_id: options.callId || randomId(),
      tool: options.tool,
      arguments: options.arguments,
      // Defaults are left out, as the Python client leaves them out.
      ...(options.providerItem != null ? { provider_item: options.providerItem } : {}),
      ...(options.provider ? { provider: options.provider } : {}),
      ...(options.model ? { model: options.model } : {}),
      ...(options.follows != null ? { follows: options.follows } : {}),
      ...(options.assemblyFailure != null ? { assembly_failure: options.assemblyFailure } : {}),
    };
    return this.run.gateway.proposeCandidate(this.run.tenant, candidate, options.timeoutMs ?? 30_000);
  }
}

/** One agent task, opened by the trusted host with authoritative context. */
export class Run {
  constructor(
    readonly gateway: Gateway,
    readonly id: string,
    readonly tenant: string,
    readonly actor: string,
  ) {}

  /**
   * Open a turn and get the catalogue the model may use in it.
   *
   * The turn's id is chosen here when not given, so an open that went unanswered is asked
   * again under it (a turn opened twice is one snapshot) for up to `OPEN_RETRY_MS`.
   */
  async openTurn(turnId?: string): Promise<Turn> {
    const body: OpenTurn = { turn_id: turnId ?? randomId() };
    const opened = await requestAgain(this.gateway, this.gateway.nc, subjects.turn(this.tenant, this.id), body,
      "TurnOpened", this.gateway.timeoutMs);
    return new Turn(this, opened.turn_id, opened.catalogue_digest, opened.tools);
  }

  /**
   * End the run (the trusted host's call): it takes no more turns or calls, and every
   * candidate it left waiting for a reviewer is withdrawn.
   *
   * @throws Refused no such run.
   * @throws PermissionDenied this connection has no trusted host (`connect({host})`).
   */
  async close(options: { why?: string } = {}): Promise<RunClosed> {
    const gateway = this.gateway;
    const body: CloseRun = { run_id: this.id, why: options.why ?? "" };
    return request(gateway, gateway.hostNc ?? gateway.nc, subjects.runClose(this.tenant), body, "RunClosed",
      Math.max(gateway.timeoutMs, 30_000));
  }

  /** The latest model-facing response to a candidate, if any. */
  async response(candidateId: string): Promise<ModelResponse | null> {
    return this.gateway.latest(this.tenant, this.id, candidateId);
  }

  /**
   * Stop a candidate of this run by its state; returns what the model now sees.
   *
   * Only `withdrawn` means no adapter can still execute it. Who asked is recorded as this
   * connection's user.
   *
   * @throws Refused no such candidate in this run, or it is between two steps (ask again).
   */
  async withdraw(candidateId: string, options: { why?: string } = {}): Promise<ModelResponse> {
    return this.gateway.withdraw(this.tenant, candidateId, { runId: this.id, why: options.why ?? "" });
  }

  /**
   * Wait until the candidate's latest response has a status other than `past`.
   *
   * `candidateId` is a response's `candidate_id`, not a call id.
   *
   * @throws UnknownCandidate no candidate of this run has that id.
   * @throws ResponseTimeout still `past` after `timeoutMs`.
   */
  async wait(
    candidateId: string,
    options: { past?: string; timeoutMs?: number } = {},
  ): Promise<ModelResponse> {
    const past = options.past ?? "pending_approval";
    if (!isSubjectToken(candidateId)) {
      throw new UnknownCandidate(`${JSON.stringify(candidateId.slice(0, 80))} is not a candidate id`);
    }
    const started = performance.now();
    const deadline = started + (options.timeoutMs ?? 30_000);
    let seen = false;
    for (;;) {
      const latest = await this.response(candidateId);
      if (latest !== null && latest.status !== past) {
        return latest;
      }
      if (latest === null && !seen) {
        await this.#unknown(candidateId, performance.now() - started);
      }
      seen ||= latest !== null;
      if (performance.now() > deadline) {
        throw new ResponseTimeout(`${candidateId} still ${past}`);
      }
      await sleep(50);
    }
  }

  async #unknown(candidateId: string, waitedMs: number): Promise<void> {
    const asCall = intentIdFor(this.tenant, this.id, candidateId);
    if (await this.response(asCall) !== null) {
      throw new UnknownCandidate(`${candidateId} is a call id of run ${this.id}; its candidate id is ${asCall}`);
    }
    if (waitedMs >= KNOWN_WITHIN_MS) {
      throw new UnknownCandidate(`no candidate ${candidateId} in run ${this.id} of ${this.tenant} (no response in `
        + `${KNOWN_WITHIN_MS / 1000}s): wait on a response's candidate_id`);
    }
  }
}
