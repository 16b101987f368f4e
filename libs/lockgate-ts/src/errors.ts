/**
 * The client's errors: the same classes and codes as the Python SDK (`lockgate.client.sdk`),
 * so a runtime in either language tells the same failures apart the same way.
 */

import type { NotResolved } from "./wire/messages.js";

/** Root of the client's errors; `code` is a stable dotted reason (`candidate.too-large`). */
export class ClientError extends Error {
  /** Whether asking again later may succeed. */
  readonly retryable: boolean = false;

  constructor(
    message: string,
    readonly code: string = "lockgate.error",
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** Lockgate refused a request (`code` says why). */
export class Refused extends ClientError {
  constructor(code: string, readonly detail: string = "") {
    super(detail ? `${code}: ${detail}` : code, code);
  }
}

/**
 * An operator's resolution was not recorded: the outcome was settled first.
 *
 * `answer` says by what: the event, its finding and resolution, who recorded it, when,
 * and its receipt.
 */
export class OutcomeSettled extends Refused {
  constructor(readonly answer: NotResolved) {
    super(answer.error, answer.detail ?? "");
  }
}

/** No candidate of this run has that id (code `candidate.unknown`). */
export class UnknownCandidate extends Refused {
  constructor(detail: string) {
    super("candidate.unknown", detail);
  }
}

/**
 * The broker refused the credentials: a user it does not know, a wrong password, or none
 * where it requires one (code `lockgate.unauthorized`).
 */
export class Unauthorized extends ClientError {
  constructor(message: string) {
    super(message, "lockgate.unauthorized");
  }
}

/**
 * The broker refused this connection's user a subject (code `lockgate.permission-denied`).
 *
 * `subject` is the one refused. Asking again cannot help: the user's permissions say no.
 */
export class PermissionDenied extends ClientError {
  constructor(
    message: string,
    readonly subject: string,
  ) {
    super(message, "lockgate.permission-denied");
  }
}

/** The candidate is larger than Lockgate accepts in one message (code `candidate.too-large`). */
export class CandidateTooLarge extends ClientError {
  constructor(message: string) {
    super(message, "candidate.too-large");
  }
}

/**
 * The candidate cannot be sent as JSON text at all (code `candidate.malformed`).
 *
 * A string holding a lone surrogate, say (a JavaScript string can; UTF-8 cannot carry it),
 * or a provider item nested deeper than intake reads: nothing was published.
 */
export class InvalidCandidate extends ClientError {
  constructor(message: string) {
    super(message, "candidate.malformed");
  }
}

/** No model-facing response arrived in time; the candidate may still be in flight. */
export class ResponseTimeout extends ClientError {
  override readonly retryable: boolean = true;

  constructor(message: string) {
    super(message, "response.timeout");
  }
}
