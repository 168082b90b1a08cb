import type { Sql } from '../../../src/db/sql.js';

/**
 * What the database recorded of every attempt, rebuilt from the events log (the task_instances
 * row holds only the current try): each try's claims, start and end. A claim given back
 * (queued → scheduled, its try number undone) and made again gives one try two claims.
 */

export interface DbTry {
  try: number;
  /** Claims of this try number (queued events). */
  claims: number;
  agents: string[];
  started: boolean;
  /** The end recorded for this try: success, failed, up_for_retry or cancelled; null if none. */
  outcome: string | null;
  /** `agent_lost` when the reaper ended it. */
  reason: string | null;
}

export interface DbTi {
  id: string;
  run: string;
  task: string;
  state: string;
  tryNumber: number;
  tries: Map<number, DbTry>;
  /** Every move of the TI, in order: for the failure messages. */
  history: { atMs: number; move: string }[];
}

export interface DbRun {
  id: string;
  dagId: string;
  state: string;
}

export interface DbRecord {
  runs: DbRun[];
  /** By `run/task`. */
  tis: Map<string, DbTi>;
}

const ENDS = ['success', 'failed', 'up_for_retry', 'cancelled'];

export async function readDbRecord(sql: Sql): Promise<DbRecord> {
  const runs = await sql<DbRun[]>`select id::text, dag_id as "dagId", state from dag_runs order by id`;
  const rows = await sql<{ id: string; run_id: string; task_id: string; state: string; try_number: number }[]>`
    select id::text, run_id::text, task_id, state, try_number from task_instances order by id`;
  const tis = new Map<string, DbTi>();
  const byId = new Map<string, DbTi>();
  for (const r of rows) {
    const ti: DbTi = {
      id: r.id,
      run: r.run_id,
      task: r.task_id,
      state: r.state,
      tryNumber: r.try_number,
      tries: new Map(),
      history: [],
    };
    tis.set(`${r.run_id}/${r.task_id}`, ti);
    byId.set(r.id, ti);
  }
  const events = await sql<{ ti_id: string; payload: Record<string, unknown>; at: Date }[]>`
    select ti_id::text, payload, at from events where kind = 'ti.state' and ti_id is not null order by seq`;
  for (const e of events) {
    const ti = byId.get(e.ti_id);
    if (!ti) continue;
    const p = e.payload;
    const to = String(p.to);
    const n = Number(p.try);
    const reason = typeof p.reason === 'string' ? p.reason : null;
    const agent = typeof p.agent_id === 'string' ? p.agent_id : null;
    ti.history.push({
      atMs: e.at.getTime(),
      move: `${to}#${n}${reason ? `(${reason})` : ''}${agent ? `@${agent}` : ''}`,
    });
    const tryOf = (k: number) => {
      let t = ti.tries.get(k);
      if (!t) ti.tries.set(k, (t = { try: k, claims: 0, agents: [], started: false, outcome: null, reason: null }));
      return t;
    };
    if (to === 'queued') {
      const t = tryOf(n);
      t.claims++;
      if (agent) t.agents.push(agent);
    } else if (to === 'running') tryOf(n).started = true;
    else if (ENDS.includes(to)) {
      const t = tryOf(n);
      t.outcome = to;
      t.reason = reason;
    }
  }
  return { runs, tis };
}
