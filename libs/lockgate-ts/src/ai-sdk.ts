/**
 * Lockgate under the Vercel AI SDK (`ai` 7): a run's tools as a `ToolSet` whose effects
 * Lockgate decides.
 *
 * On the trusted host's side:
 *
 *     const run = await gateway.openRun({ tenant: "tenant-a", actor: "user-42",
 *                                         context: { case_id: "case-123" }, capabilities: ["case.add_note"] });
 *     const lockgate = await governedTools(run);
 *     const agent = new ToolLoopAgent({ model, tools: lockgate.tools, toolApproval: lockgate.toolApproval });
 *     let messages: ModelMessage[] = [{ role: "user", content: "Note that the customer called back." }];
 *     let result = await agent.generate({ messages });
 *     messages = [...messages, ...result.responseMessages];
 *     while (lockgate.waiting(messages).length > 0) {       // Lockgate holds a call for its reviewer
 *       messages = await lockgate.resume(messages, { waitMs: 300_000 });  // asks Lockgate; authorizes nothing
 *       result = await agent.generate({ messages });        // the SDK's own continuation
 *       messages = [...messages, ...result.responseMessages];
 *     }
 *
 * How a call goes: the SDK asks the call's `toolApproval` first, which proposes it to
 * Lockgate (the SDK's tool-call id as call id) and asks for the SDK's approval only when
 * Lockgate waits for its reviewer: that approval request is the pause. Otherwise (and once
 * the pause is answered) the tool's `execute` proposes the same call again, the same intent,
 * and returns Lockgate's answer as the model may read it: executed (the world's result nested
 * as untrusted data), or refused (a bad argument, a policy's denial, a reviewer's no). No
 * exception reaches the agent's loop, and no internal reason reaches the model.
 *
 * `resume` answers the SDK's approval requests that are Lockgate's once Lockgate's reviewer has
 * decided them: its "approved" only lets the tool ask Lockgate again, never authorizes the
 * effect. Where the SDK's approval could not say what Lockgate means, this is how it is taken:
 *
 * - An approval the application writes itself (`approved: true`) authorizes nothing: the SDK
 *   then runs the tool, which asks Lockgate; while its reviewer has not decided, the model
 *   reads that the call waits for a reviewer, and nothing happens.
 * - A denial the application writes itself (`approved: false`, the app's user said no) is the
 *   SDK's to tell the model (`execution-denied`); `resume` withdraws Lockgate's candidate, so
 *   no reviewer approves an effect nobody waits for (closing the run does too).
 * - The tools and `toolApproval` are handed the arguments the SDK parsed, not the model's
 *   text, so every proposal of a call sends one serialization of them (`proposedArguments`):
 *   the same bytes before the pause, on the resume and in another process. Text that is no
 *   JSON at all never reaches a tool: the SDK answers the model with its own parse error, and
 *   nothing is proposed.
 * - Without `toolApproval` the SDK never pauses: a call Lockgate holds is answered at once,
 *   and the model reads that it waits for a reviewer.
 */

import {
  jsonSchema,
  tool,
  type JSONSchema7,
  type JSONValue,
  type ModelMessage,
  type SingleToolApprovalFunction,
  type ToolApprovalResponse,
  type ToolApprovalStatus,
  type ToolCallPart,
  type ToolSet,
} from "ai";

import { ClientError, ResponseTimeout } from "./errors.js";
import { callIdFor, intentIdFor } from "./ids.js";
import type { Run, Turn } from "./run.js";
import type { ModelResponse, Tool } from "./wire/messages.js";

/** Statuses of a call that waits for someone (a reviewer, or policy's evidence). */
const WAITING: ReadonlySet<string> = new Set(["pending_approval", "paused"]);
/** Statuses of a call whose end is not known yet: asked again until they settle. */
const SETTLING: ReadonlySet<string> = new Set(["withdrawal_requested", "interruption_requested"]);
/** How long a proposal waits for a call that is settling (not for one that waits for a person). */
const SETTLE_MS = 30_000;
/** How a result is labelled for the model: data from the world, not instructions. */
const RESULT_LABEL = "untrusted-data";

/** What `governedTools` is told. */
export interface GovernedToolsOptions {
  /**
   * How long a call's first proposal waits for a quick review before the SDK pauses on it
   * (0, the default: it pauses at once).
   */
  waitMs?: number;
}

/** What `resume` is told. */
export interface ResumeOptions {
  /** How long to wait for Lockgate's reviewer to decide the calls that wait (0: ask once). */
  waitMs?: number;
}

