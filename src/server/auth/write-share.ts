import { Code, ConnectError } from '@connectrpc/connect';

/** A caller's writes that may wait for a place, beyond those running: a burst is served, a flood refused. */
export const WRITES_WAITING_PER_CALLER = 64;

/**
 * Each caller's share of the server's writes: at most `running` of its writes run at once, and up
 * to WRITES_WAITING_PER_CALLER more wait for a place, without a database connection, in their
 * order. A rate alone does not bound a caller's share: writes slow enough never reach the rate,
 * and a client with a hundred in flight would hold every connection of the pool, so that the
 * others' reads and writes wait behind it. Past the queue: RESOURCE_EXHAUSTED.
 */
export class WriteShare {
  readonly #callers = new Map<string, { running: number; waiting: (() => void)[] }>();

  constructor(readonly running: number) {}

  /** Waits for a place for one write of `caller`; resolves the call that gives the place back. */
  async enter(caller: string, describe: () => string): Promise<() => void> {
    let c = this.#callers.get(caller);
    if (!c) this.#callers.set(caller, (c = { running: 0, waiting: [] }));
    if (c.running >= this.running) {
      if (c.waiting.length >= WRITES_WAITING_PER_CALLER) {
        throw new ConnectError(
          `${describe()} has ${c.running} writes running and ${c.waiting.length} waiting, the limit ` +
            `(--max-token-concurrent-writes ${this.running}, and ${WRITES_WAITING_PER_CALLER} waiting): ` +
            'wait for answers before sending more',
          Code.ResourceExhausted,
          { 'retry-after-ms': '100' },
        );
      }
      await new Promise<void>((resolve) => c.waiting.push(resolve));
    } else c.running++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const next = c.waiting.shift();
      // The place passes to the next in line, or is given back.
      if (next) next();
      else if (--c.running === 0) this.#callers.delete(caller);
    };
  }
}
