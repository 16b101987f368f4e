/**
 * Where the running system is, and whose credentials to use: found as Lockgate's own
 * tools find them (`lockgate.client.discovery`).
 *
 * `lockgate run` says where its broker listens in `<var>/run.json` and keeps every user's
 * credentials under `<var>/credentials/<user>.json`.
 */

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ClientError } from "./errors.js";

/** Where a broker is looked for when nothing says otherwise. */
export const DEFAULT_URL = "nats://127.0.0.1:4222";

/** How one NATS user connects: its name and password, and the client settings its role needs. */
export interface Credentials {
  readonly user: string;
  readonly password: string;
  readonly account: string;
  readonly inbox_prefix: string;
  readonly js_prefix: string;
  /** The principal token its command subjects end in (reviewers, operators). */
  readonly principal?: string;
}

/** What `lockgate run` says about itself in `<var>/run.json` (only what a client reads). */
interface RunInfo {
  url: string;
  pid: number;
  credentials_dir?: string;
}

/** The system as found on this machine: its broker and its users' credentials. */
export interface Local {
  readonly url: string;
  readonly varDir: string;
  /** Every user's credentials, by name; `null` for a broker without Lockgate's users. */
  readonly users: ReadonlyMap<string, Credentials> | null;
  /** Whether `run.json` names a live process. */
  readonly running: boolean;
}

/**
 * The checkout's `var/` when this package runs from a Lockgate checkout (as the Python
 * tools default), else the per-user state directory.
 */
export function defaultVarDir(): string {
  // dist/src/discovery.js -> the package, then libs/ -> the checkout.
  const checkout = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
  if (existsSync(join(checkout, "pyproject.toml")) && existsSync(join(checkout, "libs", "lockgate"))) {
    return join(checkout, "var");
  }
  return join(homedir(), ".local", "state", "lockgate");
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The running system's description, or `null` when nothing runs from `varDir`. */
function readRunInfo(varDir: string): RunInfo | null {
  let info: unknown;
  try {
    info = JSON.parse(readFileSync(join(varDir, "run.json"), "utf8"));
  } catch {
    return null;
  }
  if (typeof info !== "object" || info === null) {
    return null;
  }
  const { url, pid, credentials_dir: dir } = info as Record<string, unknown>;
  if (typeof url !== "string" || typeof pid !== "number") {
    return null;
  }
  // A file left by a supervisor that died is ignored.
  return alive(pid) ? { url, pid, credentials_dir: typeof dir === "string" ? dir : "" } : null;
}

function isCredentials(value: unknown): value is Credentials {
  if (typeof value !== "object" || value === null) {
    return false;
  }
  const v = value as Record<string, unknown>;
  return ["user", "password", "account", "inbox_prefix", "js_prefix"].every((k) => typeof v[k] === "string")
    && (v["principal"] === undefined || typeof v["principal"] === "string");
}

/**
 * Read one credentials file.
 *
 * @throws ClientError `credentials.invalid`: missing, unreadable, or not a credentials file.
 */
export function loadCredentials(path: string): Credentials {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === "ENOENT";
    throw new ClientError(missing ? `no credentials file ${path}` : `${path} is not readable`,
      "credentials.invalid");
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = null;
  }
  if (!isCredentials(parsed)) {
    throw new ClientError(`${path} is not a credentials file`, "credentials.invalid");
  }
  return parsed;
}

function readUsers(varDir: string): Map<string, Credentials> | null {
  const directory = join(varDir, "credentials");
  let names: string[];
  try {
    names = readdirSync(directory).filter((n) => n.endsWith(".json")).sort();
  } catch {
    return null;
  }
  const found = new Map<string, Credentials>();
  for (const name of names) {
    try {
      found.set(basename(name, ".json"), loadCredentials(join(directory, name)));
    } catch {
      // Not a credentials file: not a user.
    }
  }
  return found.size > 0 ? found : null;
}

/**
 * Find the system: `url`, else `LOCKGATE_NATS_URL`, else what `lockgate run` wrote.
 *
 * `varDir`: the deployment's directory (default: `LOCKGATE_VAR_DIR`, else `defaultVarDir()`).
 */
export function findLocal(url?: string, varDir?: string): Local {
  const dir = varDir ?? process.env["LOCKGATE_VAR_DIR"] ?? defaultVarDir();
  const info = readRunInfo(dir);
  const chosen = url || process.env["LOCKGATE_NATS_URL"] || (info ? info.url : DEFAULT_URL);
  // A run against a broker without Lockgate's users says so with no credentials dir.
  const users = info !== null && !info.credentials_dir ? null : readUsers(dir);
  return { url: chosen, varDir: dir, users, running: info !== null };
}

/**
 * `user`'s credentials in `local`; `null` on a broker without users.
 *
 * @throws ClientError `credentials.unknown-user`: the deployment has users, not this one.
 */
export function localCredentials(local: Local, user: string): Credentials | null {
  if (local.users === null) {
    return null;
  }
  const found = local.users.get(user);
  if (found === undefined) {
    const known = [...local.users.keys()].sort().join(", ") || "none";
    throw new ClientError(`no credentials for '${user}' under ${local.varDir} (known: ${known})`,
      "credentials.unknown-user");
  }
  return found;
}

/** True when `value` is a user's name rather than a credentials file's path. */
export function namesAUser(value: unknown): value is string {
  return typeof value === "string" && !value.includes("/") && !value.endsWith(".json") && !existsSync(value);
}