/** A call the SDK paused on because Lockgate holds it for its reviewer. */
export interface HeldCall {
  /** The SDK's approval request's id. */
  approvalId: string;
  /** The SDK's tool-call id (Lockgate's call id is `callIdFor` of it). */
  toolCallId: string;
  /** The capability called (`case.add_note`), not the name the model was offered. */
  capability: string;
  /** The arguments as the SDK parsed them: what is proposed again (`proposedArguments`). */
  input: unknown;
  /**
   * What a reviewer decides: `lockgate review approve <candidateId> ...`. The call's own
   * candidate; in `StillWaiting`, once a reviewer's edit replaced it, the edited call's.
   */
  candidateId: string;
}

/** The calls `resume` waited for and that still wait for Lockgate's reviewer. */
export class StillWaiting extends ResponseTimeout {
  constructor(readonly held: readonly HeldCall[]) {
    super(`still waiting for a reviewer: ${held.map((call) => call.candidateId).join(", ")}`);
  }
}

/**
 * What became of one call, as the model may learn it.
 *
 * `response` is the call's own answer; `replacement` the answer to the call a reviewer's
 * edit made of it (status `replaced`), when there is one.
 */
class Outcome {
  constructor(
    readonly response: ModelResponse,
    readonly replacement: ModelResponse | null = null,
  ) {}

  /** The answer that says how it ended: the replacement's, for an edited call. */
  get final(): ModelResponse {
    return this.replacement ?? this.response;
  }

  /** True while a person (or policy's evidence) has yet to decide. */
  get pending(): boolean {
    return WAITING.has(this.final.status);
  }

  /** True when the effect happened (the edited call's, for a replaced one). */
  get executed(): boolean {
    return this.final.status === "executed";
  }

  /** True when it did not run and will not (rejected, denied, withdrawn, unavailable, ...). */
  get refused(): boolean {
    const status = this.final.status;
    return !WAITING.has(status) && !SETTLING.has(status) && status !== "executed"
      && status !== "outcome_unknown";
  }

  /**
   * The model-facing projection: status, code, a result nested as untrusted data; a waiting
   * call says so, a replaced call what its replacement did.
   */
  content(): { [key: string]: JSONValue } {
    const content = modelContent(this.response);
    if (WAITING.has(this.response.status)) {
      content["message"] = waitingMessage(this.response.status);
    }
    if (this.replacement !== null) {
      content["message"] = "A reviewer changed this call; the changed call is what was proposed instead.";
      content["replacement"] = modelContent(this.replacement);
    }
    return content;
  }
}

/**
 * Open a turn of `run` and offer its catalogue to the AI SDK.
 *
 * @param run opened by the trusted host: tenant, actor, context and capabilities are never
 *   the model's. A run opened elsewhere is taken up with `gateway.run({ tenant, runId })`.
 * @param options `waitMs`: how long a first proposal waits for a quick review.
 * @throws ClientError `provider.tool-names-collide`: two capabilities would be offered under
 *   one name.
 * @throws Refused the turn was refused (`run.ended`, ...).
 */
export async function governedTools(run: Run, options: GovernedToolsOptions = {}): Promise<GovernedTools> {
  return new GovernedTools(run, await run.openTurn(), options);
}

/**
 * A run's tools for the AI SDK (`tools`, `toolApproval`), and the host's side of a review's
 * pause (`waiting`, `resume`). Calling a tool never runs anything here: Lockgate decides,
 * and its adapters alone perform the effect.
 */
export class GovernedTools {
  /** The turn's catalogue, one tool per capability, under provider-safe names. */
  readonly tools: ToolSet;
  /** The SDK's approval asks Lockgate: a pause only while Lockgate's reviewer decides. */
  readonly toolApproval: Record<string, SingleToolApprovalFunction<unknown, unknown, unknown>>;
  /** The capability each offered name stands for (`case__add_note` → `case.add_note`). */
  readonly names: ReadonlyMap<string, string>;
  private readonly waitMs: number;
  /** Answers that cannot change (executed, refused), by call id, capability and arguments. */
  private readonly settled = new Map<string, Outcome>();

  constructor(readonly run: Run, readonly turn: Turn, options: GovernedToolsOptions = {}) {
    this.waitMs = options.waitMs ?? 0;
    this.names = toolNames(turn.tools);
    const tools: ToolSet = {};
    const approvals: Record<string, SingleToolApprovalFunction<unknown, unknown, unknown>> = {};
    for (const entry of turn.tools) {
      const offered = providerToolName(entry.name);
      tools[offered] = this.tool(entry);
      approvals[offered] = async (input, { toolCallId }) => {
        const outcome = await this.ask(entry.name, input, toolCallId, this.waitMs);
        return approvalStatus(outcome);
      };
    }
    this.tools = tools;
    this.toolApproval = approvals;
  }

  /**
   * The calls in `messages` the SDK paused on for Lockgate's reviewer and that nobody answered
   * yet: while there are any, `resume` before the SDK continues.
   */
  waiting(messages: readonly ModelMessage[]): HeldCall[] {
    const { requests, answered } = this.history(messages);
    return requests.filter((held) => !answered.has(held.approvalId));
  }

