import type { Attempt, AttemptResult } from '../core/attempt.js';
import { ACTIVE_TI_STATES, ATTEMPT_ENDED_TI_STATES, CLAIMED_TI_STATES, STARTED_TI_STATES } from '../core/states.js';
import { connectAgent, disconnectAgent } from '../db/agents.js';
import { claimAttempt } from '../db/attempts/claim-attempt.js';
import type { ReportBatcher } from '../db/attempts/report-batcher.js';
import { inlineLiterals } from '../db/inline-literals.js';
import { loadAttempt } from '../db/load-attempt.js';
import type { LogWriter } from '../db/log-writer.js';
import { logsSoFar } from '../db/logs.js';
import type { Sql } from '../db/sql.js';
import type { SessionStore } from './agent-connection.js';

/**
 * The store side of agent sessions, every report fenced by the attempt's try number and token.
 * Starts and ends go through the replica's report batcher (retried through a database blip, and
 * written together with every other attempt's reports).
 */
export function createSessionStore(sql: Sql, reports: ReportBatcher, logs: LogWriter, replicaId: string): SessionStore {
  return {
    connectAgent: (h) => connectAgent(sql, { ...h, replicaId }),
    disconnectAgent: (agentId, sessionId) => disconnectAgent(sql, agentId, sessionId),

    async currentAttempts(agentId, refs) {
      if (refs.length === 0) return new Set();
      const rows = await sql<{ token: string }[]>`
        select t.attempt_token as token from task_instances t
        join unnest(${refs.map((r) => r.tiId)}::bigint[], ${refs.map((r) => r.tryNumber)}::int[], ${refs.map((r) => r.attemptToken)}::uuid[])
          as h(id, try, token) on t.id = h.id and t.try_number = h.try and t.attempt_token = h.token
        where t.agent_id = ${agentId} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})`;
      return new Set(rows.map((r) => r.token));
    },

    logsSoFar: (refs) => logsSoFar(sql, refs),

    async undelivered(agentId) {
      const rows = await sql<{ id: string }[]>`
        select id from task_instances where agent_id = ${agentId} and state in (${inlineLiterals(sql, CLAIMED_TI_STATES)}) order by id`;
      const out: Attempt[] = [];
      for (const r of rows) {
        const a = await loadAttempt(sql, r.id, agentId);
        if (a) out.push(a);
      }
      return out;
    },

    async started(ref, pid, agentId) {
      if (await reports.started(ref, { pid, agentId })) return true;
      // Sent again after a reconnect, for an attempt already running: not a zombie.
      const [row] = await sql`
        select 1 from task_instances where id = ${ref.tiId} and try_number = ${ref.tryNumber}
          and attempt_token = ${ref.attemptToken} and state in (${inlineLiterals(sql, STARTED_TI_STATES)}) and agent_id = ${agentId}`;
      return row !== undefined;
    },

    log(ref, stream, line, seq) {
      logs.write(ref.tiId, ref.tryNumber, ref.attemptToken, stream, line, seq);
    },

    async finished(ref, result: AttemptResult) {
      // Its log lines are written ahead of the end, with it (the report batcher sends them).
      logs.forget(ref.tiId, ref.tryNumber);
      const { verdict, runId } = await reports.finished(ref, result);
      if (verdict !== 'rejected') return { outcome: 'applied', runId };
      // Sent again after a reconnect, for an end already recorded: not a zombie.
      const [row] = await sql<{ ended: boolean }[]>`
        select state in (${inlineLiterals(sql, ATTEMPT_ENDED_TI_STATES)}) and ended_at is not null as ended
        from task_instances where id = ${ref.tiId} and try_number = ${ref.tryNumber} and attempt_token = ${ref.attemptToken}`;
      return { outcome: row?.ended ? 'applied' : 'refused', runId: null };
    },

    async claimOnly(tiId, agentId) {
      const existing = await loadAttempt(sql, tiId, agentId);
      if (existing) return existing;
      if (!(await claimAttempt(sql, tiId, 'agents', agentId))) return null;
      return loadAttempt(sql, tiId, agentId);
    },
  };
}
