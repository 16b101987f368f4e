/**
 * Connecting to Lockgate's broker: where it is, whom to connect as (a credentials file, a
 * local deployment's user, the trusted host), and its refusal of them as `Unauthorized`.
 */

import { errors, type NatsConnection } from "@nats-io/nats-core";
import { connect as natsConnect } from "@nats-io/transport-node";

import {
  DEFAULT_URL,
  findLocal,
  loadCredentials,
  localCredentials,
  namesAUser,
  type Credentials,
  type Local,
} from "./discovery.js";
import { ClientError, Unauthorized } from "./errors.js";
import { Gateway, JS_API } from "./gateway.js";

/** Credentials as given to `connect`: the file's contents, its path, or a local user's name. */
export type CredentialsLike = Credentials | string;

/** How `connect` finds the broker and whom it connects as. */
export interface ConnectOptions {
  /**
   * The broker (comma-separated for a cluster's nodes); by default `LOCKGATE_NATS_URL`,
   * else the one `lockgate run` says it runs, else port 4222.
   */
  url?: string | undefined;
  /**
   * The user to connect as: a credentials file's contents or path, or a user of the local
   * deployment by name (`"agent-tenant-a"`); none on a broker without users.
   */
  credentials?: CredentialsLike | undefined;
  /** The trusted host's credentials, to open runs (a second connection); `true`: the local `host` user. */
  host?: CredentialsLike | true | undefined;
  /** How long each request waits for its answer. */
  timeoutMs?: number | undefined;
  /** The local deployment's directory (default: `LOCKGATE_VAR_DIR`, else the checkout's `var/`). */
  varDir?: string | undefined;
}

function resolveCredentials(value: CredentialsLike | undefined, local: Local | null): Credentials | null {
  if (value === undefined) {
    return null;
  }
  if (typeof value !== "string") {
    return value;
  }
  if (namesAUser(value) && local !== null) {
    return localCredentials(local, value);
  }
  return loadCredentials(value);
}

function isAuthorization(error: unknown): boolean {
  for (let e = error; e instanceof Error; e = e.cause) {
    if (e instanceof errors.AuthorizationError || /authorization/i.test(e.message)) {
      return true;
    }
  }
  return false;
}

/**
 * Connect as `credentials`' user.
 *
 * @throws Unauthorized the broker refused the user (at once: asking again cannot help).
 * @throws ClientError the broker cannot be reached (`lockgate.unavailable`).
 */
async function open(url: string, credentials: Credentials | null): Promise<NatsConnection> {
  const user = credentials?.user ?? "anonymous";
  try {
    return await natsConnect({
      servers: url.split(",").map((u) => u.trim()).filter(Boolean),
      name: `gateway.${user}`,
      maxReconnectAttempts: 3,
      timeout: 2_000,
      ...(credentials !== null
        ? { user: credentials.user, pass: credentials.password, inboxPrefix: credentials.inbox_prefix }
        : {}),
    });
  } catch (error) {
    if (isAuthorization(error)) {
      throw new Unauthorized(`the broker at ${url} refused the credentials of ${user}: `
        + "a user it does not know or a wrong password");
    }
    throw new ClientError(`cannot connect to ${url}: ${String(error)}`, "lockgate.unavailable");
  }
}

/**
 * Connect to Lockgate's broker as one user (and, to open runs, as the trusted host).
 *
 * @throws Unauthorized the broker refused the credentials (or their absence).
 * @throws ClientError the broker cannot be reached, or a credentials file or user is unusable.
 */
export async function connect(options: ConnectOptions = {}): Promise<Gateway> {
  const { credentials, host } = options;
  const found = options.url === undefined || host === true || namesAUser(credentials) || namesAUser(host);
  const local = found ? findLocal(options.url, options.varDir) : null;
  const url = options.url ?? local?.url ?? DEFAULT_URL;
  const creds = resolveCredentials(credentials, local);
  const hostCreds = resolveCredentials(host === true ? "host" : host, local);
  const nc = await open(url, creds);
  let hostNc: NatsConnection | null = null;
  if (hostCreds !== null) {
    try {
      hostNc = await open(url, hostCreds);
    } catch (error) {
      await nc.close();
      throw error;
    }
  }
  return new Gateway(nc, {
    hostNc,
    timeoutMs: options.timeoutMs ?? 5_000,
    jsPrefix: creds?.js_prefix ?? JS_API,
    user: creds?.user ?? "anonymous",
    principal: creds?.principal ?? "",
  });
}
