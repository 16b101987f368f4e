/**
 * The client finds the running system as Lockgate's Python tools do: `LOCKGATE_NATS_URL`,
 * else what `lockgate run` wrote in `<var>/run.json` (while its process lives), and every
 * user's credentials under `<var>/credentials/`.
 */

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, beforeEach, describe, test } from "node:test";

import { ClientError, connect, findLocal } from "../src/index.js";

const AGENT = {
  user: "agent-tenant-a", password: "p", account: "EDGE", inbox_prefix: "_INBOX_agent_tenant_a",
  js_prefix: "lg.jsapi", principal: "agent-tenant-a",
};

describe("finding the running system", () => {
  const varDir = mkdtempSync(join(tmpdir(), "lockgate-var-"));
  const saved = process.env["LOCKGATE_NATS_URL"];

  beforeEach(() => {
    rmSync(varDir, { recursive: true, force: true });
    mkdirSync(join(varDir, "credentials"), { recursive: true });
    writeFileSync(join(varDir, "credentials", "agent-tenant-a.json"), JSON.stringify(AGENT));
    writeFileSync(join(varDir, "credentials", "broken.json"), "{");
    delete process.env["LOCKGATE_NATS_URL"];
  });

  after(() => {
    rmSync(varDir, { recursive: true, force: true });
    if (saved !== undefined) {
      process.env["LOCKGATE_NATS_URL"] = saved;
    }
  });

  function runJson(pid: number, credentialsDir: string): void {
    writeFileSync(join(varDir, "run.json"),
      JSON.stringify({ url: "nats://127.0.0.1:4999", pid, credentials_dir: credentialsDir }));
  }

  test("the URL run.json gives while its process lives, and the users under credentials/", () => {
    runJson(process.pid, join(varDir, "credentials"));
    const local = findLocal(undefined, varDir);
    assert.equal(local.url, "nats://127.0.0.1:4999");
    assert.ok(local.running);
    assert.deepEqual([...(local.users?.keys() ?? [])], ["agent-tenant-a"]);
  });

  test("LOCKGATE_NATS_URL over run.json, and a URL given over both", () => {
    runJson(process.pid, join(varDir, "credentials"));
    process.env["LOCKGATE_NATS_URL"] = "nats://127.0.0.1:5111";
    assert.equal(findLocal(undefined, varDir).url, "nats://127.0.0.1:5111");
    assert.equal(findLocal("nats://127.0.0.1:5222", varDir).url, "nats://127.0.0.1:5222");
  });

  test("a run.json left by a process that is gone is ignored", () => {
    runJson(2 ** 22 + 1, join(varDir, "credentials")); // above Linux's highest pid
    const local = findLocal(undefined, varDir);
    assert.equal(local.url, "nats://127.0.0.1:4222");
    assert.ok(!local.running);
  });

  test("a run against a broker without users has no credentials to offer", () => {
    runJson(process.pid, "");
    assert.equal(findLocal(undefined, varDir).users, null);
  });

  test("a user the deployment does not have is named in the error", async () => {
    await assert.rejects(connect({ url: "nats://127.0.0.1:1", varDir, credentials: "agent-tenant-z" }),
      (error: unknown) => error instanceof ClientError && error.code === "credentials.unknown-user"
        && error.message.includes("agent-tenant-a"));
  });

  test("a file that is no credentials file is refused as invalid", async () => {
    await assert.rejects(connect({ url: "nats://127.0.0.1:1", credentials: join(varDir, "credentials", "broken.json") }),
      (error: unknown) => error instanceof ClientError && error.code === "credentials.invalid");
  });

  test("a broker nobody listens at is unavailable", async () => {
    await assert.rejects(connect({ url: "nats://127.0.0.1:1", varDir, credentials: "agent-tenant-a" }),
      (error: unknown) => error instanceof ClientError && error.code === "lockgate.unavailable");
  });
});
