import type { Logger } from 'pino';
import type { AgentCredentials } from '../auth/agent-credential.js';
import type { Attempt } from '../../core/attempt.js';
import { attemptOf } from '../../core/attempt-env.js';
import { availableAgents, disconnectReplica, taskLoadByAgent, touchAgents } from '../../db/agents.js';
import { claimAttempts } from '../../db/attempts/claim-attempt.js';
import type { ReportBatcher } from '../../db/attempts/report-batcher.js';
import { flushHeartbeats } from '../../db/attempts/flush-heartbeats.js';
import { releaseUndelivered } from '../../db/attempts/release-undelivered.js';
import { liveReplicaAddresses, withdrawReplica } from '../../db/replica-addresses.js';
import { loadAttempt } from '../../db/load-attempt.js';
import type { LogWriter } from '../../db/log-writer.js';
import { CHANNELS, notify, type Channel } from '../../db/notifications.js';
import type { Sql } from '../../db/sql.js';
import { setPendingReasons } from '../../db/tis.js';
import { AgentRegistry, type AgentHandle } from './agent-registry.js';
import { AgentPlacement } from './placement.js';
import { AgentsExecutor } from './agents-executor.js';
import type { AgentConnectionDeps } from './connection-deps.js';
import { createSessionStore } from './session-store.js';
import { HeartbeatBuffer } from './heartbeat-buffer.js';
import type { Metrics } from '../observability/metrics.js';

export interface AgentFleetOptions {
  sql: Sql;
  /** The pool for the claims (generic plans, see `createSql`); `sql` when not given. */
  claimSql?: Sql;
  logs: LogWriter;
  logger: Logger;
  metrics: Metrics;
  replicaId: string;
  keepaliveMs: number;
  /** The server's `--kill-grace`: agents stop the attempts they are given with it. */
  killGraceMs: number;
  /** The heartbeat reaper's threshold: agents are told to reconnect well within it. */
  heartbeatThresholdMs: number;
  /** What a Hello's credential is checked against. */
  agentCredentials: AgentCredentials;
  reports: ReportBatcher;
  /** Asks the leader, wherever it is, to step (for these runs only, when named); `finished`:
   *  attempts of theirs ended. */
  nudge(runIds?: string[], cause?: 'finished'): void;
  /** Asks the scheduler (this replica leads: it placed the work) to start queued runs, at least
   *  this many. */
  nudgeQueued(atLeast: number): void;
}

/** Tells an agent's stream it is drained, or no longer. */
function tellDrain(handle: AgentHandle, undrain: boolean): void {
  handle.drain(undrain ? 'undrained by an operator: work may come again' : 'drained by an operator', undrain);
}

/** Agents never wait longer than this between reconnect attempts, whatever the threshold. */
const MAX_RECONNECT_BACKOFF_MS = 10_000;

/**
 * The longest reconnect delay agents are told to use (Welcome.max_reconnect_backoff): a quarter
 * of the heartbeat threshold, so that an agent cut off from its replica comes back, through a few
 * failed tries, before the reaper declares its attempts lost (finished or not).
 */
