import type { Sql } from '../../../src/db/sql.js';
import type { ChaosCluster } from './chaos-cluster.js';

/**
 * What the cluster looks like when runs did not end in time: who leads by each replica's word,
 * every database session and what it waits for, and the locks nobody got. Printed with the
 * failure, so a stall can be told from a slow drain without running the seed again.
 */
export async function stallReport(sql: Sql, cluster: ChaosCluster): Promise<string> {
  const out: string[] = [];
  for (const r of cluster.replicas) {
    const leader = await cluster
      .clientsOf(r)
      .cluster.getLeader({}, { timeoutMs: 2000 })
      .then(
        (x) => `leader ${x.leaderId || '(none)'}`,
        (err: Error) => `GetLeader failed: ${err.message}`,
      );
    out.push(
      `${r.name} (${r.status}, pid ${r.proc?.pid ?? '-'}): ${leader}; last words:\n${(r.proc?.tail() ?? '').replace(/^/gm, '    ')}`,
    );
  }
  const sessions = await sql<Record<string, unknown>[]>`
    select pid, application_name as app, state, wait_event_type as wait_type, wait_event as wait,
      round(extract(epoch from now() - state_change))::int as "state_for_s", left(regexp_replace(query, '\s+', ' ', 'g'), 160) as query
    from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() order by application_name, pid`.catch(
    (err: Error) => [{ error: err.message }],
  );
  out.push(`database sessions:\n${sessions.map((s) => `  ${JSON.stringify(s)}`).join('\n')}`);
  const waiting = await sql<Record<string, unknown>[]>`
    select pid, locktype, mode, relation::regclass::text as relation from pg_locks where not granted`.catch(
    (err: Error) => [{ error: err.message }],
  );
  out.push(`locks waited for: ${waiting.length === 0 ? 'none' : waiting.map((w) => JSON.stringify(w)).join(', ')}`);
  return out.join('\n');
}
