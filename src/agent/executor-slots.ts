import type { Attempt } from '../core/attempt.js';
import { attemptKey } from './attempt-messages.js';
import type { HeldAttempt } from './held-attempts.js';

interface ExecutorSlot {
  held: HeldAttempt;
  gone: Promise<void>;
  markGone: () => void;
}

/** The executor runs one process per ti: a newer try waits for the older one to be gone. */
export class ExecutorSlots {
  readonly #slots = new Map<string, ExecutorSlot>();

  /** Settles when the attempt holding the ti's slot is gone; undefined when none holds it. */
  gone(tiId: string): Promise<void> | undefined {
    return this.#slots.get(tiId)?.gone;
  }

  take(held: HeldAttempt): void {
    this.#slots.set(held.attempt.tiId, { held, ...goneSignal() });
  }

  /** Whether this attempt holds its ti's slot (its process was handed to the executor). */
  holds(held: HeldAttempt): boolean {
    return this.#slots.get(held.attempt.tiId)?.held === held;
  }

  /** The slot is free once the attempt's process is over. */
  release(attempt: Attempt): void {
    const slot = this.#slots.get(attempt.tiId);
    // By key: an attempt re-attached after a restart is read from its folder twice.
    if (!slot || slot.held.key !== attemptKey(attempt)) return;
    this.#slots.delete(attempt.tiId);
    slot.markGone();
  }

  /** The attempts holding a slot. */
  holders(): HeldAttempt[] {
    return [...this.#slots.values()].map((s) => s.held);
  }
}

function goneSignal(): { gone: Promise<void>; markGone: () => void } {
  let markGone!: () => void;
  const gone = new Promise<void>((resolve) => (markGone = resolve));
  return { gone, markGone };
}
