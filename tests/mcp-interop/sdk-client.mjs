#!/usr/bin/env node
// The official MCP TypeScript SDK's client (and its Tasks extension client), driven one
// command at a time, against an MCP server over streamable HTTP.
//
//   MCP_BEARER_TOKEN=... node sdk-client.mjs --url http://127.0.0.1:PORT/mcp --era 2025-11-25 [--tasks]
//
// --era 2025-11-25 (or another handshake version) pins the handshake era: `initialize`
// offering only that version. --era 2026-07-28 pins the stateless era: `server/discover`
// must offer it, and every request carries its own protocol metadata. --tasks advertises
// the Tasks extension (io.modelcontextprotocol/tasks) and makes `task-call` available.
//
// Once connected it prints {"connected": {...}}, then reads one JSON command per line on
// stdin and answers each with one JSON line on stdout:
//
//   {"op": "list"}                                   -> {"tools": [...]}
//   {"op": "call", "name": N, "arguments": {...}}    -> {"result": CallToolResult}
//   {"op": "resend"}                                 -> {"result": ...} for the last call's
//                                                       request sent again as it was (same id)
//   {"op": "task-call", "name": N, "arguments": {}}  -> {"kind": "task", "task": TaskView}
//                                                       or {"kind": "immediate", "result": ...}
//   {"op": "task-get", "taskId": T}                  -> {"task": TaskView}         (tasks/get)
//   {"op": "task-result", "taskId": T}               -> {"outcome": {...}}         (the task's result)
//   {"op": "task-cancel", "taskId": T}               -> {"cancelled": true}        (tasks/cancel)
//   {"op": "raw", "method": M, "params": {...}}      -> {"result": ...} of a request sent as
//                                                       written, below the SDK's codecs
//
// A protocol error (the server refuses the connection, a JSON-RPC error, a malformed
// answer) prints {"error": {...}} and exits 1; a tool's own error result is a result.
// End of input closes the client and exits 0.

import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  toolDeclarationFromMcpTool,
} from "@modelcontextprotocol/ext-tasks/client";

const MODERN = "2026-07-28";
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
// Ids of the raw requests this script sends itself; the SDK's own ids are numbers.
const RAW_ID_PREFIX = "interop-raw-";
const REQUEST_TIMEOUT_MS = 60_000;

const { values: options } = parseArgs({
  options: {
    url: { type: "string" },
    era: { type: "string", default: "2025-11-25" },
    tasks: { type: "boolean", default: false },
  },
});
if (!options.url) {
  exit(1, { error: { code: "usage", message: "--url is required" } });
}

function emit(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

/** A protocol error: reported as {"error": ...}, and the process exits 1. */
class Failure extends Error {
  constructor(error) {
    super(error.message);
    this.error = error;
  }
}

function exit(code, last) {
  // A pipe write is asynchronous: leave once the last line is out.
  process.stdout.write(last === undefined ? "" : JSON.stringify(last) + "\n", () => process.exit(code));
}

function describe(error) {
  return {
    code: error?.code ?? "error",
    message: error instanceof Error ? error.message : String(error),
    ...(error?.data === undefined ? {} : { data: error.data }),
    ...(error?.cause instanceof Error ? { cause: error.cause.message } : {}),
  };
}

const token = process.env.MCP_BEARER_TOKEN ?? "";
const transport = new StreamableHTTPClientTransport(new URL(options.url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const clientInfo = { name: "lockgate-interop", version: "1.0.0" };
const capabilities = options.tasks ? { extensions: { [TASKS_EXTENSION]: {} } } : {};
const modern = options.era >= MODERN;
const client = new Client(clientInfo, {
  capabilities,
  versionNegotiation: { mode: modern ? { pin: options.era } : "legacy" },
  // The handshake era offers exactly the chosen version at `initialize`.
  ...(modern ? {} : { supportedProtocolVersions: [options.era] }),
});

// Responses to requests the SDK did not send (raw task requests, a request sent again)
// are taken off the transport before the SDK's dispatcher sees them.
const waiting = new Map();
let rawCounter = 0;
let lastCall;

function tapTransport() {
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message && "id" in message && !("method" in message) && waiting.has(message.id)) {
      const settle = waiting.get(message.id);
      waiting.delete(message.id);
      settle(message);
      return;
    }
    deliver?.(message, extra);
  };
  const send = transport.send.bind(transport);
  transport.send = async (message, sendOptions) => {
    if (message?.method === "tools/call" && typeof message.id === "number") {
      lastCall = { message: structuredClone(message), sendOptions };
    }
    return send(message, sendOptions);
  };
  return send;
}

function sendAwaiting(send, message, sendOptions) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      waiting.delete(message.id);
      reject(new Error(`no answer to ${message.method} within ${REQUEST_TIMEOUT_MS} ms`));
    }, REQUEST_TIMEOUT_MS);
    waiting.set(message.id, (response) => {
      clearTimeout(timer);
      resolve(response);
    });
    send(message, sendOptions).catch((error) => {
      clearTimeout(timer);
      waiting.delete(message.id);
      reject(error);
    });
  });
}

