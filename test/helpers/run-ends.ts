import { TERMINAL_RUN_STATES, type RunStateName } from '../../src/core/states.js';
import type { Sql } from '../../src/db/sql.js';
import { waitFor } from './leoflow-process.js';

/** Whether a run in this state has ended (TERMINAL_RUN_STATES). */
export function isRunEnded(state: string | null | undefined): state is RunStateName {
  return state != null && (TERMINAL_RUN_STATES as readonly string[]).includes(state);
}

export interface RunEndsOptions {
  /** 20 s unless given. */
  timeoutMs?: number;
  /** Between polls; 50 ms unless given. */
  everyMs?: number;
  /** A poll whose query fails counts as "not yet" (a fault may have killed its connection). */
  tolerateErrors?: boolean;
}

/** Polls the run until its state is terminal and resolves with that state; throws past the timeout. */
export async function runEnds(sql: Sql, runId: string, opts: RunEndsOptions = {}): Promise<RunStateName> {
  return waitFor(
    `run ${runId} ended`,
    async () => {
      let rows: { state: string }[];
      try {
        rows = await sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
      } catch (err) {
        if (opts.tolerateErrors) return null;
        throw err;
      }
      const state = rows[0]?.state;
      return isRunEnded(state) ? state : null;
    },
    opts.timeoutMs ?? 20_000,
    opts.everyMs ?? 50,
  );
}
