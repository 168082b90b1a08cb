/** What one round reports to the timer: whether more work is waiting. */
export interface RoundOutcome {
  more: boolean;
}

export interface HistoryKeeperOptions {
  /** One round of upkeep (history-round.ts); `fresh` when this replica has just become leader. */
  round(fresh: boolean): Promise<RoundOutcome>;
  /** Whether this replica leads: only the leader keeps the history. */
  leading(): boolean;
  /** A round that threw (the next one comes anyway). */
  failed(err: unknown): void;
  /** Time between rounds while there is work, and once there is none. */
  busyMs?: number;
  idleMs?: number;
}

export interface HistoryKeeper {
  start(): void;
  /** No more rounds; waits for the one in progress. */
  stop(): Promise<void>;
}

/**
 * The timer of the leader's upkeep of finished history (and of agents gone long), beside the
 * scheduler's loop and never inside a step: removing history must not lengthen a step, and need
 * not be prompt. Rounds come `busyMs` apart while the last one said more was waiting, `idleMs`
 * apart otherwise, one at a time; a replica that does not lead runs none (and its first round as
 * leader is `fresh`).
 */
export function createHistoryKeeper(o: HistoryKeeperOptions): HistoryKeeper {
  const busyMs = o.busyMs ?? 2_000;
  const idleMs = o.idleMs ?? 30_000;
  let timer: NodeJS.Timeout | null = null;
  let running = false;
  let inFlight: Promise<void> | null = null;
  let led = false;

  const schedule = (ms: number) => {
    if (running) timer = setTimeout(() => void tick(), ms);
  };

  const tick = async () => {
    timer = null;
    if (!running) return;
    if (!o.leading()) {
      led = false;
      return schedule(busyMs);
    }
    const fresh = !led;
    led = true;
    let more = false;
    inFlight = o.round(fresh).then(
      (r) => void (more = r.more),
      (err: unknown) => o.failed(err),
    );
    await inFlight;
    inFlight = null;
    schedule(more ? busyMs : idleMs);
  };

  return {
    start() {
      if (running) return;
      running = true;
      schedule(busyMs);
    },
    async stop() {
      running = false;
      if (timer) clearTimeout(timer);
      timer = null;
      await inFlight;
    },
  };
}
