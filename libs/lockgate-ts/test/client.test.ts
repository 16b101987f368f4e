/**
 * The client against the real system: what the model sees of each call, what reached the
 * world (the case-notes ledger) and what is on the record (the intent's stored events).
 *
 * The demo policy bundle decides by the run's case: `case-123` is written at once,
 * `case-sensitive` waits for a reviewer, `case-closed` is denied.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  CandidateTooLarge,
  connect,
  InvalidCandidate,
  MAX_CANDIDATE_MESSAGE_BYTES,
  PermissionDenied,
  Turn,
  Unauthorized,
  UnknownCandidate,
  type Gateway,
  type Run,
} from "../src/index.js";
import { callIdFor, intentIdFor } from "../src/ids.js";
import { startSystem, type System } from "./harness.js";

const TENANT = "tenant-a";
const NOTE = "case.add_note";

function note(text: string): string {
  return JSON.stringify({ note: text });
}

/** The digest the case-notes world records of a note's text. */
function noteDigest(text: string): string {
  return "sha256:" + createHash("sha256").update(text, "utf8").digest("hex");
}

describe("the client against the real system", () => {
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

  async function open(caseId = "case-123"): Promise<Run> {
    return gw.openRun({ tenant: TENANT, actor: "user-42", context: { case_id: caseId }, capabilities: [NOTE] });
  }

  /** The intent ids of the ledger's writes after the first `before`. */
  async function writesSince(before: number): Promise<string[]> {
    return (await system.ledger()).slice(before).map((row) => row.intent_id);
  }

  test("a turn offers the run's capabilities as the model's tools", async () => {
    const turn = await (await open()).openTurn();
    assert.deepEqual(turn.tools.map((t) => t.name), [NOTE]);
    const [tool] = turn.tools;
    assert.ok(tool !== undefined && tool.description.length > 0);
    assert.equal(tool.parameters["type"], "object");
    assert.ok("note" in (tool.parameters["properties"] as Record<string, unknown>));
    assert.match(turn.catalogueDigest, /^sha256:/);
  });

  test("an executed call is one write by its intent, under the id Python computes", async () => {
    const run = await open();
    const before = (await system.ledger()).length;
    const callId = callIdFor("call_exec_1");
    const done = await (await run.openTurn()).propose({ tool: NOTE, arguments: note("Called back."), callId });
    assert.equal(done.status, "executed");
    assert.equal(done.call_id, callId);
    assert.equal(done.candidate_id, intentIdFor(TENANT, run.id, callId));
    assert.equal(done.result_label, "untrusted-data");
    assert.deepEqual(await writesSince(before), [done.candidate_id]);
    const events = await system.events(TENANT, done.candidate_id);
    assert.equal(events[0], "CandidateReceived");
    assert.ok(events.includes("EffectCompleted"), String(events));
  });

  test("a run's whole course asks the broker only what the agent's and host's users are granted", async () => {
    const before = (await system.violations("EDGE")).length;
    const run = await open("case-sensitive");
    const turn = await run.openTurn();
    const waiting = await turn.propose({ tool: NOTE, arguments: note("Within the grants."), callId: "call_grants_1" });
    assert.equal(waiting.status, "pending_approval");
    assert.equal((await run.withdraw(waiting.candidate_id)).status, "withdrawn");
    await run.wait(waiting.candidate_id, { past: "pending_approval", timeoutMs: 5_000 });
    await run.close();
    assert.deepEqual((await system.violations("EDGE")).slice(before), []);
  });

  test("a bad argument is refused with the code Python sees, and nothing is written", async () => {
    const run = await open();
    const before = (await system.ledger()).length;
    const bad = await (await run.openTurn()).propose({ tool: NOTE, arguments: '{"note": ""}', callId: "call_bad_1" });
    assert.equal(bad.status, "rejected");
    assert.equal(bad.code, "argument.note.empty");
    assert.deepEqual(await writesSince(before), []);
  });

  test("a call policy denies is unavailable to the model, its internal reason unsaid", async () => {
    const run = await open("case-closed");
    const before = (await system.ledger()).length;
    const denied = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Reopen it."), callId: "call_denied_1",
    });
    assert.equal(denied.status, "unavailable");
    assert.ok(!JSON.stringify(denied).includes("case.closed"));
    assert.deepEqual(await writesSince(before), []);
  });

  test("a pending call runs once, after a reviewer approves it", async () => {
    const run = await open("case-sensitive");
    const before = (await system.ledger()).length;
    const waiting = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Refund agreed."), callId: "call_review_1",
    });
    assert.equal(waiting.status, "pending_approval");
    assert.deepEqual(await writesSince(before), []);
    await system.review("approve", waiting.candidate_id);
    const done = await run.wait(waiting.candidate_id, { past: "pending_approval", timeoutMs: 20_000 });
    assert.equal(done.status, "executed");
    assert.deepEqual(await writesSince(before), [waiting.candidate_id]);
  });

  test("a pending call a reviewer denies is unavailable, and nothing is written", async () => {
    const run = await open("case-sensitive");
    const before = (await system.ledger()).length;
    const waiting = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Close everything."), callId: "call_review_2",
    });
    assert.equal(waiting.status, "pending_approval");
    await system.review("deny", waiting.candidate_id);
    const denied = await run.wait(waiting.candidate_id, { past: "pending_approval", timeoutMs: 20_000 });
    assert.equal(denied.status, "unavailable");
    assert.ok((await system.events(TENANT, waiting.candidate_id)).includes("ReviewDenied"));
    assert.deepEqual(await writesSince(before), []);
  });

  test("a pending call a reviewer edits is replaced, and only the edited call is written", async () => {
    const run = await open("case-sensitive");
    const before = (await system.ledger()).length;
    const waiting = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Customer Jane Doe, DOB 1970-01-01, escalated."), callId: "call_edit_1",
    });
    assert.equal(waiting.status, "pending_approval");
    await system.review("edit", waiting.candidate_id, "--arguments", note("Escalated."), "--why", "no personal data");
    const replaced = await run.wait(waiting.candidate_id, { past: "pending_approval", timeoutMs: 20_000 });
    assert.equal(replaced.status, "replaced");
    const successor = replaced.successor;
    assert.ok(successor && successor !== waiting.candidate_id, JSON.stringify(replaced));
    // The edited call is a candidate of its own, and waits for its own approval.
    assert.equal((await run.wait(successor, { past: "", timeoutMs: 20_000 })).status, "pending_approval");
    assert.deepEqual(await writesSince(before), []);

    await system.review("approve", successor);
    const done = await run.wait(successor, { past: "pending_approval", timeoutMs: 20_000 });
    assert.equal(done.status, "executed");
    assert.equal((await run.response(waiting.candidate_id))?.status, "replaced");
    const writes = (await system.ledger()).slice(before);
    assert.deepEqual(writes.map((row) => [row.intent_id, row.note_digest]), [[successor, noteDigest("Escalated.")]]);
  });

  test("a retried call, in the same turn or a later one, is the same intent and one write", async () => {
    const run = await open();
    const before = (await system.ledger()).length;
    const call = { tool: NOTE, arguments: note("Once only."), callId: callIdFor("run:7/step:3 tool#1") };
    const first = await (await run.openTurn()).propose(call);
    const again = await (await run.openTurn()).propose(call);
    assert.equal(first.status, "executed");
    assert.deepEqual([again.candidate_id, again.status], [first.candidate_id, "executed"]);
    assert.deepEqual(await writesSince(before), [first.candidate_id]);
  });

  test("a call id reused with other bytes is refused, never answered with the first call's response", async () => {
    const run = await open();
    const turn = await run.openTurn();
    const first = await turn.propose({ tool: NOTE, arguments: note("First."), callId: "call_reuse_1" });
    const before = (await system.ledger()).length;
    const other = await turn.propose({ tool: NOTE, arguments: note("Second."), callId: "call_reuse_1" });
    assert.equal(first.status, "executed");
    assert.equal(other.status, "rejected");
    assert.equal(other.code, "proposal.invalid");
    assert.notEqual(other.candidate_id, first.candidate_id);
    assert.deepEqual(await writesSince(before), []);
  });

  test("a candidate too large is refused before anything is sent", async () => {
    const run = await open();
    const turn = await run.openTurn();
    const before = (await system.ledger()).length;
    const callId = "call_large_1";
    const huge = note("x".repeat(MAX_CANDIDATE_MESSAGE_BYTES));
    await assert.rejects(turn.propose({ tool: NOTE, arguments: huge, callId }),
      (error: unknown) => error instanceof CandidateTooLarge && error.code === "candidate.too-large");
    const intent = intentIdFor(TENANT, run.id, callId);
    assert.deepEqual(await system.events(TENANT, intent), []);
    assert.equal(await run.response(intent), null);
    assert.deepEqual(await writesSince(before), []);
  });

  test("a lone surrogate in the argument text is refused, never sent as U+FFFD", async () => {
    const run = await open();
    const turn = await run.openTurn();
    const callId = "call_surrogate_1";
    await assert.rejects(turn.propose({ tool: NOTE, arguments: '{"note": "\uD800"}', callId }),
      (error: unknown) => error instanceof InvalidCandidate && error.code === "candidate.malformed");
    // A well-formed pair is text like any other.
    const paired = await turn.propose({ tool: NOTE, arguments: note("\uD83D\uDE00"), callId: "call_surrogate_2" });
    assert.equal(paired.status, "executed");
    assert.deepEqual(await system.events(TENANT, intentIdFor(TENANT, run.id, callId)), []);
  });

  test("arguments that are not text are refused before anything is sent", async () => {
    const turn = await (await open()).openTurn();
    const object = { note: "an object, not the model's text" } as unknown as string;
    await assert.rejects(turn.propose({ tool: NOTE, arguments: object, callId: "call_object_1" }),
      (error: unknown) => error instanceof InvalidCandidate && error.code === "candidate.malformed");
  });

  test("a provider item nested deeper than intake reads is refused before anything is sent", async () => {
    const run = await open();
    let providerItem: Record<string, unknown> = {};
    for (let depth = 0; depth < 200; depth++) {
      providerItem = { inner: [providerItem] };
    }
    const callId = "call_deep_1";
    await assert.rejects((await run.openTurn()).propose({ tool: NOTE, arguments: note("Deep."), callId, providerItem }),
      (error: unknown) => error instanceof InvalidCandidate && error.code === "candidate.malformed");
    assert.deepEqual(await system.events(TENANT, intentIdFor(TENANT, run.id, callId)), []);
    // The provider's own item, as a provider sends it, is evidence like any other.
    const item = { id: "call_shallow_1", type: "function", function: { name: NOTE, arguments: note("Shallow.") } };
    const shallow = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Shallow."), callId: "call_shallow_1", providerItem: item, provider: "openai.chat",
      model: "a-model",
    });
    assert.equal(shallow.status, "executed");
  });

  test("a pending call withdrawn is withdrawn, and never written", async () => {
    const run = await open("case-sensitive");
    const before = (await system.ledger()).length;
    const waiting = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Never mind."), callId: "call_withdraw_1",
    });
    assert.equal(waiting.status, "pending_approval");
    const withdrawn = await run.withdraw(waiting.candidate_id, { why: "the user changed their mind" });
    assert.equal(withdrawn.status, "withdrawn");
    // The stored response follows the withdrawal's answer by a moment.
    const stored = await run.wait(waiting.candidate_id, { past: "pending_approval", timeoutMs: 5_000 });
    assert.equal(stored.status, "withdrawn");
    assert.ok((await system.events(TENANT, waiting.candidate_id)).includes("Withdrawn"));
    await assert.rejects(system.review("approve", waiting.candidate_id, "--within", "0"));
    assert.deepEqual(await writesSince(before), []);
  });

  test("closing a run withdraws what it left waiting", async () => {
    const run = await open("case-sensitive");
    const waiting = await (await run.openTurn()).propose({
      tool: NOTE, arguments: note("Nobody will wait for this."), callId: "call_left_1",
    });
    const closed = await run.close({ why: "done" });
    assert.equal(closed.run_id, run.id);
    assert.equal(closed.withdrawn?.[waiting.candidate_id], "withdrawn");
    const after = await run.wait(waiting.candidate_id, { past: "", timeoutMs: 5_000 });
    assert.equal(after.status, "withdrawn");
  });

  test("waiting on a call id instead of a candidate id is an unknown candidate", async () => {
    const run = await open();
    const done = await (await run.openTurn()).propose({ tool: NOTE, arguments: note("Known."), callId: "call_known_1" });
    assert.equal(done.status, "executed");
    await assert.rejects(run.wait("call_known_1"),
      (error: unknown) => error instanceof UnknownCandidate && error.code === "candidate.unknown");
  });

  test("the agent's own user may not open a run: only the trusted host may", async () => {
    const agent = await connect({ url: system.url, varDir: system.varDir, credentials: "agent-tenant-a" });
    try {
      await assert.rejects(
        agent.openRun({ tenant: TENANT, actor: "user-42", context: { case_id: "case-123" } }),
        (error: unknown) => error instanceof PermissionDenied && error.code === "lockgate.permission-denied"
          && error.subject === "lg.run.tenant-a.open",
      );
    } finally {
      await agent.close();
    }
  });

  test("a tenant's agent may not propose in another tenant's run, nor read its responses", async () => {
    const run = await open();
    const other = await connect({ url: system.url, varDir: system.varDir, credentials: "agent-tenant-b" });
    try {
      const theirs = other.run({ tenant: TENANT, runId: run.id });
      const turn = new Turn(theirs, "turn-1", "", []);
      await assert.rejects(turn.propose({ tool: NOTE, arguments: note("Not mine."), callId: "call_foreign_1" }),
        (error: unknown) => error instanceof PermissionDenied && error.subject === `lg.propose.${TENANT}.${run.id}`);
      await assert.rejects(theirs.response("c1"), (error: unknown) => error instanceof PermissionDenied);
    } finally {
      await other.close();
    }
  });

  test("credentials the broker does not know are refused at connect", async () => {
    const path = join(system.varDir, "credentials", "agent-tenant-a.json");
    const stolen = { ...JSON.parse(readFileSync(path, "utf8")), password: "wrong" };
    await assert.rejects(connect({ url: system.url, credentials: stolen }),
      (error: unknown) => error instanceof Unauthorized && error.code === "lockgate.unauthorized");
  });

  test("a credentials file is found by its path as well as by its user's name", async () => {
    const byPath = await connect({
      url: system.url, credentials: join(system.varDir, "credentials", "agent-tenant-a.json"),
      host: join(system.varDir, "credentials", "host.json"),
    });
    try {
      const run = await byPath.openRun({ tenant: TENANT, actor: "user-42", context: { case_id: "case-123" } });
      assert.ok((await run.openTurn()).tools.some((t) => t.name === NOTE));
    } finally {
      await byPath.close();
    }
  });
});
