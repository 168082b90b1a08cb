import type { Logger } from 'pino';

/**
 * A graceful stop's one deadline (`--shutdown-grace`). Each step of the stop waits for its work
 * until then at most, so the stop ends in time whatever state the database is in: a step waiting
 * on a database that is gone would otherwise wait out its retries (minutes), and one that hangs,
 * for ever. A step that begins past the deadline still gets a moment (`floorMs`), enough for
 * work that needs no database. What is cut short is logged; an attempt whose end could not be
 * written is recorded by the next start, from its folder in the state directory.
 */
export interface ShutdownDeadline {
  /** Milliseconds left before the deadline (0 past it). */
  left(): number;
  /**
   * Waits for `work` until the deadline, or `floorMs` from now if that is later; never throws
   * (a step that fails is logged, and the stop goes on).
   */
  within(what: string, work: Promise<unknown>, floorMs?: number): Promise<void>;
  /** Clears the timer (the stop ended). */
  done(): void;
}

/** What a step past the deadline is given: local work ends well within it. */
const FLOOR_MS = 250;

/**
 * The deadline `ms` from now. `giveUp` is aborted then: the retries of database writes that were
 * given its signal stop (each write is tried once more at most).
 */
export function shutdownDeadline(ms: number, logger: Logger, giveUp: AbortController): ShutdownDeadline {
  const at = Date.now() + ms;
  const timer = setTimeout(() => giveUp.abort(), ms);
  return {
    left: () => Math.max(0, at - Date.now()),
    async within(what, work, floorMs = FLOOR_MS) {
      const waitMs = Math.max(at - Date.now(), floorMs);
      let limit: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (limit = setTimeout(() => resolve('late'), waitMs)));
      try {
        const r = await Promise.race([work.then(() => 'done' as const), late]);
        if (r === 'late')
          logger.warn(
            { step: what, waitedMs: waitMs },
            `shutting down: stopped waiting for ${what} (the shutdown grace is over)`,
          );
      } catch (err) {
        logger.warn({ err, step: what }, `shutting down: ${what} failed`);
      } finally {
        clearTimeout(limit);
      }
    },
    done: () => clearTimeout(timer),
  };
}
