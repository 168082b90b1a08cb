import type { Logger } from 'pino';
import type { AttemptReporter } from '../executor.js';
import type { RunningAttempts } from './running-attempts.js';

/**
 * The subprocess executor's heartbeat: one beat for all its attempts, and the store's answer is
 * how an attempt learns it was superseded, reaped or cancelled elsewhere (then it is stopped).
 * Runs only while something is live, so an idle executor holds no timer.
 */
export class HeartbeatLoop {
  readonly #runs: RunningAttempts;
  readonly #reporter: AttemptReporter;
  readonly #logger: Logger;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | null = null;
  #inFlight: Promise<void> | null = null;

  constructor(o: { runs: RunningAttempts; reporter: AttemptReporter; logger: Logger; intervalMs: number }) {
    this.#runs = o.runs;
    this.#reporter = o.reporter;
    this.#logger = o.logger;
    this.#intervalMs = o.intervalMs;
  }

  /** The next beat, unless one is already due or in flight, or nothing is live. */
  schedule(): void {
    if (this.#timer !== null || this.#inFlight !== null || this.#runs.size === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#inFlight = this.#beat().finally(() => {
        this.#inFlight = null;
        this.schedule();
      });
    }, this.#intervalMs);
  }

  /** Cancels the beat due and waits for one in flight. */
  async close(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#inFlight;
  }

  async #beat(): Promise<void> {
    const sent = [...this.#runs.values()].filter((r) => r.startSettled && r.exit === null && !r.over);
    if (sent.length === 0) return;
    let current: Set<string>;
    try {
      current = await this.#reporter.heartbeat(sent.map((r) => r.attempt));
      if (!(current instanceof Set)) throw new TypeError(`heartbeat resolved ${typeof current}, not a Set`);
    } catch (err) {
      // Do no harm: a store blip says nothing about the attempts; the next beat retries.
      this.#logger.error({ err, tiIds: sent.map((r) => r.attempt.tiId) }, 'heartbeat failed; retrying next interval');
      return;
    }
    for (const run of sent) {
      if (current.has(run.attempt.tiId)) continue;
      this.#runs.stop(run, {
        outcome: 'superseded',
        error: 'attempt is no longer current',
        note: 'attempt is no longer current (superseded, reaped or cancelled elsewhere)',
        signal: 'SIGTERM',
      });
    }
  }
}
