/**
 * The TypeScript page's quickstart (docs/typescript.md) runs as written against the real
 * system, found the way `make run` leaves it (`var/run.json`): compiled by tsc as a user's
 * script is, and run by node with no model key.
 *
 * The block run is the page's first TypeScript block, which must be marked to run
 * (`<!-- typescript: runs -->` on the line before it). It runs in a project of its own whose
 * `node_modules` links this package and `ai`, as `npm install ai@7 <checkout>/libs/lockgate-ts`
 * leaves them: `@lockgate/client` and its subpaths resolve through the package's own `exports`.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE_DIR, REPO_DIR, startSystem, type System } from "./harness.js";

const PAGE = join(REPO_DIR, "docs", "typescript.md");
const MARKER = "<!-- typescript: runs -->";
/** Model providers' keys: a child must not inherit one (no live model). */
const MODEL_KEYS = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY", "AI_GATEWAY_API_KEY"];

const run = promisify(execFile);

/** The first TypeScript block of `page`, which must be marked to run. */
async function quickstart(page: string): Promise<string> {
  const lines = (await readFile(page, "utf8")).split("\n");
  const opening = lines.indexOf("```ts");
  assert.ok(opening > 0, `${page} has no TypeScript block`);
  assert.equal(lines[opening - 1], MARKER, `the first TypeScript block of ${page} must be marked to run`);
  const closing = lines.indexOf("```", opening + 1);
  assert.ok(closing > opening, `the first TypeScript block of ${page} is never closed`);
  return lines.slice(opening + 1, closing).join("\n") + "\n";
}

let system: System;

before(async () => {
  system = await startSystem();
});

after(async () => {
  await system?.stop();
});

/** A project beside nothing of this checkout, with this package and `ai` installed (linked). */
async function project(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "lockgate-quickstart-"));
  const linked: Array<[string, string]> = [
    ["@lockgate/client", PACKAGE_DIR],
    ["ai", join(PACKAGE_DIR, "node_modules", "ai")],
    ["@types/node", join(PACKAGE_DIR, "node_modules", "@types", "node")],
  ];
  for (const [name, target] of linked) {
    await mkdir(dirname(join(dir, "node_modules", name)), { recursive: true });
    await symlink(target, join(dir, "node_modules", name), "dir");
  }
  await writeFile(join(dir, "package.json"), JSON.stringify({ private: true, type: "module" }));
  return dir;
}

test("the TypeScript quickstart runs as written", async () => {
  const workdir = await project();
  // run.json as `make run` writes it: where the system is, where its users are.
  const runJson = join(system.varDir, "run.json");
  await writeFile(runJson, JSON.stringify({ url: system.url, pid: process.pid,
    credentials_dir: join(system.varDir, "credentials") }));
  try {
    await writeFile(join(workdir, "quickstart.mts"), await quickstart(PAGE));
    const compiled = await run(join(PACKAGE_DIR, "node_modules", ".bin", "tsc"),
      ["quickstart.mts", "--ignoreConfig", "--module", "nodenext", "--target", "es2022", "--strict",
        "--skipLibCheck", "--types", "node"], { cwd: workdir }).catch((error: { stdout?: string }) => {
      assert.fail(`the quickstart does not compile:\n${error.stdout ?? String(error)}`);
    });
    assert.equal(compiled.stdout, "");
    const env = Object.fromEntries(Object.entries(process.env)
      .filter(([key]) => !key.startsWith("LOCKGATE_") && !MODEL_KEYS.includes(key)));
    const before = (await system.ledger()).length;
    const { stdout } = await run(process.execPath, ["quickstart.mjs"],
      { cwd: workdir, env: { ...env, LOCKGATE_VAR_DIR: system.varDir }, timeout: 120_000 });

    assert.equal(stdout.trim(), "Noted.");
    const written = (await system.ledger()).slice(before);
    assert.deepEqual(written.map((row) => [row.case_id, row.actor]), [["case-123", "user-42"]]);
  } finally {
    await unlink(runJson);
    await rm(workdir, { recursive: true, force: true });
  }
});
