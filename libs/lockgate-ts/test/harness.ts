/**
 * The real system for this package's tests: `python -m lockgate.testing.node_system` as a
 * child process (nats-server, the services and the case-notes adapter), and the questions
 * a test asks of the world outside the client under test.
 *
 * The interpreter is `LOCKGATE_PYTHON`, else the checkout's `.venv/bin/python`.
 */

import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The package's directory (this file runs from dist/test/). */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** The checkout the package lives in. */
export const REPO_DIR = resolve(PACKAGE_DIR, "..", "..");

/** The Python interpreter with Lockgate installed. */
export function python(): string {
  return process.env["LOCKGATE_PYTHON"] ?? join(REPO_DIR, ".venv", "bin", "python");
}

/** One write the case-notes world accepted. */
export interface LedgerRow {
  case_id: string;
  tenant: string;
  actor: string;
  note_digest: string;
  intent_id: string;
  idempotency_key: string;
  note_id: string;
  at: string;
}

/** What a reviewer does with a pending call: `lockgate review approve|deny|edit`. */
export type ReviewVerb = "approve" | "deny" | "edit";

/** A running system and what a test may ask of it. */
export interface System {
  /** The broker's URL. */
  readonly url: string;
  /** The deployment's directory: its users' credentials are under `credentials/`. */
  readonly varDir: string;
  /** The case-notes world's writes, oldest first. */
  ledger(): Promise<LedgerRow[]>;
  /**
   * A reviewer's decision through `lockgate review <verb> <candidate>` (as alice), asked
   * again until it succeeds for up to 30 s. `extra` are passed to the command (an edit's
   * `--arguments <text>`, say), except `--tenant <tenant>` (default `tenant-a`) and
   * `--within <seconds>` (how long to keep asking), which the harness takes. Resolves to
   * the command's output.
   */
  review(verb: ReviewVerb, candidateId: string, ...extra: string[]): Promise<string>;
  /** The type names of an intent's stored events (none for an intent never recorded). */
  events(tenant: string, intentId: string): Promise<string[]>;
  /** The broker's permission-violation lines for users of `account` so far (`EDGE`: agents, hosts). */
  violations(account: string): Promise<string[]>;
  /** Stop the system and every process of it. */
  stop(): Promise<void>;
}

/** How long the whole system may take to start (every service and the adapter ready). */
const START_MS = 120_000;

class Harness implements System {
  readonly #waiting: Array<{ done: (line: string) => void; failed: (error: Error) => void }> = [];
  #exited: Promise<number | null>;

  constructor(
    private readonly child: ChildProcessByStdio<Writable, Readable, null>,
    readonly url: string,
    readonly varDir: string,
    lines: AsyncIterator<string>,
    exited: Promise<number | null>,
  ) {
    this.#exited = exited;
    void (async () => {
      for (let next = await lines.next(); !next.done; next = await lines.next()) {
        this.#waiting.shift()?.done(next.value);
      }
      for (const waiter of this.#waiting.splice(0)) {
        waiter.failed(new Error("the system's harness ended"));
      }
    })();
  }

  async #ask(command: Record<string, unknown>): Promise<Record<string, unknown>> {
    const line = await new Promise<string>((done, failed) => {
      this.#waiting.push({ done, failed });
      this.child.stdin.write(JSON.stringify(command) + "\n");
    });
    const answer = JSON.parse(line) as Record<string, unknown>;
    if (typeof answer["error"] === "string") {
      throw new Error(`${String(command["op"])}: ${answer["error"]}`);
    }
    return answer;
  }

  async ledger(): Promise<LedgerRow[]> {
    return (await this.#ask({ op: "ledger" }))["ledger"] as LedgerRow[];
  }

  async review(verb: ReviewVerb, candidateId: string, ...extra: string[]): Promise<string> {
    const command: Record<string, unknown> = { op: "review", verb, candidate: candidateId, args: [] as string[] };
    for (let i = 0; i < extra.length; i++) {
      const arg = extra[i] as string;
      if ((arg === "--tenant" || arg === "--within") && i + 1 < extra.length) {
        command[arg === "--tenant" ? "tenant" : "within_s"] = arg === "--tenant" ? extra[++i] : Number(extra[++i]);
      } else {
        (command["args"] as string[]).push(arg);
      }
    }
    return (await this.#ask(command))["output"] as string;
  }

  async events(tenant: string, intentId: string): Promise<string[]> {
    return (await this.#ask({ op: "events", tenant, intent: intentId }))["events"] as string[];
  }

  async violations(account: string): Promise<string[]> {
    return (await this.#ask({ op: "violations", account }))["violations"] as string[];
  }

  async stop(): Promise<void> {
    // The end of its stdin stops it; a signal only if that did not within 30 s.
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill("SIGTERM"), 30_000);
    await this.#exited;
    clearTimeout(timer);
  }
}

/** Start the system; resolves once every process of it is ready. */
export async function startSystem(): Promise<System> {
  const child = spawn(python(), ["-m", "lockgate.testing.node_system"], {
    cwd: REPO_DIR,
    stdio: ["pipe", "pipe", "inherit"],
    // This process's own Lockgate settings must not leak into the system's.
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOCKGATE_"))),
  });
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const timer = setTimeout(() => child.kill("SIGTERM"), START_MS);
  try {
    const first = await lines.next();
    if (first.done) {
      throw new Error(`the system did not start (exit ${String(await exited)}): see its output above`);
    }
    const ready = JSON.parse(first.value) as { url: string; var_dir: string };
    return new Harness(child, ready.url, ready.var_dir, lines, exited);
  } catch (error) {
    child.kill("SIGTERM");
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
