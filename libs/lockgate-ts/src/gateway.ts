/**
 * The gateway: one NATS user's connection to Lockgate (and the trusted host's), what it
 * asks the services, and how a proposal is published and its response awaited.
 *
 * What goes on the wire is what the Python SDK (`lockgate.client.sdk`) sends: the same
 * subjects, messages, message ids and limits, under the same broker permissions.
 */

import type { NatsConnection } from "@nats-io/nats-core";
import {
  jetstream,
  jetstreamManager,
  JetStreamApiError,
  type DirectStreamAPI,
  type JetStreamClient,
} from "@nats-io/jetstream";

import { candidateBytes, decodeAs } from "./encoding.js";
import {
  CandidateTooLarge,
  ClientError,
  OutcomeSettled,
  PermissionDenied,
  Refused,
  ResponseTimeout,
} from "./errors.js";
import { callDigest, intentIdFor, isSubjectToken, randomId, reusedCallIdIntent } from "./ids.js";
import { ask, denied, request, requestAgain } from "./requests.js";
import { Run } from "./run.js";
import * as subjects from "./subjects.js";
import { pauseAfter, Signal, sleep, Wakeups } from "./wakeups.js";
import type {
  Candidate,
  DecideReview,
  Edited,
  EditReview,
  ModelResponse,
  NotResolved,
  OpenRun,
  Recorded,
  ResolveOutcome,
  ReviewView,
  Withdraw,
} from "./wire/messages.js";

/** The JetStream API as the services' account serves it. */
export const JS_API = "$JS.API";
/** JetStream's "message size exceeds maximum allowed" (the stream's `max_msg_size`). */
const JS_MESSAGE_TOO_LARGE = 10054;

/** A proposed call as its response is looked for: its digest, and the two intents that may answer. */
interface Call {
  tenant: string;
  runId: string;
  callId: string;
  digest: string;
  /** The call id's own intent: it answers if it recorded these bytes. */
  own: string;
  /** The intent a call id reused with other bytes is refused on. */
  reuse: string;
}

/** True when `response` answers the candidate whose bytes have `digest`. */
function answers(response: ModelResponse, digest: string): boolean {
  // Responses recorded before candidates were digested carry none: they answer the call id.
  return response.candidate_digest == null || response.candidate_digest === digest;
}

/** How a run is opened: who acts, on what, and which capabilities its turns may offer. */
export interface OpenRunOptions {
  tenant: string;
  actor: string;
  /** Authoritative context (`{case_id: "case-123"}`): the model never chooses it. */
  context?: Record<string, string> | undefined;
  delegation?: string | null | undefined;
  stage?: string | undefined;
  /** Chosen here when not given, so an unanswered open is asked again as the same run. */
  runId?: string | undefined;
  roles?: readonly string[] | undefined;
  /** The classes of data the run may touch (`null`: any). */
  dataClasses?: readonly string[] | null | undefined;
  /** The capabilities its agent uses (`null`: every one of the deployment). */
  capabilities?: readonly string[] | null | undefined;
  /** The run ends when idle this long (`null`: only when closed). */
  leaseS?: number | null | undefined;
}

/**
 * A connection to Lockgate as one NATS user (and, for a trusted host, a second one).
 *
 * `nc` is the agent runtime's (or reviewer's, or operator's) connection; `hostNc`, when
 * given, the trusted host's, used only to open and close runs.
 */
export class Gateway {
  readonly hostNc: NatsConnection | null;
  readonly timeoutMs: number;
  /** The NATS user of `nc`, under which withdrawals are recorded. */
  readonly user: string;
  /** The person behind it (`reviewer-alice` is `alice`), under which reviews are recorded. */
  readonly principal: string;
  readonly #js: JetStreamClient;
  readonly #direct: Promise<DirectStreamAPI>;
  readonly #wakeups: Wakeups;

  constructor(
    readonly nc: NatsConnection,
    options: {
      hostNc?: NatsConnection | null;
      timeoutMs?: number;
      jsPrefix?: string;
      user?: string;
      principal?: string;
    } = {},
  ) {
    this.hostNc = options.hostNc ?? null;
    this.timeoutMs = options.timeoutMs ?? 5_000;
    this.user = options.user ?? "anonymous";
    this.principal = options.principal || this.user;
    const apiPrefix = options.jsPrefix ?? JS_API;
    this.#js = jetstream(nc, { apiPrefix, timeout: this.timeoutMs });
    // No account info asked: an agent's user may read responses, nothing else of JetStream.
    this.#direct = jetstreamManager(nc, { apiPrefix, timeout: this.timeoutMs, checkAPI: false })
      .then((jsm) => jsm.direct);
    this.#wakeups = new Wakeups(nc);
  }

