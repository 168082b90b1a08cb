import type { Logger } from 'pino';
import type { Attempt } from '../core/attempt.js';
import { attemptOf } from '../core/attempt-env.js';
import { availableAgents, taskLoadByAgent, touchAgents } from '../db/agents.js';
import { claimAttempts } from '../db/attempts/claim-attempt.js';
import type { ReportBatcher } from '../db/attempts/report-batcher.js';
import { flushHeartbeats } from '../db/attempts/flush-heartbeats.js';
import { releaseClaim } from '../db/attempts/release-claim.js';
import { loadAttempt } from '../db/load-attempt.js';
import type { LogWriter } from '../db/log-writer.js';
import { CHANNELS, notify, type Channel } from '../db/notifications.js';
import type { Sql } from '../db/sql.js';
import { setPendingReasons } from '../db/tis.js';
import { AgentRegistry } from '../executors/agent-registry.js';
import { AgentPlacement } from '../dispatch/agent-placement.js';
import { AgentsExecutor } from '../executors/agents.js';
import type { AgentConnectionDeps } from './agent-connection.js';
import { createSessionStore } from './agent-session-store.js';
import { HeartbeatBuffer } from './heartbeat-buffer.js';
import type { Metrics } from './metrics.js';

export interface AgentFleetOptions {
  sql: Sql;
  /** The pool for the claims (generic plans, see `createSql`); `sql` when not given. */
  claimSql?: Sql;
  logs: LogWriter;
  logger: Logger;
  metrics: Metrics;
  replicaId: string;
  keepaliveMs: number;
  agentToken: string | null;
  reports: ReportBatcher;
  /** Asks the leader, wherever it is, to step (for these runs only, when named); `finished`:
   *  attempts of theirs ended. */
  nudge(runIds?: string[], cause?: 'finished'): void;
  /** Asks the scheduler (this replica leads: it placed the work) to start queued runs, at least
   *  this many. */
  nudgeQueued(atLeast: number): void;
}

/**
 * The standalone-agent side of one replica: the registry of the agent streams it holds, their
 * batched heartbeats, the agents executor and the placement of work on agents, and the notifications replicas exchange so that work
 * placed by the leader reaches an agent connected to another replica.
 */
export function createAgentFleet(o: AgentFleetOptions) {
  const { sql, logger } = o;
  const log = logger.child({ component: 'agents' });
  const registry = new AgentRegistry();
  // A stream is deaf after 3 keepalive intervals; placement only trusts agents seen more recently.
  const freshMs = 3 * o.keepaliveMs;
  const heartbeats = new HeartbeatBuffer(
    { flushHeartbeats: (refs) => flushHeartbeats(sql, refs), touchAgents: (s) => touchAgents(sql, s) },
    log,
    Math.min(1000, o.keepaliveMs),
  );

  const executor: AgentsExecutor = new AgentsExecutor({
    registry,
    store: {
      release: async (attempt, reason) => {
        await releaseClaim(sql, attempt, reason);
      },
      notifyAssign: (agentId, tiId) => notify(sql, CHANNELS.assign, `${agentId} ${tiId}`),
    },
    onAgentGone: () => placement.invalidate(),
  });
  const placement: AgentPlacement = new AgentPlacement({
    deliver: (attempt) => executor.dispatch(attempt),
    logger: log,
    cacheMs: 200,
    // The parked work runs low: runs waiting to start may be there; ask for a step that reads
    // the oldest queued runs only (TIs the pool refused are offered again once it drains, and the
    // tick covers the rest).
    onHungry: (wanted) => o.nudgeQueued(wanted),
    store: {
      availableAgents: async () =>
        (await availableAgents(sql, freshMs)).map((a) => ({
          agentId: a.agent_id,
          labels: a.labels,
          capabilities: a.capabilities,
          slots: a.slots,
          holding: a.holding,
          connectedReplica: a.connected_replica!,
        })),
      taskLoad: (runId, taskId) => taskLoadByAgent(sql, runId, taskId),
      claim: async (claims) => {
        const made = await claimAttempts(o.claimSql ?? sql, 'agents', claims.map((c) => ({ tiId: c.work.tiId, agentId: c.agentId })));
        const out = new Map<string, Attempt>();
        for (const { work: w, agentId } of claims) {
          const c = made.get(w.tiId);
          if (!c) continue;
          out.set(w.tiId, attemptOf(w, c, agentId));
        }
        return out;
      },
      setPendingReasons: (reasons) => setPendingReasons(sql, reasons),
    },
  });

  const sessionDeps: AgentConnectionDeps = {
    store: createSessionStore(sql, o.reports, o.logs, o.replicaId),
    registry,
    heartbeats,
    logger: log,
    replicaId: o.replicaId,
    keepaliveMs: o.keepaliveMs,
    agentToken: o.agentToken,
    onFleetChanged: () => {
      placement.invalidate();
      o.nudge();
    },
    // An agent's slot is free as soon as its Finished arrives, before the end is written.
    onFinishing: (agentId, attemptToken) => placement.finishing(agentId, attemptToken),
    onFinished: (_agentId, runId, attemptToken) => {
      placement.recorded(attemptToken);
      o.nudge(runId ? [runId] : undefined, 'finished');
    },
    // Their retries wait for their backoff; the step that follows sees them.
    onAbandoned: (attempts) => {
      o.metrics.agentLost.inc(attempts.length);
      o.nudge([...new Set(attempts.map((a) => a.runId))], 'finished');
    },
    onRejected: (report, why) => (why === 'stale' ? o.metrics.staleReportsRejected : o.metrics.invalidAgentMessages).inc({ report }),
  };

  return {
    registry,
    executor,
    placement,
    sessionDeps,
    /** Sends Drain to an agent, wherever its stream is. */
    drain(agentId: string): void {
      const local = registry.get(agentId);
      placement.invalidate();
      if (local) local.drain('drained by an operator');
      else void notify(sql, CHANNELS.drain, agentId).catch(() => {});
    },
    /** Handles what other replicas ask of the agent streams this one holds. */
    async onNotification(channel: Channel, payload: string): Promise<void> {
      if (channel === CHANNELS.assign) {
        const [agentId, tiId] = payload.split(' ');
        const handle = agentId ? registry.get(agentId) : undefined;
        if (!handle || !tiId) return;
        const attempt = await loadAttempt(sql, tiId, agentId!);
        if (attempt && !handle.holds(tiId) && (await handle.assign(attempt)) === 'gone') await releaseClaim(sql, attempt, `AGENT_GONE:${agentId}`);
      } else if (channel === CHANNELS.cancel) {
        executor.cancel(payload, 'cancelled');
      } else if (channel === CHANNELS.drain) {
        placement.invalidate();
        registry.get(payload)?.drain('drained by an operator');
      }
    },
    async close(): Promise<void> {
      await heartbeats.close();
      await placement.close();
    },
  };
}

export type AgentFleet = ReturnType<typeof createAgentFleet>;
