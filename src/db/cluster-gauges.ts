import type { Sql } from './sql.js';

/** What the leader reports of the whole cluster at a scrape. */
export interface ClusterGauges {
  runs: { queued: number; running: number };
  /** Task instances ready to run and not running yet, by executor, with the longest wait (s). */
  waiting: { executor: string; count: number; oldestS: number }[];
}

/**
 * The active runs by state, and the task instances waiting to run by executor (scheduled,
 * claimed and not started, or a retry that is due) with the oldest one's wait since it was ready.
 * Both read only the partial indexes of what is active, so a scrape costs what is active, not the
 * history.
 */
export async function readClusterGauges(sql: Sql): Promise<ClusterGauges> {
  const [runs] = await sql<{ queued: string; running: string }[]>`
    select count(*) filter (where state = 'queued') as queued, count(*) filter (where state = 'running') as running
    from dag_runs where state in ('queued', 'running')`;
  const waiting = await sql<{ executor: string; count: string; oldest_s: number | null }[]>`
    select executor, count(*) as count,
      extract(epoch from now() - min(case when state = 'up_for_retry' then next_try_at else coalesce(ready_at,
        queued_at) end))::float8 as oldest_s
    from task_instances
    where state in ('scheduled', 'queued') or (state = 'up_for_retry' and next_try_at <= now())
    group by executor`;
  return {
    runs: { queued: Number(runs?.queued ?? 0), running: Number(runs?.running ?? 0) },
    waiting: waiting.map((w) => ({
      executor: w.executor,
      count: Number(w.count),
      oldestS: Math.max(0, w.oldest_s ?? 0),
    })),
  };
}