  /**
   * Open a run (the trusted host's call: it sets who acts and on what).
   *
   * @throws Refused malformed ids or a tenant mismatch.
   * @throws PermissionDenied the user opening it is not the tenant's trusted host.
   * @throws ClientError nobody answered (`lockgate.unavailable`) within `OPEN_RETRY_MS`.
   */
  async openRun(options: OpenRunOptions): Promise<Run> {
    const { tenant } = options;
    if (!isSubjectToken(tenant)) {
      throw new Refused("run.malformed", "tenants must be [A-Za-z0-9_-]{1,64}");
    }
    const body: OpenRun = {
      tenant,
      actor: options.actor,
      context: { ...options.context },
      delegation: options.delegation ?? null,
      stage: options.stage ?? "default",
      run_id: options.runId ?? randomId(),
      roles: [...(options.roles ?? [])],
      data_classes: options.dataClasses != null ? [...options.dataClasses] : null,
      capabilities: options.capabilities != null ? [...options.capabilities] : null,
      lease_s: options.leaseS ?? null,
    };
    try {
      const opened = await requestAgain(this, this.hostNc ?? this.nc, subjects.runOpen(tenant), body, "RunOpened",
        this.timeoutMs);
      return new Run(this, opened.run_id, opened.tenant, opened.actor);
    } catch (error) {
      if (error instanceof PermissionDenied && this.hostNc === null) {
        throw new PermissionDenied(`${error.message}: runs are opened by the trusted host; connect with host `
          + "(its credentials, e.g. var/credentials/host.json)", error.subject);
      }
      throw error;
    }
  }

  /** A run someone else opened (the host), to propose in it from this connection. */
  run(options: { tenant: string; runId: string; actor?: string }): Run {
    return new Run(this, options.runId, options.tenant, options.actor ?? "");
  }

  /**
   * Stop a candidate by its state (`runId`: its run; `_` for an operator, who may stop any).
   *
   * @throws Refused no such candidate (in that run), or it is between two steps.
   */
  async withdraw(tenant: string, candidateId: string, options: { runId?: string; why?: string } = {}):
    Promise<ModelResponse> {
    const body: Withdraw = { why: options.why ?? "" };
    return request(this, this.nc, subjects.withdraw(tenant, options.runId ?? "_", candidateId, this.user), body,
      "ModelResponse", this.timeoutMs);
  }

  /**
   * The open review of a candidate, as this reviewer may see it.
   *
   * @throws Refused no open review, or not this reviewer's to see.
   */
  async showReview(options: { tenant: string; candidateId: string }): Promise<ReviewView> {
    return request(this, this.nc, subjects.review(options.tenant, options.candidateId, "show", this.principal), {},
      "ReviewView", this.timeoutMs);
  }

  /**
   * Approve or deny a review as this reviewer; returns the event recorded.
   *
   * @throws Refused unknown or closed review, another digest, or policy does not let
   *   this reviewer approve it.
   */
  async decideReview(options: {
    tenant: string; candidateId: string; reviewId: string; digest: string; approve: boolean; reason?: string;
  }): Promise<string> {
    const body: DecideReview = {
      review_id: options.reviewId, digest: options.digest, approve: options.approve, reason: options.reason ?? "",
    };
    const recorded: Recorded = await request(this, this.nc,
      subjects.review(options.tenant, options.candidateId, "decide", this.principal), body, "Recorded",
      this.timeoutMs);
    return recorded.event;
  }

  /**
   * Propose narrower arguments instead of approving; returns the new candidate.
   *
   * @throws Refused unknown or closed review, another digest, or the same bytes.
   */
  async editReview(options: {
    tenant: string; candidateId: string; reviewId: string; digest: string; arguments: string; reason?: string;
  }): Promise<Edited> {
    const body: EditReview = {
      review_id: options.reviewId, digest: options.digest, arguments: options.arguments,
      reason: options.reason ?? "",
    };
    return request(this, this.nc, subjects.review(options.tenant, options.candidateId, "edit", this.principal),
      body, "Edited", this.timeoutMs);
  }

  /**
   * Settle an unknown outcome as this operator (`confirmed` or `absent`); returns the event recorded.
   *
   * @throws OutcomeSettled the outcome was settled first; `answer` says with what finding.
   * @throws Refused nothing to resolve, or the command was malformed.
   */
  async resolveOutcome(options: {
    tenant: string; candidateId: string; finding: string; why: string; receipt?: Record<string, string>;
  }): Promise<string> {
    const body: ResolveOutcome = { finding: options.finding, why: options.why, receipt: { ...options.receipt } };
    const data = await ask(this, this.nc, subjects.resolve(options.tenant, options.candidateId, this.principal), body,
      this.timeoutMs);
    const recorded = decodeAs("Recorded", data);
    if (recorded !== null) {
      return recorded.event;
    }
    const answer: NotResolved = decodeAs("NotResolved", data) ?? { error: "lockgate.error", detail: "unreadable answer" };
    if (answer.error === "reconcile.already-settled") {
      throw new OutcomeSettled(answer);
    }
    throw new Refused(answer.error, answer.detail ?? "");
  }

