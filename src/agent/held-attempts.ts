/**
 * The attempts an agent holds: from Assign until the control plane acknowledged their Finished
 * (or told the agent to forget them). Keepalive.held and Hello.held are read from here.
 */

import type { Attempt } from '../core/attempt.js';
import type { AttemptRef } from '../gen/leoflow/v1/agent_pb.js';
import { attemptKey, refOf } from './attempt-messages.js';

/** Why the agent itself stopped an attempt's process; shapes (or suppresses) its Finished. */
export type AgentStop =
  /** Welcome.superseded, or a newer try of the same ti: report nothing, forget it. */
  | { kind: 'superseded'; reason: string }
  /** The agent is shutting down: report FAILED so the attempt is retried under its policy. */
  | { kind: 'shutdown'; reason: string };

export interface HeldAttempt {
  readonly key: string;
  readonly attempt: Attempt;
  readonly ref: AttemptRef;
  /** running: its process may still run; ended: only its FinishedAck is awaited. */
  phase: 'running' | 'ended';
  stop: AgentStop | null;
  /** Known once started; the agent kills the group itself if it must exit at once. */
  pid: number | null;
  /** No longer held (acknowledged or superseded): late reports about it are dropped. */
  forgotten: boolean;
}

export class HeldAttempts {
  readonly #byKey = new Map<string, HeldAttempt>();
  /** The executor reports by Attempt object; forgotten attempts stay findable to be ignored. */
  readonly #byAttempt = new WeakMap<Attempt, HeldAttempt>();

  get size(): number {
    return this.#byKey.size;
  }

  add(attempt: Attempt): HeldAttempt {
    const held: HeldAttempt = {
      key: attemptKey(attempt),
      attempt,
      ref: refOf(attempt),
      phase: 'running',
      stop: null,
      pid: null,
      forgotten: false,
    };
    this.#byKey.set(held.key, held);
    this.#byAttempt.set(attempt, held);
    return held;
  }

  get(key: string): HeldAttempt | undefined {
    return this.#byKey.get(key);
  }

  of(attempt: Attempt): HeldAttempt | undefined {
    return this.#byAttempt.get(attempt);
  }

  /** Held attempts of one task instance (normally at most one). */
  ofTi(tiId: string): HeldAttempt[] {
    return this.all().filter((h) => h.attempt.tiId === tiId);
  }

  /** Stops holding an attempt; reports about it are dropped from now on. */
  forget(key: string): HeldAttempt | undefined {
    const held = this.#byKey.get(key);
    if (!held) return undefined;
    held.forgotten = true;
    this.#byKey.delete(key);
    return held;
  }

  all(): HeldAttempt[] {
    return [...this.#byKey.values()];
  }

  running(): HeldAttempt[] {
    return this.all().filter((h) => h.phase === 'running');
  }

  /** What Hello.held and Keepalive.held say. */
  refs(): AttemptRef[] {
    return this.all().map((h) => h.ref);
  }
}
