/**
 * The Vercel AI SDK with its tools behind Lockgate, against the real system.
 *
 * The agent is driven by the SDK's own mock model (`MockLanguageModelV4` from `ai/test`): no
 * live model, no network. Each scenario reads the case-notes world's ledger (which intent
 * wrote) and what the model was given back for its call (the tool result in the prompt of its
 * next step). Reviews are decided by the `lockgate` command, as a reviewer would.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  ToolLoopAgent,
  generateText,
  isStepCount,
  simulateReadableStream,
  streamText,
  type ModelMessage,
  type ToolSet,
} from "ai";
import { MockLanguageModelV4 } from "ai/test";

import { GovernedTools, StillWaiting, governedTools, proposedArguments } from "../src/ai-sdk.js";
import { connect, type Gateway, type Run } from "../src/index.js";
import { callIdFor, intentIdFor } from "../src/ids.js";
import { startSystem, type System } from "./harness.js";

const NOTE = "case.add_note";
/** How the model is offered `case.add_note` (provider tool names may not hold dots). */
const OFFERED = "case__add_note";
const TENANT = "tenant-a";

type Step = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;
type Prompt = MockLanguageModelV4["doGenerateCalls"][number]["prompt"];

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model step that calls `case.add_note` with `input` as its argument text. */
function call(toolCallId: string, input: string): Step {
  return {
    content: [{ type: "tool-call", toolCallId, toolName: OFFERED, input }],
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage: USAGE,
    warnings: [],
  };
}

function answer(text: string): Step {
  return {
    content: [{ type: "text", text }],
    finishReason: { unified: "stop", raw: "stop" },
    usage: USAGE,
    warnings: [],
  };
}

/** A model that calls `case.add_note` once, then ends its turn. */
function scripted(toolCallId: string, input: string): MockLanguageModelV4 {
  return new MockLanguageModelV4({ doGenerate: [call(toolCallId, input), answer("Done.")] });
}

function note(text: string): string {
  return JSON.stringify({ note: text });
}

/** The digest the case-notes world records of a note's text. */
function noteDigest(text: string): string {
  return "sha256:" + createHash("sha256").update(text, "utf8").digest("hex");
}

/** What the model was given back for `toolCallId` in `prompt`: the tool result's output. */
function resultIn(prompt: Prompt, toolCallId: string): unknown {
  const outputs = prompt.flatMap((message) => message.role === "tool" ? message.content : [])
    .flatMap((part) => part.type === "tool-result" && part.toolCallId === toolCallId ? [part.output] : []);
  assert.equal(outputs.length, 1, JSON.stringify(prompt));
  return outputs[0];
}

/** What the model read for `toolCallId` on its latest step, as JSON (the projection). */
function seen(model: MockLanguageModelV4, toolCallId: string): Record<string, unknown> {
  const last = model.doGenerateCalls.at(-1) ?? model.doStreamCalls.at(-1);
  assert.ok(last !== undefined, "the model was never called");
  const output = resultIn(last.prompt, toolCallId) as { type: string; value?: unknown };
  assert.equal(output.type, "json", JSON.stringify(output));
  return output.value as Record<string, unknown>;
}

