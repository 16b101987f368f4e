/**
 * The ids this client computes are byte for byte the ones Lockgate's Python code computes
 * for the same inputs: the vectors are computed by that code, now, not copied.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { before, describe, test } from "node:test";

import { callDigest, callIdFor, derivedId, intentIdFor, reusedCallIdIntent } from "../src/ids.js";
import { python, REPO_DIR } from "./harness.js";

/** Text that tests the encoding: non-ASCII, astral (a surrogate pair), lone surrogates, separators. */
const TEXTS = [
  "call_1", "", "toolu_01ABC", "é漢字", "\uD83D\uDE00", "\uD800", "x\uDC00y", "\uDE00\uD83D",
  "a\x1fb", "\u2028", "run:7/step:3 tool#1", "a".repeat(64), "a".repeat(65), "x.y", "{\"note\": \"Called back.\"}",
];

const PYTHON = `
import json, sys
from lockgate.core.ids import call_digest, derived_id, intent_id_for, reused_call_id_intent
from lockgate.integrations.governed import call_id_for
texts = json.load(sys.stdin)
print(json.dumps({
    "derived": [derived_id(a, b) for a in texts for b in texts[:4]],
    "intent": [intent_id_for("tenant-a", "run1", t) for t in texts],
    "digest": [call_digest(call_id=t, tool="case.add_note", arguments=a, assembly_failure=f)
               for t in texts[:3] for a in texts for f in (None, "", "stream.truncated")],
    "reused": [reused_call_id_intent("tenant-a", "run1", t, "sha256:00") for t in texts],
    "call_id": [call_id_for(t) for t in texts],
}))
`;

interface Vectors {
  derived: string[];
  intent: string[];
  digest: string[];
  reused: string[];
  call_id: string[];
}

describe("ids computed as Python computes them", () => {
  let py: Vectors;

  before(() => {
    // JSON carries a lone surrogate as an escape both languages read back unchanged.
    const out = execFileSync(python(), ["-c", PYTHON], { cwd: REPO_DIR, input: JSON.stringify(TEXTS) });
    py = JSON.parse(out.toString("utf8")) as Vectors;
  });

  test("derived ids", () => {
    assert.deepEqual(TEXTS.flatMap((a) => TEXTS.slice(0, 4).map((b) => derivedId(a, b))), py.derived);
  });

  test("intent ids of call ids", () => {
    assert.deepEqual(TEXTS.map((t) => intentIdFor("tenant-a", "run1", t)), py.intent);
  });

  test("call digests, with and without an assembly failure", () => {
    const ours = TEXTS.slice(0, 3).flatMap((callId) => TEXTS.flatMap((args) =>
      [null, "", "stream.truncated"].map((assemblyFailure) =>
        callDigest({ callId, tool: "case.add_note", arguments: args, assemblyFailure }))));
    assert.deepEqual(ours, py.digest);
  });

  test("the intent of a reused call id", () => {
    assert.deepEqual(TEXTS.map((t) => reusedCallIdIntent("tenant-a", "run1", t, "sha256:00")), py.reused);
  });

  test("call ids of framework tool-call ids", () => {
    assert.deepEqual(TEXTS.map(callIdFor), py.call_id);
    assert.equal(callIdFor("call_abc-123"), "call_abc-123");
    assert.match(callIdFor("run:7/step:3 tool#1"), /^fw-[0-9a-f]{40}$/);
  });
});
