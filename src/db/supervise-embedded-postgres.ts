import type { Logger } from 'pino';
import type { EmbeddedPostgres } from './embedded-postgres.js';

/**
 * Lite's embedded Postgres kept running for the server's life. When it dies under the server
 * (SIGKILLed, stopped by someone, out of memory), it is started again on the same data directory
 * and port: the pools, the leader's lock session and the listener reconnect by themselves. When
 * it keeps dying, the server is told the reason, to exit non-zero so a supervisor sees it, instead
 * of retrying a database that will not come back.
 */
export interface SupervisedPostgres {
  readonly url: string;
  readonly adminUrl: string;
  readonly dataDir: string;
  /** Settles only when Postgres is gone for good: it died and could not be kept running. */
  readonly lost: Promise<Error>;
  /** Restarts no more: the server is stopping (a restart in flight still completes). */
  stopRestarting(): void;
  /** Restarts no more and stops the running Postgres (within `timeoutMs`, then SIGKILL). */
  stop(timeoutMs?: number): Promise<void>;
  /**
   * Restarts no more and stops Postgres only if this process started it: a server that failed to
   * start leaves one it adopted as it found it.
   */
  release(timeoutMs?: number): Promise<void>;
}

export interface RestartBudget {
  /** Restarts allowed within `windowMs`; the next death past them is final. */
  max: number;
  windowMs: number;
  /** Between two failed starts: time for the dead postmaster's backends to exit. */
  retryMs: number;
}

export const RESTART_BUDGET: RestartBudget = { max: 3, windowMs: 10 * 60_000, retryMs: 1000 };

/** Starts the embedded Postgres with `start` and restarts it within `budget` when it dies. */
export async function superviseEmbeddedPostgres(
  start: () => Promise<EmbeddedPostgres>,
  logger: Logger,
  budget: RestartBudget = RESTART_BUDGET,
): Promise<SupervisedPostgres> {
  let current = await start();
  const first = current;
  let stopping = false;
  let mayRestart = true;
  let restarting: Promise<void> | null = null;
  let lose: (err: Error) => void = () => {};
  const lost = new Promise<Error>((resolve) => (lose = resolve));
  const restarts: number[] = [];

  const watch = (pg: EmbeddedPostgres) => {
    void pg.exited.then((how) => {
      if (stopping || pg !== current) return;
      if (!mayRestart) {
        logger.warn(
          { postmaster: pg.pid, how },
          `embedded Postgres exited while the server stops (${how}): not starting it again`,
        );
        return;
      }
      logger.error(
        { postmaster: pg.pid, how },
        `embedded Postgres exited while the server runs (${how}): starting it again`,
      );
      restarting = restart(how).finally(() => (restarting = null));
    });
  };

  const restart = async (why: string) => {
    let last = why;
    for (;;) {
      const now = Date.now();
      while (restarts.length > 0 && now - restarts[0]! > budget.windowMs) restarts.shift();
      if (restarts.length >= budget.max) {
        const minutes = Math.round(budget.windowMs / 60_000);
        lose(
          new Error(
            `the embedded Postgres (data directory ${current.dataDir}) stopped and could not be kept running: ` +
              `${budget.max} restarts within ${minutes} min; last: ${last}`,
          ),
        );
        return;
      }
      restarts.push(now);
      try {
        const pg = await start();
        if (stopping) {
          await pg.stop();
          return;
        }
        current = pg;
        logger.warn(
          { postmaster: pg.pid, restarts: restarts.length },
          `embedded Postgres running again (pid ${pg.pid})`,
        );
        watch(pg);
        return;
      } catch (err) {
        last = (err as Error).message.replace(/\s*\n\s*/g, ' | ');
        logger.error({ err: last }, 'embedded Postgres did not start again');
        await new Promise((r) => setTimeout(r, budget.retryMs));
        if (stopping) return;
      }
    }
  };
  watch(current);

  const end = async (onlyOurs: boolean, timeoutMs?: number) => {
    stopping = true;
    // A start in flight stops what it started once it has (it sees `stopping`).
    if (restarting) await Promise.race([restarting, new Promise((r) => setTimeout(r, timeoutMs ?? 15_000))]);
    if (onlyOurs && current === first && first.adopted) return;
    await current.stop(timeoutMs);
  };
  return {
    url: first.url,
    adminUrl: first.adminUrl,
    dataDir: first.dataDir,
    lost,
    stopRestarting: () => void (mayRestart = false),
    stop: (timeoutMs) => end(false, timeoutMs),
    release: (timeoutMs) => end(true, timeoutMs),
  };
}