  /**
   * The history to continue with once Lockgate has decided every call the SDK paused on for it.
   *
   * Each paused call is proposed again (the same call: its intent's current answer), for up to
   * `waitMs` until the reviewer decides. A call Lockgate decided is answered in the SDK as
   * approved, which only lets the tool ask Lockgate again, where it reads that answer:
   * executed once, or refused (the reviewer said no, the review expired or was withdrawn). A
   * paused call the application's user denied in the SDK is withdrawn from Lockgate.
   *
   * @returns `messages` with the answers added to its last tool message (a new one when the
   *   last is not one); `messages` itself is not changed.
   * @throws StillWaiting (a `ResponseTimeout`) a reviewer has not decided within `waitMs`:
   *   keep `messages` and resume later, in this process or another.
   */
  async resume(messages: readonly ModelMessage[], options: ResumeOptions = {}): Promise<ModelMessage[]> {
    const { requests, answered, denied } = this.history(messages);
    for (const held of requests.filter((request) => denied.has(request.approvalId))) {
      const latest = await this.run.response(held.candidateId);
      if (latest !== null && WAITING.has(latest.status)) {
        await this.run.withdraw(held.candidateId, { why: "the application's user denied the call" });
      }
    }
    const deadline = Date.now() + (options.waitMs ?? 0);
    const answers: ToolApprovalResponse[] = [];
    const still: HeldCall[] = [];
    for (const held of requests.filter((request) => !denied.has(request.approvalId))) {
      const left = Math.max(0, deadline - Date.now());
      const outcome = await this.ask(held.capability, held.input, held.toolCallId, left);
      if (outcome.pending) {
        // After a reviewer's edit, what waits is the edited call: the one left to decide.
        still.push({ ...held, candidateId: outcome.final.candidate_id });
      } else if (!answered.has(held.approvalId)) {
        answers.push({ type: "tool-approval-response", approvalId: held.approvalId, approved: true,
          reason: `Lockgate decided: ${outcome.final.status}` });
      }
    }
    if (still.length > 0) {
      throw new StillWaiting(still);
    }
    return withAnswers(messages, answers);
  }

  /** The answer for one call, proposed (again) as the SDK handed it; never a second effect. */
  private async ask(capability: string, input: unknown, toolCallId: string, waitMs: number): Promise<Outcome> {
    const args = proposedArguments(input);
    const key = JSON.stringify([toolCallId, capability, args]);
    const known = this.settled.get(key);
    if (known !== undefined) {
      return known;
    }
    const response = await this.turn.propose({ tool: capability, arguments: args, callId: callIdFor(toolCallId) });
    const outcome = await this.followed(response, waitMs);
    if (outcome.executed || outcome.refused) {
      this.settled.set(key, outcome);
    }
    return outcome;
  }

  /**
   * Follow a call to where the model should learn of it: past a settling status, through a
   * reviewer's edit to its replacement, and, for up to `waitMs`, past a review.
   */
  private async followed(first: ModelResponse, waitMs: number): Promise<Outcome> {
    const deadline = Date.now() + waitMs;
    let response = first;
    for (;;) {
      response = await this.past(response, SETTLING, SETTLE_MS);
      let replacement: ModelResponse | null = null;
      if (response.status === "replaced" && response.successor) {
        replacement = await this.run.wait(response.successor, { past: "", timeoutMs: SETTLE_MS });
        replacement = await this.past(replacement, SETTLING, SETTLE_MS);
      }
      const outcome = new Outcome(response, replacement);
      const left = deadline - Date.now();
      if (!outcome.pending || left <= 0) {
        return outcome;
      }
      const decided = await this.past(outcome.final, WAITING, left);
      if (WAITING.has(decided.status)) {
        return outcome; // still waiting when the time was up
      }
      if (replacement === null) {
        response = decided; // decided, edited or withdrawn: follow it once more
        continue;
      }
      return new Outcome(response, await this.past(decided, SETTLING, SETTLE_MS));
    }
  }

  /** The latest answer once its status is not one of `statuses` (or after `waitMs`). */
  private async past(response: ModelResponse, statuses: ReadonlySet<string>, waitMs: number): Promise<ModelResponse> {
    if (!statuses.has(response.status) || waitMs <= 0) {
      return response;
    }
    try {
      return await this.run.wait(response.candidate_id, { past: response.status, timeoutMs: waitMs });
    } catch (error) {
      if (!(error instanceof ResponseTimeout)) {
        throw error;
      }
      return (await this.run.response(response.candidate_id)) ?? response;
    }
  }

