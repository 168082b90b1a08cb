import { ACTIVE_TI_STATES } from '../../core/states.js';
import type { Sql } from '../sql.js';

/** Which attempt a cache entry is looked up for, and by what. */
export interface CacheLookup {
  tiId: string;
  tryNumber: number;
  attemptToken: string;
  dagId: string;
  taskId: string;
  specHash: string;
  keyHash: string;
  ttlMs: number;
}

/** Where a cached task's attempt stands with its entry. */
export type CacheTake =
  /** No usable result: this attempt holds the entry and runs the task. */
  | { kind: 'run' }
  /** A success within its ttl: reuse it. `value`: its output's JSON text, null when it wrote none. */
  | { kind: 'hit'; value: string | null; source: { tiId: string; runId: string; tryNumber: number } }
  /** Another live attempt runs the task for this key: wait for it. */
  | { kind: 'wait'; holder: { runId: string; taskId: string; tryNumber: number } }
  /** This attempt is no longer current (cancelled, reaped, superseded): do nothing. */
  | { kind: 'gone' };

/**
 * Looks the entry of a cached task's attempt up, and takes it when there is no usable result, in
 * one transaction whose lock is the entry's primary key: of two runs racing on a key, one inserts
 * the row and runs, and the other, blocked on that insert, then finds it held and waits. An entry
 * held by an attempt no longer current, or done past its ttl, is taken over. With `--no-cache` (the
 * run's or the task instance's), the attempt takes the entry whatever it holds.
 */
export async function takeCacheEntry(sql: Sql, l: CacheLookup): Promise<CacheTake> {
  return sql.begin(async (tx) => {
    const [me] = await tx<{ no_cache: boolean }[]>`
      select t.no_cache or r.no_cache as no_cache
      from task_instances t join dag_runs r on r.id = t.run_id
      where t.id = ${l.tiId} and t.try_number = ${l.tryNumber} and t.attempt_token = ${l.attemptToken}
        and t.state = any(${ACTIVE_TI_STATES as string[]}::text[])`;
    if (!me) return { kind: 'gone' } as const;
    const mine = tx`${l.tiId}::bigint, ${l.tryNumber}::int, ${l.attemptToken}::uuid`;
    const inserted = await tx`
      insert into task_cache (dag_id, task_id, spec_hash, key_hash, state, ti_id, try_number, attempt_token, ttl_ms)
      values (${l.dagId}, ${l.taskId}, ${l.specHash}, ${l.keyHash}, 'running', ${mine}, ${l.ttlMs})
      on conflict do nothing`;
    if (inserted.count === 1) return { kind: 'run' } as const;
    const [row] = await tx<
      {
        state: 'running' | 'done';
        ti_id: string;
        try_number: number;
        attempt_token: string;
        value: string | null;
        fresh: boolean;
        holder_live: boolean;
        run_id: string | null;
        task_id: string | null;
      }[]
    >`
      select c.state, c.ti_id, c.try_number, c.attempt_token, c.value::text as value,
        c.expires_at > now() as fresh, t.run_id, t.task_id,
        coalesce(t.attempt_token = c.attempt_token and t.try_number = c.try_number
          and t.state = any(${ACTIVE_TI_STATES as string[]}::text[]), false) as holder_live
      from task_cache c left join task_instances t on t.id = c.ti_id
      where c.dag_id = ${l.dagId} and c.task_id = ${l.taskId} and c.spec_hash = ${l.specHash}
        and c.key_hash = ${l.keyHash}
      for update of c`;
    const mineAlready = row && row.attempt_token === l.attemptToken;
    if (row && !me.no_cache && !mineAlready) {
      if (row.state === 'done' && row.fresh && row.run_id !== null) {
        return {
          kind: 'hit',
          value: row.value,
          source: { tiId: row.ti_id, runId: row.run_id, tryNumber: row.try_number },
        } as const;
      }
      if (row.state === 'running' && row.holder_live) {
        return {
          kind: 'wait',
          holder: { runId: row.run_id!, taskId: row.task_id!, tryNumber: row.try_number },
        } as const;
      }
    }
    await tx`
      update task_cache set state = 'running', ti_id = ${l.tiId}, try_number = ${l.tryNumber},
        attempt_token = ${l.attemptToken}, ttl_ms = ${l.ttlMs}, value = null, created_at = now(),
        done_at = null, expires_at = null
      where dag_id = ${l.dagId} and task_id = ${l.taskId} and spec_hash = ${l.specHash} and key_hash = ${l.keyHash}`;
    return { kind: 'run' } as const;
  });
}