describe("the Vercel AI SDK's tools behind Lockgate", () => {
  let system: System;
  let gw: Gateway;

  before(async () => {
    system = await startSystem();
    gw = await connect({ url: system.url, varDir: system.varDir, credentials: "agent-tenant-a", host: true });
  });

  after(async () => {
    await gw?.close();
    await system?.stop();
  });

  async function governed(caseId: string): Promise<Run> {
    return gw.openRun({ tenant: TENANT, actor: "user-42", context: { case_id: caseId }, capabilities: [NOTE] });
  }

  async function writesSince(before: number): Promise<string[]> {
    return (await system.ledger()).slice(before).map((row) => row.intent_id);
  }

  function notesAgent(lockgate: GovernedTools, model: MockLanguageModelV4): ToolLoopAgent<never, ToolSet> {
    return new ToolLoopAgent({ model, instructions: "Keep the case notes.", tools: lockgate.tools,
      toolApproval: lockgate.toolApproval });
  }

  /** Run the agent on `messages` and return the history it leaves. */
  async function step(agent: ToolLoopAgent<never, ToolSet>, messages: ModelMessage[]): Promise<ModelMessage[]> {
    const result = await agent.generate({ messages });
    return [...messages, ...result.responseMessages];
  }

  const ask = (text: string): ModelMessage[] => [{ role: "user", content: text }];

  // --- answered at once ---------------------------------------------------------------

  test("the model is offered the catalogue and an executed call is Lockgate's", async () => {
    const run = await governed("case-123");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_exec_1", note("Called back."));
    const before = (await system.ledger()).length;
    const messages = await step(notesAgent(lockgate, model), ask("Note the call-back."));

    assert.deepEqual(lockgate.waiting(messages), []);
    const offered = model.doGenerateCalls[0]?.tools ?? [];
    const [catalogue] = lockgate.turn.tools;
    assert.deepEqual(offered.map((t) => t.name), [OFFERED]);
    const [only] = offered;
    assert.ok(only?.type === "function" && catalogue !== undefined);
    assert.deepEqual(only.inputSchema, catalogue.parameters); // Lockgate's schema, not rewritten
    assert.equal(only.description, catalogue.description);
    const shown = seen(model, "call_ai_exec_1");
    assert.equal(shown["status"], "executed");
    assert.ok("untrusted_data" in (shown["result"] as object));
    // The effect is Lockgate's: its intent for this run's call id wrote, once, and what the
    // model read is that intent's answer, projected.
    const candidateId = intentIdFor(TENANT, run.id, "call_ai_exec_1");
    assert.deepEqual(await writesSince(before), [candidateId]);
    const latest = await run.response(candidateId);
    assert.ok(latest !== null);
    assert.deepEqual(Object.keys(shown).sort(), ["code", "result", "result_label", "status"]);
    assert.deepEqual(shown["result"], { untrusted_data: latest.result });
    assert.equal(shown["code"], latest.code);
    await run.close();
  });

  test("a tool-call id that is no call id is mapped to one stable id", async () => {
    const run = await governed("case-123");
    const model = scripted("fc:7/step 3#1", note("Odd ids too."));
    const before = (await system.ledger()).length;
    const lockgate = await governedTools(run);
    await generateText({ model, prompt: "Note it.", tools: lockgate.tools, toolApproval: lockgate.toolApproval,
      stopWhen: isStepCount(2) });
    assert.equal(seen(model, "fc:7/step 3#1")["status"], "executed");
    assert.deepEqual(await writesSince(before), [intentIdFor(TENANT, run.id, callIdFor("fc:7/step 3#1"))]);
    await run.close();
  });

  test("a refusal is what the model reads and the run goes on", async () => {
    const run = await governed("case-123");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_empty_1", '{"note": ""}');
    const before = (await system.ledger()).length;
    const result = await notesAgent(lockgate, model).generate({ prompt: "Add an empty note." });

    assert.equal(result.text, "Done."); // no exception: the model read the refusal and went on
    const shown = seen(model, "call_ai_empty_1");
    assert.equal(shown["status"], "rejected");
    assert.equal(shown["code"], "argument.note.empty");
    assert.deepEqual(lockgate.waiting(result.responseMessages), []); // answered without a person
    assert.deepEqual(await writesSince(before), []);
    await run.close();
  });

  test("a policy denial reaches the model without its internal reason", async () => {
    const run = await governed("case-closed");
    const model = scripted("call_ai_closed_1", note("Reopen it."));
    const before = (await system.ledger()).length;
    await step(notesAgent(await governedTools(run), model), ask("Reopen the case."));

    const shown = seen(model, "call_ai_closed_1");
    assert.equal(shown["status"], "unavailable");
    assert.ok(!JSON.stringify(shown).includes("case.closed"));
    assert.deepEqual(await writesSince(before), []);
    await run.close();
  });

  // --- a review is the SDK's approval request -----------------------------------------

  test("a review pauses the SDK, and an approved call runs once on the resume", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_review_1", note("Refund agreed."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    let messages = await step(agent, ask("Record the refund."));

    const [held] = lockgate.waiting(messages);
    const candidateId = intentIdFor(TENANT, run.id, "call_ai_review_1");
    assert.ok(held !== undefined && held.candidateId === candidateId && held.capability === NOTE);
    assert.equal(model.doGenerateCalls.length, 1); // paused before the model read on
    // Nobody decided yet: resuming says so, and nothing is answered in the SDK.
    await assert.rejects(lockgate.resume(messages), (error) => error instanceof StillWaiting
      && error.held[0]?.candidateId === candidateId);
    assert.deepEqual(await writesSince(before), []);

    await system.review("approve", candidateId);
    messages = await lockgate.resume(messages, { waitMs: 20_000 });
    messages = await step(agent, messages);
    assert.equal(seen(model, "call_ai_review_1")["status"], "executed");
    assert.deepEqual(lockgate.waiting(messages), []);
    assert.deepEqual(await writesSince(before), [candidateId]);
    await run.close();
  });

  test("a denied review is what the resumed model reads", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_review_2", note("Close everything."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    let messages = await step(agent, ask("Close everything."));
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    await system.review("deny", held.candidateId, "--why", "not now");
    messages = await step(agent, await lockgate.resume(messages, { waitMs: 20_000 }));
    const shown = seen(model, "call_ai_review_2");
    assert.equal(shown["status"], "unavailable");
    assert.ok(!JSON.stringify(shown).includes("not now"));
    assert.deepEqual(await writesSince(before), []);
    await run.close();
  });

  test("a reviewer's edit is what the resumed model reads, and only the edited call writes", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_edit_1", note("Customer Jane Doe, DOB 1970-01-01, escalated."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    let messages = await step(agent, ask("Escalate."));
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    await system.review("edit", held.candidateId, "--arguments", note("Escalated."), "--why", "no personal data");
    const replaced = await run.wait(held.candidateId, { past: "pending_approval", timeoutMs: 20_000 });
    const successor = replaced.successor;
    assert.ok(replaced.status === "replaced" && successor, JSON.stringify(replaced));
    // The edited call waits for its own approval: that is the candidate a reviewer decides now.
    await assert.rejects(lockgate.resume(messages), (error) => error instanceof StillWaiting
      && error.held.length === 1 && error.held[0]?.candidateId === successor);
    assert.deepEqual(await writesSince(before), []);

    await system.review("approve", successor);
    messages = await step(agent, await lockgate.resume(messages, { waitMs: 20_000 }));
    assert.deepEqual(lockgate.waiting(messages), []);
    const shown = seen(model, "call_ai_edit_1");
    assert.equal(shown["status"], "replaced");
    assert.match(String(shown["message"]), /A reviewer changed this call/);
    const replacement = shown["replacement"] as Record<string, unknown>;
    assert.equal(replacement["status"], "executed");
    const done = await run.response(successor);
    assert.ok(done !== null);
    assert.deepEqual(replacement["result"], { untrusted_data: done.result });
    assert.ok(!JSON.stringify(shown).includes("no personal data")); // the reviewer's reason stays inside
    // One write, by the edited call, of the edited text.
    const writes = (await system.ledger()).slice(before);
    assert.deepEqual(writes.map((row) => [row.intent_id, row.note_digest]), [[successor, noteDigest("Escalated.")]]);
    await run.close();
  });

  test("the SDK's own approval authorizes nothing", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_bare_1", note("Approved by nobody."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    const messages = await step(agent, ask("Note it."));
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    // The application approves in the SDK, without Lockgate's reviewer.
    await step(agent, [...messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: held.approvalId, approved: true }] }]);
    const shown = seen(model, "call_ai_bare_1");
    assert.equal(shown["status"], "pending_approval");
    assert.match(String(shown["message"]), /Waiting for a reviewer/);
    assert.deepEqual(await writesSince(before), []);
    await run.close(); // withdraws what it left waiting
    assert.deepEqual(await writesSince(before), []);
  });

  test("an approval by the application's user still waits for Lockgate's reviewer", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_user_ok_1", note("The user said yes."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    let messages = await step(agent, ask("Note it."));
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    messages = [...messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: held.approvalId, approved: true }] }];
    await assert.rejects(lockgate.resume(messages), StillWaiting); // the user's yes is not the reviewer's
    assert.deepEqual(await writesSince(before), []);
    await system.review("approve", held.candidateId);
    const resumed = await lockgate.resume(messages, { waitMs: 20_000 });
    assert.deepEqual(resumed, messages); // answered already: the application's answer stands
    await step(agent, resumed);
    assert.equal(seen(model, "call_ai_user_ok_1")["status"], "executed");
    assert.deepEqual(await writesSince(before), [held.candidateId]);
    await run.close();
  });

  test("a denial by the application's user in the SDK withdraws Lockgate's candidate", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const model = scripted("call_ai_nope_1", note("The user said no."));
    const agent = notesAgent(lockgate, model);
    const before = (await system.ledger()).length;
    let messages = await step(agent, ask("Note it."));
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    messages = [...messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: held.approvalId, approved: false }] }];
    assert.deepEqual(lockgate.waiting(messages), []);
    messages = await step(agent, await lockgate.resume(messages));
    const shown = resultIn(model.doGenerateCalls.at(-1)?.prompt ?? [], "call_ai_nope_1") as { type: string };
    assert.equal(shown.type, "execution-denied"); // the SDK's own answer to its own denial
    // The stored response follows the withdrawal's answer by a moment.
    const stored = await run.wait(held.candidateId, { past: "pending_approval", timeoutMs: 5_000 });
    assert.equal(stored.status, "withdrawn");
    await assert.rejects(system.review("approve", held.candidateId, "--within", "0")); // nothing left to approve
    assert.deepEqual(await writesSince(before), []);
    await run.close();
  });

  test("resumed twice from the same history is one effect", async () => {
    const run = await governed("case-sensitive");
    const model = scripted("call_ai_twice_1", note("Twice is once."));
    const first = await governedTools(run);
    const before = (await system.ledger()).length;
    let messages = await step(notesAgent(first, model), ask("Note it."));
    const candidateId = intentIdFor(TENANT, run.id, "call_ai_twice_1");
    await system.review("approve", candidateId);
    messages = await first.resume(messages, { waitMs: 20_000 });

    for (let i = 0; i < 2; i++) { // two continuations of the same history, each with tools of its own
      const again = await governedTools(gw.run({ tenant: TENANT, runId: run.id }));
      const resumed = new MockLanguageModelV4({ doGenerate: [answer("Done.")] });
      await step(notesAgent(again, resumed), messages);
      assert.equal(seen(resumed, "call_ai_twice_1")["status"], "executed");
    }
    assert.deepEqual(await writesSince(before), [candidateId]);
    await run.close();
  });

  test("streamText pauses and resumes the same way", async () => {
    const run = await governed("case-sensitive");
    const lockgate = await governedTools(run);
    const chunks = (toolCallId: string, input: string) => [
      { type: "stream-start" as const, warnings: [] },
      { type: "tool-call" as const, toolCallId, toolName: OFFERED, input },
      { type: "finish" as const, finishReason: { unified: "tool-calls" as const, raw: "tool_calls" }, usage: USAGE },
    ];
    const text = [
      { type: "stream-start" as const, warnings: [] },
      { type: "text-start" as const, id: "t" }, { type: "text-delta" as const, id: "t", delta: "Done." },
      { type: "text-end" as const, id: "t" },
      { type: "finish" as const, finishReason: { unified: "stop" as const, raw: "stop" }, usage: USAGE },
    ];
    const stream = <T>(parts: T[]) => ({ stream: simulateReadableStream({ chunks: parts, chunkDelayInMs: null }) });
    const model = new MockLanguageModelV4({
      doStream: [stream(chunks("call_ai_stream_1", note("Streamed."))), stream(text)],
    });
    const before = (await system.ledger()).length;
    let messages = ask("Note it.");
    const { tools, toolApproval } = lockgate;
    let result = streamText({ model, messages, tools, toolApproval });
    messages = [...messages, ...(await result.responseMessages)];
    const [held] = lockgate.waiting(messages);
    assert.ok(held !== undefined);

    await system.review("approve", held.candidateId);
    messages = await lockgate.resume(messages, { waitMs: 20_000 });
    result = streamText({ model, messages, tools, toolApproval });
    assert.equal(await result.text, "Done.");
    assert.equal(seen(model, "call_ai_stream_1")["status"], "executed");
    assert.deepEqual(await writesSince(before), [held.candidateId]);
    await run.close();
  });
});

test("every proposal of a call is the same bytes", () => {
  const parsed = JSON.parse('{ "note" : "Caf\\u00e9 \u2615",  "n": 1.50 }') as unknown;
  assert.equal(proposedArguments(parsed), '{"note":"Café ☕","n":1.5}');
  assert.equal(proposedArguments(JSON.parse(proposedArguments(parsed))), proposedArguments(parsed));
  assert.equal(proposedArguments(undefined), "{}");
});
