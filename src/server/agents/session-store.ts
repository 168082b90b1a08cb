import type { Attempt, AttemptResult } from '../../core/attempt.js';
import { agentsOfTokenPast, connectAgent, disconnectAgent } from '../../db/agents.js';
import { attemptInputs } from '../../db/attempts/attempt-inputs.js';
import { bindHeldAttempts } from '../../db/attempts/bind-held-attempts.js';
import { claimAttempt } from '../../db/attempts/claim-attempt.js';
import { endAbandonedAttempts } from '../../db/attempts/end-abandoned-attempts.js';
import { createDeliveryRecorder } from '../../db/attempts/record-deliveries.js';
import { isRunning } from '../../db/attempts/is-running.js';
import { recordedEnd } from '../../db/attempts/recorded-end.js';
import type { ReportBatcher } from '../../db/attempts/report-batcher.js';
import { takeAttempt } from '../../db/attempts/take-attempt.js';
import { undeliveredClaims } from '../../db/attempts/undelivered-claims.js';
import { loadAttempt } from '../../db/load-attempt.js';
import type { LogWriter } from '../../db/log-writer.js';
import { logsSoFar } from '../../db/logs.js';
import type { Sql } from '../../db/sql.js';
import { oneShotRefusal } from '../../core/one-shot-claim.js';
import { readOneShotTi } from '../../db/one-shot-ti.js';
import type { SessionStore } from './connection-deps.js';

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

export function createSessionStore(
  sql: Sql,
  reports: ReportBatcher,
  logs: LogWriter,
  replicaId: string,
  install: string,
): SessionStore {
  const recordDelivery = createDeliveryRecorder(sql);
  return {
    connectAgent: (h) => connectAgent(sql, { ...h, replicaId }),
    agentsOfTokenPast: (tokenId, agentId, max) => agentsOfTokenPast(sql, tokenId, agentId, max),
    disconnectAgent: (agentId, sessionId, goodbye) => disconnectAgent(sql, agentId, sessionId, goodbye),

    currentAttempts: (agentId, incarnationId, refs) => bindHeldAttempts(sql, agentId, incarnationId, refs),

    logsSoFar: (refs) => logsSoFar(sql, refs),

    async endAbandoned(agentId, incarnationId) {
      const rows = await endAbandonedAttempts(sql, agentId, incarnationId);
      return rows.map((r) => ({
        tiId: r.id,
        runId: r.run_id,
        taskId: r.task_id,
        tryNumber: r.try_number,
        verdict: r.state,
        deliveredTo: r.delivered_to,
      }));
    },

    async undelivered(agentId, incarnationId) {
      const out: Attempt[] = [];
      for (const tiId of await undeliveredClaims(sql, agentId, incarnationId)) {
        const a = await loadAttempt(sql, tiId, agentId, install);
        if (a) out.push(a);
      }
      return out;
    },

    inputs: (attempt) => attemptInputs(sql, attempt),

    deliver: (attempt, agentId, incarnationId) =>
      recordDelivery({ tiId: attempt.tiId, attemptToken: attempt.attemptToken, agentId, incarnationId }),

    async started(ref, pid, agentId) {
      if (await reports.started(ref, { pid, agentId })) return true;
      // Sent again after a reconnect, for an attempt already running: not a zombie.
      return isRunning(sql, ref, agentId);
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
      const end = await recordedEnd(sql, ref);
      const same = end !== null && endStates(result.outcome).includes(end.state) && end.exitCode === result.exitCode;
      return { outcome: same ? 'applied' : 'refused', runId: null };
    },

    async takeAttempt(tiId, attemptToken, agentId) {
      return (await takeAttempt(sql, tiId, attemptToken, agentId)) ? loadAttempt(sql, tiId, agentId, install) : null;
    },

    async oneShotRefusal(tiId, agent) {
      const ti = await readOneShotTi(sql, tiId);
      return ti ? oneShotRefusal(ti, agent) : `task instance ${tiId} does not exist`;
    },

    async claimOnly(tiId, agentId) {
      const existing = await loadAttempt(sql, tiId, agentId, install);
      if (existing) return existing;
      if (!(await claimAttempt(sql, tiId, 'agents', agentId))) return null;
      return loadAttempt(sql, tiId, agentId, install);
    },
  };
}
