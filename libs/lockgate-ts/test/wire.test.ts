/**
 * A change of the wire contract breaks this package's build, not a running client: the
 * client is compiled against types and subject builders generated from the repository's
 * schemas, so a schema whose required field is renamed, or a channel whose address is
 * re-shaped, makes `tsc` fail where the client builds that message or subject.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { PACKAGE_DIR, REPO_DIR } from "./harness.js";

/** The client's own sources (compiled here without the rest of the package). */
const SOURCES = ["connect.ts", "discovery.ts", "encoding.ts", "errors.ts", "gateway.ts", "ids.ts", "requests.ts",
  "run.ts", "subjects.ts", "wakeups.ts"];

/** `tsc` on the client's sources with the wire generated from `schemas`; its exit status and output. */
function build(root: string, schemas: string): { status: number | null; output: string } {
  const generated = spawnSync(process.execPath, [join(PACKAGE_DIR, "scripts", "generate.mjs"), schemas,
    join(root, "src", "wire")], { encoding: "utf8" });
  assert.equal(generated.status, 0, generated.stderr);
  const tsc = spawnSync(process.execPath, [join(PACKAGE_DIR, "node_modules", "typescript", "bin", "tsc"), "-p",
    join(root, "tsconfig.json")], { encoding: "utf8" });
  return { status: tsc.status, output: tsc.stdout + tsc.stderr };
}

interface AsyncApi {
  channels: Record<string, { address: string }>;
}

describe("the wire types and subjects come from the contract", () => {
  let root: string;

  /** A copy of the repository's contract (its messages and channels) for one test to change. */
  function contract(name: string): string {
    const schemas = join(root, name);
    cpSync(join(REPO_DIR, "schemas", "messages"), join(schemas, "messages"), { recursive: true });
    cpSync(join(REPO_DIR, "schemas", "asyncapi.json"), join(schemas, "asyncapi.json"));
    return schemas;
  }

  /** A copy of the contract whose channel at `address` is at `changed` instead. */
  function readdressed(name: string, address: string, changed: string): string {
    const schemas = contract(name);
    const path = join(schemas, "asyncapi.json");
    const asyncapi = JSON.parse(readFileSync(path, "utf8")) as AsyncApi;
    const channel = Object.values(asyncapi.channels).find((c) => c.address === address);
    assert.ok(channel !== undefined, `the contract has no channel ${address}`);
    channel.address = changed;
    writeFileSync(path, JSON.stringify(asyncapi));
    return schemas;
  }

  before(() => {
    // Inside the package, so the copy resolves the package's dependencies.
    root = mkdtempSync(join(PACKAGE_DIR, ".wire-check-"));
    for (const file of SOURCES) {
      cpSync(join(PACKAGE_DIR, "src", file), join(root, "src", file));
    }
    writeFileSync(join(root, "tsconfig.json"), JSON.stringify({
      extends: "../tsconfig.json",
      compilerOptions: { noEmit: true, rootDir: "." },
      include: ["src/**/*.ts"],
    }));
  });

  after(() => {
    rmSync(root, { recursive: true, force: true });
  });

  test("the client builds against the contract as it is", () => {
    const { status, output } = build(root, contract("as-it-is"));
    assert.equal(status, 0, output);
  });

  test("a required field renamed in the contract fails the build where the client sends it", () => {
    const schemas = contract("field-renamed");
    const path = join(schemas, "messages", "Candidate.json");
    const schema = JSON.parse(readFileSync(path, "utf8")) as {
      $defs: { Candidate: { properties: Record<string, unknown>; required: string[] } };
    };
    const candidate = schema.$defs.Candidate;
    candidate.properties["call_ref"] = candidate.properties["call_id"];
    delete candidate.properties["call_id"];
    candidate.required = candidate.required.map((f) => (f === "call_id" ? "call_ref" : f));
    writeFileSync(path, JSON.stringify(schema));
    const { status, output } = build(root, schemas);
    assert.notEqual(status, 0);
    assert.match(output, /src\/run\.ts.*call_id/);
  });

  test("a channel parameter renamed in the contract fails the build where the client builds the subject", () => {
    const { status, output } = build(root, readdressed("parameter-renamed",
      "lg.withdraw.{tenant}.{run}.{intent}.{user}", "lg.withdraw.{tenant}.{run}.{intent}.{principal}"));
    assert.notEqual(status, 0);
    assert.match(output, /src\/subjects\.ts.*'user' does not exist in type 'WithdrawParameters'/);
  });

  test("a channel renamed in the contract fails the build where the client builds the subject", () => {
    const { status, output } = build(root, readdressed("channel-renamed",
      "lg.run.{tenant}.open", "lg.run.{tenant}.start"));
    assert.notEqual(status, 0);
    assert.match(output, /src\/subjects\.ts.*runOpen/);
  });
});