export function maxReconnectBackoffMs(heartbeatThresholdMs: number): number {
  return Math.max(1, Math.min(MAX_RECONNECT_BACKOFF_MS, Math.floor(heartbeatThresholdMs / 4)));
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

  /** Set once this replica starts to shut down: its agents are sent elsewhere. */
  let leaving = false;
  /** The live replicas' agent addresses, read at most once a second (every Hello sends them). */
  let addresses: { at: number; urls: Promise<string[]> } | null = null;
  const replicaUrls = (): Promise<string[]> => {
    if (addresses === null || Date.now() - addresses.at > 1000) {
      const urls = liveReplicaAddresses(sql).then((all) =>
        [...all.filter((r) => r.replicaId === o.replicaId), ...all.filter((r) => r.replicaId !== o.replicaId)].map(
          (r) => r.agentUrl,
        ),
      );
      addresses = { at: Date.now(), urls };
      urls.catch(() => (addresses = null));
    }
    return addresses.urls;
  };
  /** Gives back an attempt a stream of this replica could not take, unless the agent has a newer
   *  session (which delivers it). */
  const giveBack = (attempt: Attempt, closedSessionId: string, reason: string) =>
    releaseUndelivered(sql, { ...attempt, agentId: attempt.agentId! }, closedSessionId, reason);

  const executor: AgentsExecutor = new AgentsExecutor({
    registry,
    store: {
      release: async (attempt, reason, closedSessionId) => {
        const { heldBy } = await giveBack(attempt, closedSessionId, reason);
        // The agent moved to another replica meanwhile: ask it to deliver (it may have already).
        if (heldBy !== null && heldBy !== o.replicaId)
          await notify(sql, CHANNELS.assign, `${attempt.agentId} ${attempt.tiId}`);
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
          draining: a.draining,
        })),
      taskLoad: (runId, taskId) => taskLoadByAgent(sql, runId, taskId),
      claim: async (claims) => {
        const made = await claimAttempts(
          o.claimSql ?? sql,
          'agents',
          claims.map((c) => ({ tiId: c.work.tiId, agentId: c.agentId })),
        );
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
    killGraceMs: o.killGraceMs,
    maxReconnectBackoffMs: maxReconnectBackoffMs(o.heartbeatThresholdMs),
    heartbeatThresholdMs: o.heartbeatThresholdMs,
    leaving: () => leaving,
    replicaUrls,
    agentCredentials: o.agentCredentials,
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
    onRejected: (report, why) =>
      (why === 'stale' ? o.metrics.staleReportsRejected : o.metrics.invalidAgentMessages).inc({ report }),
  };

  return {
    registry,
    executor,
    placement,
    sessionDeps,
    /** Sends Drain (or, with `undrain`, the Drain that lifts it) to an agent, wherever its stream is. */
    drain(agentId: string, undrain = false): void {
      const local = registry.get(agentId);
      placement.invalidate();
      if (local) tellDrain(local, undrain);
      // Agent ids hold no spaces: the payload is the id, and ` undrain` for an undrain.
      else void notify(sql, CHANNELS.drain, undrain ? `${agentId} undrain` : agentId).catch(() => {});
    },
    /** Handles what other replicas ask of the agent streams this one holds. */
    async onNotification(channel: Channel, payload: string): Promise<void> {
      if (channel === CHANNELS.assign) {
        const [agentId, tiId] = payload.split(' ');
        const handle = agentId ? registry.get(agentId) : undefined;
        if (!handle || !tiId) return;
        const attempt = await loadAttempt(sql, tiId, agentId!);
        // Not forwarded when kept for another replica's session: that replica had this notification too.
        if (attempt && !handle.holds(tiId) && (await handle.assign(attempt)) === 'gone')
          await giveBack(attempt, handle.sessionId, `AGENT_GONE:${agentId}`);
      } else if (channel === CHANNELS.cancel) {
        executor.cancel(payload, 'cancelled');
      } else if (channel === CHANNELS.drain) {
        placement.invalidate();
        const [agentId, how] = payload.split(' ');
        const handle = agentId ? registry.get(agentId) : undefined;
        if (handle) tellDrain(handle, how === 'undrain');
      }
    },
    /**
     * Step 1 of a graceful stop: no replica places work on this one's agents any more. They are
     * shown disconnected (their streams stay open, and deliver what was placed before), a new
     * agent stream is refused, and the leader is told to read the fleet again.
     */
    async leave(): Promise<void> {
      leaving = true;
      try {
        // No Welcome anywhere names this replica from now on.
        await withdrawReplica(sql, o.replicaId);
        const n = await disconnectReplica(sql, o.replicaId);
        log.info({ agents: n }, 'shutting down: no more work is placed on the agents of this replica');
      } catch (err) {
        // The stop goes on: its agents still move, and an Assign that can no longer reach one is
        // given back or sent again when it reconnects.
        log.error({ err }, "shutting down: could not show this replica's agents as disconnected");
      }
      placement.invalidate();
      o.nudge();
    },
    /**
     * Step 3 of a graceful stop (after `leave()` and after leadership is released): tells every
     * agent of this replica to reconnect elsewhere, and waits (at most `waitMs`) for their
     * streams to close. Agents keep their attempts and send again what was not acknowledged.
     * Resolves how many were still connected at the end.
     */
    async sendAway(waitMs: number): Promise<number> {
      const deadline = Date.now() + waitMs;
      const reason = `replica ${o.replicaId} is shutting down`;
      // Where to: the other live replicas. Agents given this replica's address only learn them here.
      const others = await liveReplicaAddresses(sql)
        .then((all) => all.filter((r) => r.replicaId !== o.replicaId).map((r) => r.agentUrl))
        .catch((err: unknown) => {
          log.warn(
            { err },
            "shutting down: could not read the other replicas' addresses: agents are told to reconnect without one",
          );
          return [] as string[];
        });
      if (others.length === 0 && registry.size > 0) {
        log.warn(
          { agents: registry.size },
          'shutting down: no other replica is advertised: agents that know no other address wait for one',
        );
      }
      for (;;) {
        // Every pass: a stream that opened just before `leave()` registers a little later.
        for (const handle of registry.all()) handle.goAway(reason, others);
        if (registry.size === 0 || Date.now() >= deadline) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      if (registry.size > 0)
        log.warn(
          { agents: registry.size, waitMs },
          'agents still connected after being told to reconnect elsewhere: their streams are closed',
        );
      return registry.size;
    },
    async close(): Promise<void> {
      await heartbeats.close();
      await placement.close();
    },
  };
}

export type AgentFleet = ReturnType<typeof createAgentFleet>;