  /**
   * The stored response to a candidate: only intake writes the responses stream, so this
   * is authoritative.
   *
   * @throws PermissionDenied this user may not read that run's responses (another tenant's).
   */
  async latest(tenant: string, runId: string, candidateId: string): Promise<ModelResponse | null> {
    const subject = subjects.response(tenant, runId, candidateId);
    let stored;
    try {
      // A direct get of the last message on the subject, at an API subject that names it
      // (`<prefix>.DIRECT.GET.LG_RESPONSES.<subject>`): what the agent's user is granted.
      stored = await (await this.#direct).getMessage(subjects.RESPONSES_STREAM, { last_by_subj: subject });
    } catch (error) {
      throw denied(error, this.user) ?? error;
    }
    if (stored === null) {
      return null;
    }
    const response = decodeAs("ModelResponse", stored.data);
    return response !== null && response.candidate_id === candidateId ? response : null;
  }

  /** Publish a candidate and wait for its model-facing response (`Turn.propose`). */
  async proposeCandidate(tenant: string, candidate: Candidate, timeoutMs: number): Promise<ModelResponse> {
    const { run_id: runId, call_id: callId } = candidate;
    const body = candidateBytes(candidate, this.nc.info?.max_payload);
    const digest = callDigest({
      callId, tool: candidate.tool, arguments: candidate.arguments, assemblyFailure: candidate.assembly_failure,
    });
    const call: Call = {
      tenant, runId, callId, digest,
      own: intentIdFor(tenant, runId, callId),
      reuse: reusedCallIdIntent(tenant, runId, callId, digest),
    };
    const woken = new Signal();
    const watched = [subjects.response(tenant, runId, call.own), subjects.response(tenant, runId, call.reuse)];
    await this.#wakeups.watch(tenant, runId, watched, woken);
    try {
      const deadline = performance.now() + timeoutMs;
      // The message id names the bytes: a repeat of the same call is deduplicated by the
      // stream, a call id reused with other bytes reaches intake to be refused.
      const repeated = await this.#publishCandidate(subjects.propose(tenant, runId), body,
        `${runId}.${callId}.${digest.slice(7, 23)}`, deadline);
      return await this.#response(call, woken, repeated, deadline, timeoutMs);
    } finally {
      this.#wakeups.unwatch(watched, woken);
    }
  }

  /**
   * The call's response, read from the stream whenever `woken` is set and every second.
   *
   * @throws PermissionDenied this user may not read the run's responses.
   * @throws ResponseTimeout none by `deadline`.
   */
  async #response(call: Call, woken: Signal, repeated: boolean, deadline: number, timeoutMs: number):
    Promise<ModelResponse> {
    const { tenant, runId } = call;
    let otherBytes = false;
    let askStream = repeated;
    let woke = false;
    // After a wake-up the stream is asked again soon: on a replicated stream the replica
    // answering a direct get may be a few milliseconds behind the response it woke for.
    let soonMs = 0;
    for (;;) {
      // A repeated call was deduplicated: its response may already exist. A response
      // published while reconnecting is only in the stream: asked every second.
      try {
        if (askStream && !otherBytes) {
          const earlier = await this.latest(tenant, runId, call.own);
          if (earlier !== null && answers(earlier, call.digest)) {
            return earlier;
          }
          otherBytes = earlier !== null;
        }
        if (askStream && otherBytes) {
          const refusal = await this.latest(tenant, runId, call.reuse);
          if (refusal !== null) {
            return refusal;
          }
        }
      } catch (error) {
        if (error instanceof PermissionDenied) {
          throw error;
        }
        // The connection is reconnecting; keep waiting.
      }
      const remaining = deadline - performance.now();
      if (remaining <= 0) {
        throw new ResponseTimeout(`no response to ${call.callId} within ${timeoutMs / 1000}s`);
      }
      soonMs = pauseAfter(soonMs, woke);
      woke = await woken.wait(Math.min(remaining, soonMs || 1_000));
      woken.clear();
      askStream = true;
    }
  }

  /**
   * Publish until the stream acknowledges; true when it already held these bytes.
   *
   * @throws CandidateTooLarge the stream refused the message as too large.
   * @throws PermissionDenied the broker refused this user the subject.
   * @throws ClientError the stream refused it otherwise, or did not answer in time.
   */
  async #publishCandidate(subject: string, body: Uint8Array, msgId: string, deadline: number): Promise<boolean> {
    for (;;) {
      try {
        const ack = await this.#js.publish(subject, body, { msgID: msgId, timeout: this.timeoutMs });
        return ack.duplicate;
      } catch (error) {
        const refused = denied(error, this.user);
        if (refused !== null) {
          throw refused;
        }
        if (error instanceof JetStreamApiError) {
          if (error.code === JS_MESSAGE_TOO_LARGE) {
            throw new CandidateTooLarge(`the stream refused ${body.length} bytes: ${error.message}`);
          }
          if (error.status === 400) { // permanent: the same bytes would be refused again
            throw new ClientError(`candidate refused by the stream: ${error.message}`, "candidate.refused");
          }
        }
        if (performance.now() + 500 > deadline) {
          throw new ClientError(`candidate not accepted: ${String(error)}`, "lockgate.unavailable");
        }
        await sleep(500);
      }
    }
  }

  /** Close the connection (and the host's). */
  async close(): Promise<void> {
    await this.nc.close();
    await this.hostNc?.close();
  }
}
