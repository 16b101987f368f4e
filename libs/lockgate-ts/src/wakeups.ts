/**
 * Waiting for a proposal's response: one core subscription per run wakes the proposals
 * waiting in it, and how soon the stream is asked again after a wake-up.
 */

import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";

import * as subjects from "./subjects.js";

/**
 * After a wake-up whose response the stream does not show yet, it is asked again after
 * the first of these, then twice as long each time, up to the second (milliseconds).
 */
export const WAKE_RETRY_MS: readonly [number, number] = [2, 500];
/** Runs whose responses one gateway keeps a subscription to. */
export const RUNS_WATCHED = 1024;

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** A flag a message sets and a waiter waits on (with a timeout), cleared between waits. */
export class Signal {
  #set = false;
  #wake: (() => void) | null = null;

  set(): void {
    this.#set = true;
    this.#wake?.();
  }

  clear(): void {
    this.#set = false;
  }

  /** True when set within `ms`. */
  wait(ms: number): Promise<boolean> {
    if (this.#set) {
      return Promise.resolve(true);
    }
    return new Promise((done) => {
      const timer = setTimeout(() => {
        this.#wake = null;
        done(false);
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = null;
        done(true);
      };
    });
  }
}

/**
 * Wake-ups for proposals waiting for their responses: one core subscription per run.
 *
 * A message on a response subject is only a wake-up (anybody at the edge can have a reply
 * delivered there): what the model sees is read from the stream, which only intake writes.
 */
export class Wakeups {
  readonly #runs = new Map<string, Subscription>();
  readonly #waiting = new Map<string, Set<Signal>>();

  constructor(private readonly nc: NatsConnection) {}

  /** Set `woken` whenever a message arrives on one of `watched`; resolves once subscribed. */
  async watch(tenant: string, runId: string, watched: readonly string[], woken: Signal): Promise<void> {
    const wildcard = subjects.responsesOfRun(tenant, runId);
    const made = this.#runs.get(wildcard);
    this.#runs.delete(wildcard);
    if (made !== undefined) {
      this.#runs.set(wildcard, made); // most recently used last
    } else {
      this.#runs.set(wildcard, this.nc.subscribe(wildcard, {
        callback: (error: Error | null, msg: Msg) => {
          if (error === null) {
            this.#waiting.get(msg.subject)?.forEach((s) => s.set());
          }
        },
      }));
      await this.nc.flush(); // what is published after this wakes
      this.#forgetIdle();
    }
    for (const subject of watched) {
      const waiters = this.#waiting.get(subject) ?? new Set<Signal>();
      waiters.add(woken);
      this.#waiting.set(subject, waiters);
    }
  }

  /** Stop waking `woken`. */
  unwatch(watched: readonly string[], woken: Signal): void {
    for (const subject of watched) {
      const waiters = this.#waiting.get(subject);
      waiters?.delete(woken);
      if (waiters?.size === 0) {
        this.#waiting.delete(subject);
      }
    }
  }

  /** Give up the least recently used runs' subscriptions past `RUNS_WATCHED`, unless one waits. */
  #forgetIdle(): void {
    while (this.#runs.size > RUNS_WATCHED) {
      const idle = [...this.#runs.keys()].find((w) =>
        ![...this.#waiting.keys()].some((s) => s.startsWith(w.slice(0, -1))));
      if (idle === undefined) {
        return;
      }
      this.#runs.get(idle)?.unsubscribe();
      this.#runs.delete(idle);
    }
  }
}

/**
 * How soon to ask the stream again (0: the usual second): sooner after a wake-up the
 * stream did not show yet, doubling while it still does not, up to `WAKE_RETRY_MS`'s second.
 */
export function pauseAfter(soonMs: number, woke: boolean): number {
  const [first, last] = WAKE_RETRY_MS;
  if (woke) { // woken, and the stream did not show it: ask again soon
    return soonMs === 0 ? first : Math.min(2 * soonMs, last);
  }
  if (soonMs) { // still not there: a little later, until the pause is the usual
    return soonMs >= last ? 0 : Math.min(2 * soonMs, last);
  }
  return soonMs;
}