try {
  await client.connect(transport);
} catch (error) {
  exit(1, { error: describe(error) });
  await new Promise(() => {});
}
const send = tapTransport();

// ext-tasks speaks the 2026-07-28 Tasks wire below the SDK's request codecs: it needs a
// way to send a raw request and read its raw response, and the per-request framing.
function rawDispatch(request) {
  const id = `${RAW_ID_PREFIX}${(rawCounter += 1)}`;
  const message = { jsonrpc: "2.0", id, method: request.method,
                    ...(request.params === undefined ? {} : { params: request.params }) };
  return sendAwaiting(send, message).then((response) =>
    "error" in response
      ? { kind: "error", error: response.error }
      : { kind: "result", result: response.result });
}

const declarations = new Map();
const executions = new Map();
const tasks = options.tasks
  ? createTaskSessionFromClient(client, {
    endpointId: `lockgate-interop:${options.url}`,
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion() ?? options.era,
      clientInfo,
      clientCapabilities: capabilities,
    },
    tools: { currentTool: (name) => declarations.get(name) },
  })
  : undefined;

function taskView(view) {
  return { taskId: view.taskId, status: view.status, statusMessage: view.statusMessage,
           raw: view.raw };
}

function outcomeView(outcome) {
  if (outcome.status === "completed") return { status: "completed", result: outcome.result };
  if (outcome.status === "failed") {
    return { status: "failed",
             error: { message: outcome.error.message, code: outcome.error.code, data: outcome.error.data } };
  }
  return { status: outcome.status };
}

function needTasks() {
  if (tasks === undefined) throw new Error("start with --tasks to use the Tasks extension");
  return tasks;
}

const commands = {
  async list() {
    const listed = await client.listTools(undefined, { cacheMode: "bypass" });
    for (const tool of listed.tools) declarations.set(tool.name, toolDeclarationFromMcpTool(tool));
    return { tools: listed.tools };
  },
  async call({ name, arguments: args }) {
    const result = await client.callTool({ name, arguments: args ?? {} },
                                         { timeout: REQUEST_TIMEOUT_MS });
    return { result };
  },
  async resend() {
    if (lastCall === undefined) throw new Error("no tools/call was sent yet");
    const response = await sendAwaiting(send, lastCall.message, lastCall.sendOptions);
    if ("error" in response) throw Object.assign(new Error(response.error.message), response.error);
    return { result: response.result };
  },
  async "task-call"({ name, arguments: args }) {
    const execution = await needTasks().callTool(name, args ?? {}, {
      task: { preference: "prefer" }, requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    if (execution.kind === "immediate") {
      return { kind: "immediate", result: outcomeView(await execution.result()) };
    }
    executions.set(execution.handle.taskId, execution);
    const view = await needTasks().task(execution.handle.taskId).snapshot();
    return { kind: "task", task: taskView(view) };
  },
  async "task-get"({ taskId }) {
    return { task: taskView(await needTasks().task(taskId).snapshot()) };
  },
  async "task-result"({ taskId }) {
    const execution = executions.get(taskId);
    const outcome = execution !== undefined
      ? await execution.result()
      : await needTasks().task(taskId).result();
    return { outcome: outcomeView(outcome) };
  },
  async "task-cancel"({ taskId }) {
    await needTasks().cancelTask(taskId);
    return { cancelled: true };
  },
  async raw({ method, params }) {
    const response = await rawDispatch({ method, params });
    if (response.kind === "error") {
      throw Object.assign(new Error(response.error.message), response.error);
    }
    return { result: response.result };
  },
};

emit({
  connected: {
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    server: client.getServerVersion() ?? null,
    capabilities: client.getServerCapabilities() ?? null,
    tasks: tasks === undefined ? null : tasks.capabilities,
  },
});

async function serve() {
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (!line.trim()) continue;
    let command;
    try {
      command = JSON.parse(line);
    } catch (error) {
      throw new Failure({ code: "usage", message: `not a JSON command: ${describe(error).message}` });
    }
    const run = commands[command.op];
    if (run === undefined) throw new Failure({ code: "usage", message: `unknown op ${command.op}` });
    try {
      emit(await run(command));
    } catch (error) {
      throw new Failure(describe(error));
    }
  }
  await tasks?.close();
  await client.close();
}

serve().then(
  () => exit(0),
  (error) => exit(1, { error: error instanceof Failure ? error.error : describe(error) }),
);
