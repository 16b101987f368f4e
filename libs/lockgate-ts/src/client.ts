/**
 * Runs, turns and proposals over NATS; responses read from `LG_RESPONSES`.
 *
 * What goes on the wire is what the Python SDK (`lockgate.client.sdk`) sends: the same
 * subjects, messages, message ids and limits, under the same broker permissions.
 */

import { errors, type Msg, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import {
  jetstream,
  jetstreamManager,
  JetStreamApiError,
  type DirectStreamAPI,
  type JetStreamClient,
} from "@nats-io/jetstream";
import { connect as natsConnect } from "@nats-io/transport-node";

import {
  DEFAULT_URL,
  findLocal,
  loadCredentials,
  localCredentials,
  namesAUser,
  type Credentials,
  type Local,
} from "./discovery.js";
import {
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
import {
  callDigest,
  intentIdFor,
  isSubjectToken,
  isWellFormed,
  randomId,
  reusedCallIdIntent,
} from "./ids.js";
import * as subjects from "./subjects.js";
import {
  REQUIRED,
  type Candidate,
  type CloseRun,
  type DecideReview,
  type Edited,
  type EditReview,
  type ModelResponse,
  type NotResolved,
  type OpenRun,
  type OpenTurn,
  type Recorded,
  type Refusal,
  type ResolveOutcome,
  type ReviewView,
  type RunClosed,
  type Tool,
  type WireTypes,
  type Withdraw,
} from "./wire/messages.js";

/** The most a candidate message may hold (the candidates stream's `max_msg_size`). */
export const MAX_CANDIDATE_MESSAGE_BYTES = 2 * 1024 * 1024;
/** Deepest nesting of `{` and `[` intake reads in a candidate's envelope. */
export const MAX_ENVELOPE_DEPTH = 64;
/**
 * How long an idempotent open (a run or a turn under an id the client chose) is asked
 * again while nobody answers, or intake says it could not answer now: longer than a
 * cluster's leader election.
 */
export const OPEN_RETRY_MS = 20_000;
/**
 * How long a candidate id may have no response before `Run.wait` says it is none of the
 * run's: intake answers a candidate as soon as it reads it.
 */
export const KNOWN_WITHIN_MS = 3_000;
/**
 * After a wake-up whose response the stream does not show yet, it is asked again after
 * the first of these, then twice as long each time, up to the second (milliseconds).
 */
export const WAKE_RETRY_MS: readonly [number, number] = [2, 500];
/** Runs whose responses one gateway keeps a subscription to. */
export const RUNS_WATCHED = 1024;
/** The JetStream API as the services' account serves it. */
const JS_API = "$JS.API";
/** JetStream's "message size exceeds maximum allowed" (the stream's `max_msg_size`). */
const JS_MESSAGE_TOO_LARGE = 10054;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function encode(body: object): Uint8Array {
  return encoder.encode(JSON.stringify(body));
}

/** `data` as a message of type `kind` when it carries that type's required fields, else `null`. */
function decodeAs<K extends keyof WireTypes>(kind: K, data: Uint8Array): WireTypes[K] | null {
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
function denied(error: unknown, user: string): PermissionDenied | null {
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

function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** A flag a message sets and a waiter waits on (with a timeout), cleared between waits. */
class Signal {
  #set = false;
  #wake: (() => void) | null = null;

  set(): void {
    this.#set = true;
    this.#wake?.();
  }

  clear(): void {
    this.#set = false;
  }

  /** True when set within `ms`. */
  wait(ms: number): Promise<boolean> {
    if (this.#set) {
      return Promise.resolve(true);
    }
    return new Promise((done) => {
      const timer = setTimeout(() => {
        this.#wake = null;
        done(false);
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = null;
        done(true);
      };
    });
  }
}

/**
 * Wake-ups for proposals waiting for their responses: one core subscription per run.
 *
 * A message on a response subject is only a wake-up (anybody at the edge can have a reply
 * delivered there): what the model sees is read from the stream, which only intake writes.
 */
class Wakeups {
  readonly #runs = new Map<string, Subscription>();
  readonly #waiting = new Map<string, Set<Signal>>();

  constructor(private readonly nc: NatsConnection) {}

  /** Set `woken` whenever a message arrives on one of `watched`; resolves once subscribed. */
  async watch(tenant: string, runId: string, watched: readonly string[], woken: Signal): Promise<void> {
    const wildcard = subjects.responsesOfRun(tenant, runId);
    const made = this.#runs.get(wildcard);
    this.#runs.delete(wildcard);
    if (made !== undefined) {
      this.#runs.set(wildcard, made); // most recently used last
    } else {
      this.#runs.set(wildcard, this.nc.subscribe(wildcard, {
        callback: (error: Error | null, msg: Msg) => {
          if (error === null) {
            this.#waiting.get(msg.subject)?.forEach((s) => s.set());
          }
        },
      }));
      await this.nc.flush(); // what is published after this wakes
      this.#forgetIdle();
    }
    for (const subject of watched) {
      const waiters = this.#waiting.get(subject) ?? new Set<Signal>();
      waiters.add(woken);
      this.#waiting.set(subject, waiters);
    }
  }

  /** Stop waking `woken`. */
  unwatch(watched: readonly string[], woken: Signal): void {
    for (const subject of watched) {
      const waiters = this.#waiting.get(subject);
      waiters?.delete(woken);
      if (waiters?.size === 0) {
        this.#waiting.delete(subject);
      }
    }
  }

  /** Give up the least recently used runs' subscriptions past `RUNS_WATCHED`, unless one waits. */
  #forgetIdle(): void {
    while (this.#runs.size > RUNS_WATCHED) {
      const idle = [...this.#runs.keys()].find((w) =>
        ![...this.#waiting.keys()].some((s) => s.startsWith(w.slice(0, -1))));
      if (idle === undefined) {
        return;
      }
      this.#runs.get(idle)?.unsubscribe();
      this.#runs.delete(idle);
    }
  }
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

/** True when `response` answers the candidate whose bytes have `digest`. */
function answers(response: ModelResponse, digest: string): boolean {
  // Responses recorded before candidates were digested carry none: they answer the call id.
  return response.candidate_digest == null || response.candidate_digest === digest;
}

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
    if (!isSubjectToken(callId)) {
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
    const limit = Math.min(this.nc.info?.max_payload ?? MAX_CANDIDATE_MESSAGE_BYTES, MAX_CANDIDATE_MESSAGE_BYTES);
    if (body.length > limit) {
      throw new CandidateTooLarge(`${body.length} bytes exceed the ${limit} a candidate may have`);
    }
    const digest = callDigest({
      callId, tool: candidate.tool, arguments: candidate.arguments, assemblyFailure: candidate.assembly_failure,
    });
    const own = intentIdFor(tenant, runId, callId);
    const reuse = reusedCallIdIntent(tenant, runId, callId, digest);
    const woken = new Signal();
    const watched = [subjects.response(tenant, runId, own), subjects.response(tenant, runId, reuse)];
    await this.#wakeups.watch(tenant, runId, watched, woken);
    try {
      const deadline = performance.now() + timeoutMs;
      // The message id names the bytes: a repeat of the same call is deduplicated by the
      // stream, a call id reused with other bytes reaches intake to be refused.
      const repeated = await this.#publishCandidate(subjects.propose(tenant, runId), body,
        `${runId}.${callId}.${digest.slice(7, 23)}`, deadline);
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
            const earlier = await this.latest(tenant, runId, own);
            if (earlier !== null && answers(earlier, digest)) {
              return earlier;
            }
            otherBytes = earlier !== null;
          }
          if (askStream && otherBytes) {
            const refusal = await this.latest(tenant, runId, reuse);
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
          throw new ResponseTimeout(`no response to ${callId} within ${timeoutMs / 1000}s`);
        }
        const [first, last] = WAKE_RETRY_MS;
        if (woke) { // woken, and the stream did not show it: ask again soon
          soonMs = soonMs === 0 ? first : Math.min(2 * soonMs, last);
        } else if (soonMs) { // still not there: a little later, until the pause is the usual
          soonMs = soonMs >= last ? 0 : Math.min(2 * soonMs, last);
        }
        woke = await woken.wait(Math.min(remaining, soonMs || 1_000));
        woken.clear();
        askStream = true;
      }
    } finally {
      this.#wakeups.unwatch(watched, woken);
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

/**
 * Send `body` to `subject` and return the reply's bytes.
 *
 * @throws PermissionDenied the broker refused this user the subject.
 * @throws ClientError nobody answered in time (`lockgate.unavailable`).
 */
async function ask(gateway: Gateway, nc: NatsConnection, subject: string, body: object, timeoutMs: number):
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
async function request<K extends keyof WireTypes>(
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
async function requestAgain<K extends keyof WireTypes>(
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

/** Credentials as given to `connect`: the file's contents, its path, or a local user's name. */
export type CredentialsLike = Credentials | string;

/** How `connect` finds the broker and whom it connects as. */
export interface ConnectOptions {
  /**
   * The broker (comma-separated for a cluster's nodes); by default `LOCKGATE_NATS_URL`,
   * else the one `lockgate run` says it runs, else port 4222.
   */
  url?: string | undefined;
  /**
   * The user to connect as: a credentials file's contents or path, or a user of the local
   * deployment by name (`"agent-tenant-a"`); none on a broker without users.
   */
  credentials?: CredentialsLike | undefined;
  /** The trusted host's credentials, to open runs (a second connection); `true`: the local `host` user. */
  host?: CredentialsLike | true | undefined;
  /** How long each request waits for its answer. */
  timeoutMs?: number | undefined;
  /** The local deployment's directory (default: `LOCKGATE_VAR_DIR`, else the checkout's `var/`). */
  varDir?: string | undefined;
}

function resolveCredentials(value: CredentialsLike | undefined, local: Local | null): Credentials | null {
  if (value === undefined) {
    return null;
  }
  if (typeof value !== "string") {
    return value;
  }
  if (namesAUser(value) && local !== null) {
    return localCredentials(local, value);
  }
  return loadCredentials(value);
}

function isAuthorization(error: unknown): boolean {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e instanceof errors.AuthorizationError || /authorization/i.test(e.message)) {
      return true;
    }
  }
  return false;
}

/**
 * Connect as `credentials`' user.
 *
 * @throws Unauthorized the broker refused the user (at once: asking again cannot help).
 * @throws ClientError the broker cannot be reached (`lockgate.unavailable`).
 */
async function open(url: string, credentials: Credentials | null): Promise<NatsConnection> {
  const user = credentials?.user ?? "anonymous";
  try {
    return await natsConnect({
      servers: url.split(",").map((u) => u.trim()).filter(Boolean),
      name: `gateway.${user}`,
      maxReconnectAttempts: 3,
      timeout: 2_000,
      ...(credentials !== null
        ? { user: credentials.user, pass: credentials.password, inboxPrefix: credentials.inbox_prefix }
        : {}),
    });
  } catch (error) {
    if (isAuthorization(error)) {
      throw new Unauthorized(`the broker at ${url} refused the credentials of ${user}: `
        + "a user it does not know or a wrong password");
    }
    throw new ClientError(`cannot connect to ${url}: ${String(error)}`, "lockgate.unavailable");
  }
}

/**
 * Connect to Lockgate's broker as one user (and, to open runs, as the trusted host).
 *
 * @throws Unauthorized the broker refused the credentials (or their absence).
 * @throws ClientError the broker cannot be reached, or a credentials file or user is unusable.
 */
export async function connect(options: ConnectOptions = {}): Promise<Gateway> {
  const { credentials, host } = options;
  const found = options.url === undefined || host === true || namesAUser(credentials) || namesAUser(host);
  const local = found ? findLocal(options.url, options.varDir) : null;
  const url = options.url ?? local?.url ?? DEFAULT_URL;
  const creds = resolveCredentials(credentials, local);
  const hostCreds = resolveCredentials(host === true ? "host" : host, local);
  const nc = await open(url, creds);
  let hostNc: NatsConnection | null = null;
  if (hostCreds !== null) {
    try {
      hostNc = await open(url, hostCreds);
    } catch (error) {
      await nc.close();
      throw error;
    }
  }
  return new Gateway(nc, {
    hostNc,
    timeoutMs: options.timeoutMs ?? 5_000,
    jsPrefix: creds?.js_prefix ?? JS_API,
    user: creds?.user ?? "anonymous",
    principal: creds?.principal ?? "",
  });
}
