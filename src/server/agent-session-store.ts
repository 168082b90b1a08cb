import type { Attempt, AttemptResult } from '../core/attempt.js';
import { ACTIVE_TI_STATES, ATTEMPT_ENDED_TI_STATES, CLAIMED_TI_STATES, STARTED_TI_STATES } from '../core/states.js';
import { connectAgent, disconnectAgent } from '../db/agents.js';
import { claimAttempt } from '../db/attempts/claim-attempt.js';
import { endAbandonedAttempts } from '../db/attempts/end-abandoned-attempts.js';
import { createDeliveryRecorder } from '../db/attempts/record-deliveries.js';
import type { ReportBatcher } from '../db/attempts/report-batcher.js';
import { inlineLiterals } from '../db/inline-literals.js';
import { loadAttempt } from '../db/load-attempt.js';
import type { LogWriter } from '../db/log-writer.js';
import { logsSoFar } from '../db/logs.js';
import type { Sql } from '../db/sql.js';
import { oneShotRefusal } from '../core/one-shot-claim.js';
import { readOneShotTi } from '../db/one-shot-ti.js';
import type { SessionStore } from './agent-connection-deps.js';

/**
 * The store side of agent sessions, every report fenced by the attempt's try number and token.
 * Starts and ends go through the replica's report batcher (retried through a database blip, and
 * written together with every other attempt's reports). Each attempt is bound to the agent process
 * (incarnation) it is sent to, so it is never sent to two.
 */
/** The states an attempt's end with this outcome is recorded as. */
function endStates(outcome: AttemptResult['outcome']): string[] {
  if (outcome === 'success') return ['success'];
  if (outcome === 'cancelled') return ['cancelled'];
  return ['failed', 'up_for_retry'];
}

export function createSessionStore(sql: Sql, reports: ReportBatcher, logs: LogWriter, replicaId: string): SessionStore {
  const recordDelivery = createDeliveryRecorder(sql);
  return {
    connectAgent: (h) => connectAgent(sql, { ...h, replicaId }),
    disconnectAgent: (agentId, sessionId, goodbye) => disconnectAgent(sql, agentId, sessionId, goodbye),

    async currentAttempts(agentId, incarnationId, refs) {
      if (refs.length === 0) return new Set();
      // Bound to the process that holds them now: one that outlived its agent's restart (re-attached
      // by the new process) is this process's from here on.
      const rows = await sql<{ token: string }[]>`
        update task_instances t set delivered_to = ${incarnationId}::uuid
        from unnest(${refs.map((r) => r.tiId)}::bigint[], ${refs.map((r) => r.tryNumber)}::int[], ${refs.map((r) => r.attemptToken)}::uuid[])
          as h(id, try, token)
        where t.id = h.id and t.try_number = h.try and t.attempt_token = h.token
          and t.agent_id = ${agentId} and t.state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
        returning t.attempt_token as token`;
      return new Set(rows.map((r) => r.token));
    },

    logsSoFar: (refs) => logsSoFar(sql, refs),

    async endAbandoned(agentId, incarnationId) {
      const rows = await endAbandonedAttempts(sql, agentId, incarnationId);
      return rows.map((r) => ({ tiId: r.id, runId: r.run_id, taskId: r.task_id, tryNumber: r.try_number, verdict: r.state, deliveredTo: r.delivered_to }));
    },

    async undelivered(agentId, incarnationId) {
      const rows = await sql<{ id: string }[]>`
        select id from task_instances where agent_id = ${agentId} and state in (${inlineLiterals(sql, CLAIMED_TI_STATES)})
          and (delivered_to is null or delivered_to = ${incarnationId}::uuid)
        order by id`;
      const out: Attempt[] = [];
      for (const r of rows) {
        const a = await loadAttempt(sql, r.id, agentId);
        if (a) out.push(a);
      }
      return out;
    },

    deliver: (attempt, agentId, incarnationId) => recordDelivery({ tiId: attempt.tiId, attemptToken: attempt.attemptToken, agentId, incarnationId }),

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

    logsWritten: () => logs.written(),

    async finished(ref, result: AttemptResult) {
      // Its log lines are written ahead of the end, with it (the report batcher sends them).
      logs.forget(ref.tiId, ref.tryNumber);
      const { verdict, runId } = await reports.finished(ref, result);
      if (verdict !== 'rejected') return { outcome: 'applied', runId };
      // Sent again after a reconnect, for an end already recorded the same: not a zombie, and
      // applied. An end that says otherwise had no effect, and is refused.
      const [row] = await sql<{ ended: boolean; state: string; exit_code: number | null }[]>`
        select state in (${inlineLiterals(sql, ATTEMPT_ENDED_TI_STATES)}) and ended_at is not null as ended, state, exit_code
        from task_instances where id = ${ref.tiId} and try_number = ${ref.tryNumber} and attempt_token = ${ref.attemptToken}`;
      const same = row?.ended === true && endStates(result.outcome).includes(row.state) && row.exit_code === result.exitCode;
      return { outcome: same ? 'applied' : 'refused', runId: null };
    },

    async takeAttempt(tiId, attemptToken, agentId) {
      const [row] = await sql`
        update task_instances set agent_id = ${agentId}
        where id = ${tiId} and attempt_token = ${attemptToken}::uuid and (agent_id is null or agent_id = ${agentId})
          and state in (${inlineLiterals(sql, ACTIVE_TI_STATES)})
        returning id`;
      return row ? loadAttempt(sql, tiId, agentId) : null;
    },

    async oneShotRefusal(tiId, agent) {
      const ti = await readOneShotTi(sql, tiId);
      return ti ? oneShotRefusal(ti, agent) : `task instance ${tiId} does not exist`;
    },

    async claimOnly(tiId, agentId) {
      const existing = await loadAttempt(sql, tiId, agentId);
      if (existing) return existing;
      if (!(await claimAttempt(sql, tiId, 'agents', agentId))) return null;
      return loadAttempt(sql, tiId, agentId);
    },
  };
}