  /** The SDK tool for one catalogue entry: its description and JSON Schema as Lockgate offers them. */
  private tool(entry: Tool): ToolSet[string] {
    return tool({
      description: entry.description,
      inputSchema: jsonSchema<unknown>(entry.parameters as JSONSchema7),
      execute: async (input, { toolCallId }) => (await this.ask(entry.name, input, toolCallId, 0)).content(),
    });
  }

  /**
   * What `messages` says of this run's tools' approvals: the requests not yet continued, and
   * the ids of those answered and of those denied.
   */
  private history(messages: readonly ModelMessage[]): {
    requests: HeldCall[];
    answered: Set<string>;
    denied: Set<string>;
  } {
    const calls = new Map<string, ToolCallPart>();
    const results = new Set<string>();
    const requests: HeldCall[] = [];
    const answered = new Set<string>();
    const denied = new Set<string>();
    for (const message of messages) {
      if ((message.role !== "assistant" && message.role !== "tool") || typeof message.content === "string") {
        continue;
      }
      for (const part of message.content) {
        if (part.type === "tool-call") {
          calls.set(part.toolCallId, part);
        } else if (part.type === "tool-result") {
          results.add(part.toolCallId);
        } else if (part.type === "tool-approval-request") {
          const call = calls.get(part.toolCallId);
          const capability = this.names.get(call?.toolName ?? "");
          if (call !== undefined && capability !== undefined) {
            requests.push({ approvalId: part.approvalId, toolCallId: part.toolCallId, capability, input: call.input,
              candidateId: intentIdFor(this.run.tenant, this.run.id, callIdFor(part.toolCallId)) });
          }
        } else if (part.type === "tool-approval-response") {
          answered.add(part.approvalId);
          if (!part.approved) {
            denied.add(part.approvalId);
          }
        }
      }
    }
    // A call with a result was continued already: nothing of it is left to answer.
    return { requests: requests.filter((held) => !results.has(held.toolCallId)), answered, denied };
  }
}

/**
 * The argument text proposed for a call the SDK handed over parsed as `input`: compact JSON
 * of it, keys in the order the parse kept, non-ASCII as it is. Every proposal of one call
 * (before a pause, on its resume, in another process) is the same bytes.
 */
export function proposedArguments(input: unknown): string {
  return JSON.stringify(input ?? {});
}

/**
 * The name a capability is offered under, since providers' tool names may not hold dots
 * (`case.add_note` → `case__add_note`). The way back goes through the turn's catalogue
 * (`GovernedTools.names`), never by replacing text.
 */
export function providerToolName(name: string): string {
  return name.replaceAll(".", "__");
}

/** The provider-facing name of every offered tool, mapped to its capability name. */
function toolNames(tools: readonly Tool[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const entry of tools) {
    const offered = providerToolName(entry.name);
    const taken = names.get(offered);
    if (taken !== undefined && taken !== entry.name) {
      throw new ClientError(`${entry.name} and ${taken} are both offered as ${offered}`,
        "provider.tool-names-collide");
    }
    names.set(offered, entry.name);
  }
  return names;
}

/** The SDK's approval status for Lockgate's answer: its approval is asked only for a review. */
function approvalStatus(outcome: Outcome): ToolApprovalStatus {
  const { status, candidate_id: candidateId } = outcome.final;
  return outcome.pending
    ? { type: "user-approval", reason: `${waitingMessage(status)} (candidate ${candidateId})` }
    : "not-applicable";
}

function waitingMessage(status: string): string {
  return status === "pending_approval"
    ? "Waiting for a reviewer: this call runs only once a person approves it."
    : "Paused: policy is waiting for evidence before this call may run.";
}

/**
 * What the model may read of a response: the model-facing projection, nothing else. A result
 * is nested under a key that says it is untrusted data; the ids and digest stay out.
 */
function modelContent(response: ModelResponse): { [key: string]: JSONValue } {
  const content: { [key: string]: JSONValue } = { status: response.status, code: response.code };
  if (response.field != null) {
    content["field"] = response.field;
  }
  if (response.persistent != null) {
    content["persistent"] = response.persistent;
  }
  if (response.alternatives != null) {
    content["alternatives"] = [...response.alternatives];
  }
  if (response.retry_after_s != null) {
    content["retry_after_s"] = response.retry_after_s;
  }
  if (response.result != null) {
    content["result"] = { untrusted_data: response.result as JSONValue };
    content["result_label"] = response.result_label ?? RESULT_LABEL;
  }
  return content;
}

/** `messages` with `answers` in its last tool message (a new one when the last is not one). */
function withAnswers(messages: readonly ModelMessage[], answers: ToolApprovalResponse[]): ModelMessage[] {
  const last = messages.at(-1);
  if (answers.length === 0) {
    return [...messages];
  }
  if (last?.role === "tool") {
    return [...messages.slice(0, -1), { ...last, content: [...last.content, ...answers] }];
  }
  return [...messages, { role: "tool", content: answers }];
}
