/**
 * A change of the wire contract breaks this package's build, not a running client: the
 * client is compiled against types generated from the repository's schemas, and a schema
 * whose required field is renamed makes `tsc` fail where the client builds that message.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { PACKAGE_DIR, REPO_DIR } from "./harness.js";

/** The client's own sources (compiled here without the rest of the package). */
const SOURCES = ["client.ts", "discovery.ts", "errors.ts", "ids.ts", "subjects.ts"];

/** `tsc` on the client's sources with types generated from `schemas`; its exit status and output. */
function build(root: string, schemas: string): { status: number | null; output: string } {
  const generated = spawnSync(process.execPath, [join(PACKAGE_DIR, "scripts", "generate.mjs"), schemas,
    join(root, "src", "wire", "messages.ts")], { encoding: "utf8" });
  assert.equal(generated.status, 0, generated.stderr);
  const tsc = spawnSync(process.execPath, [join(PACKAGE_DIR, "node_modules", "typescript", "bin", "tsc"), "-p",
    join(root, "tsconfig.json")], { encoding: "utf8" });
  return { status: tsc.status, output: tsc.stdout + tsc.stderr };
}

describe("the wire types come from the contract", () => {
  let root: string;
  let schemas: string;

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
    schemas = join(root, "schemas");
    cpSync(join(REPO_DIR, "schemas", "messages"), schemas, { recursive: true });
  });

  after(() => {
    rmSync(root, { recursive: true, force: true });
  });

  test("the client builds against the contract as it is", () => {
    const { status, output } = build(root, schemas);
    assert.equal(status, 0, output);
  });

  test("a required field renamed in the contract fails the build where the client sends it", () => {
    const path = join(schemas, "Candidate.json");
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
    assert.match(output, /src\/client\.ts.*call_id/);
  });
});
