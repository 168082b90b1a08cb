import { OUTPUT_BYTES } from '../../core/task-output.js';
import type { Logger } from 'pino';
import type { AgentCredentials } from '../auth/agent-credential.js';
import type { Attempt } from '../../core/attempt.js';
import { attemptOf } from '../../core/attempt-env.js';
import type { CacheGate } from '../../dispatch/cache-gate.js';
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
  /** The completion cache's gate: a placed attempt of a cached task passes it before delivery. */
  cacheGate?: CacheGate;
  sql: Sql;
  /** The pool for the claims (generic plans, see `createSql`); `sql` when not given. */
  claimSql?: Sql;
  logs: LogWriter;
  logger: Logger;
  metrics: Metrics;
  replicaId: string;
  /** This install's id, for the attempts' idempotency keys. */
  install: string;
  keepaliveMs: number;
  /** The server's `--kill-grace`: agents stop the attempts they are given with it. */
  killGraceMs: number;
  /** The server's `--max-output-size`: the size limit of a task's output (default OUTPUT_BYTES.default). */
  maxOutputBytes?: number;
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
 * batched heartbeats, the agents executor and the placement of work on agents, and the
 * notifications replicas exchange so that work placed by the leader reaches an agent connected to
 * another replica.
 */
export class AgentFleet {
  readonly registry = new AgentRegistry();
  readonly executor: AgentsExecutor;
  readonly placement: AgentPlacement;
  readonly sessionDeps: AgentConnectionDeps;
  readonly #o: AgentFleetOptions;
  readonly #log: Logger;
  /** A stream is deaf after 3 keepalive intervals; placement only trusts agents seen more recently. */
  readonly #freshMs: number;
  readonly #heartbeats: HeartbeatBuffer;
  /** Set once this replica starts to shut down: its agents are sent elsewhere. */
  #leaving = false;
  /** The live replicas' agent addresses, read at most once a second (every Hello sends them). */
  #addresses: { at: number; urls: Promise<string[]> } | null = null;

  constructor(o: AgentFleetOptions) {
    this.#o = o;
    this.#log = o.logger.child({ component: 'agents' });
    this.#freshMs = 3 * o.keepaliveMs;
    const sql = o.sql;
    this.#heartbeats = new HeartbeatBuffer(
      { flushHeartbeats: (refs) => flushHeartbeats(sql, refs), touchAgents: (s) => touchAgents(sql, s) },
      this.#log,
      Math.min(1000, o.keepaliveMs),
    );
    this.executor = new AgentsExecutor({
      streams: this.registry,
      store: {
        release: async (attempt, reason, closedSessionId) => {
          const { heldBy } = await this.#giveBack(attempt, closedSessionId, reason);
          // The agent moved to another replica meanwhile: ask it to deliver (it may have already).
          if (heldBy !== null && heldBy !== this.#o.replicaId)
            await notify(this.#o.sql, CHANNELS.assign, `${attempt.agentId} ${attempt.tiId}`);
        },
        notifyAssign: (agentId, tiId) => notify(this.#o.sql, CHANNELS.assign, `${agentId} ${tiId}`),
      },
      onAgentGone: () => this.placement.invalidate(),
    });
    this.placement = new AgentPlacement({
      deliver: (attempt) =>
        this.#o.cacheGate
          ? this.#o.cacheGate.dispatch(attempt, (a) => this.executor.dispatch(a))
          : this.executor.dispatch(attempt),
      logger: this.#log,
      cacheMs: 200,
      // The parked work runs low: runs waiting to start may be there; ask for a step that reads
      // the oldest queued runs only (TIs the pool refused are offered again once it drains, and the
      // tick covers the rest).
      onHungry: (wanted) => this.#o.nudgeQueued(wanted),
      store: {
        availableAgents: async () =>
          (await availableAgents(this.#o.sql, this.#freshMs)).map((a) => ({
            agentId: a.agent_id,
            labels: a.labels,
            capabilities: a.capabilities,
            slots: a.slots,
            holding: a.holding,
            connectedReplica: a.connected_replica!,
            draining: a.draining,
          })),
        taskLoad: (runId, taskId) => taskLoadByAgent(this.#o.sql, runId, taskId),
        claim: async (claims) => {
          const made = await claimAttempts(
            this.#o.claimSql ?? this.#o.sql,
            'agents',
            claims.map((c) => ({ tiId: c.work.tiId, agentId: c.agentId })),
          );
          const out = new Map<string, Attempt>();
          for (const { work: w, agentId } of claims) {
            const c = made.get(w.tiId);
            if (!c) continue;
            out.set(w.tiId, attemptOf(w, c, this.#o.install, agentId));
          }
          return out;
        },
        setPendingReasons: (reasons) => setPendingReasons(this.#o.sql, reasons),
      },
    });

    this.sessionDeps = {
      store: createSessionStore(this.#o.sql, this.#o.reports, this.#o.logs, this.#o.replicaId, this.#o.install),
      registry: this.registry,
      heartbeats: this.#heartbeats,
      logger: this.#log,
      replicaId: this.#o.replicaId,
      keepaliveMs: this.#o.keepaliveMs,
      killGraceMs: this.#o.killGraceMs,
      maxOutputBytes: this.#o.maxOutputBytes ?? OUTPUT_BYTES.default,
      onOutputRejected: () => this.#o.metrics.staleOutputsRejected.inc({ executor: 'agents' }),
      maxReconnectBackoffMs: maxReconnectBackoffMs(this.#o.heartbeatThresholdMs),
      heartbeatThresholdMs: this.#o.heartbeatThresholdMs,
      leaving: () => this.#leaving,
      replicaUrls: () => this.#replicaUrls(),
      agentCredentials: this.#o.agentCredentials,
      onFleetChanged: () => {
        this.placement.invalidate();
        this.#o.nudge();
      },
      // An agent's slot is free as soon as its Finished arrives, before the end is written.
      onFinishing: (agentId, attemptToken) => this.placement.finishing(agentId, attemptToken),
      onFinished: (_agentId, runId, attemptToken) => {
        this.placement.recorded(attemptToken);
        this.#o.nudge(runId ? [runId] : undefined, 'finished');
      },
      // Their retries wait for their backoff; the step that follows sees them.
      onAbandoned: (attempts) => {
        this.#o.metrics.agentLost.inc(attempts.length);
        this.#o.nudge([...new Set(attempts.map((a) => a.runId))], 'finished');
      },
      onRejected: (report, why) =>
        (why === 'stale' ? this.#o.metrics.staleReportsRejected : this.#o.metrics.invalidAgentMessages).inc({ report }),
    };
  }

  /** Sends Drain (or, with `undrain`, the Drain that lifts it) to an agent, wherever its stream is. */
  drain(agentId: string, undrain = false): void {
    const local = this.registry.get(agentId);
    this.placement.invalidate();
    if (local) tellDrain(local, undrain);
    // Agent ids hold no spaces: the payload is the id, and ` undrain` for an undrain.
    else void notify(this.#o.sql, CHANNELS.drain, undrain ? `${agentId} undrain` : agentId).catch(() => {});
  }

  /** Handles what other replicas ask of the agent streams this one holds. */
  async onNotification(channel: Channel, payload: string): Promise<void> {
    if (channel === CHANNELS.assign) {
      const [agentId, tiId] = payload.split(' ');
      const handle = agentId ? this.registry.get(agentId) : undefined;
      if (!handle || !tiId) return;
      const attempt = await loadAttempt(this.#o.sql, tiId, agentId!, this.#o.install);
      // Not forwarded when kept for another replica's session: that replica had this notification too.
      if (attempt && !handle.holds(tiId) && (await handle.assign(attempt)) === 'gone')
        await this.#giveBack(attempt, handle.sessionId, `AGENT_GONE:${agentId}`);
    } else if (channel === CHANNELS.cancel) {
      this.executor.cancel(payload, 'cancelled');
    } else if (channel === CHANNELS.drain) {
      this.placement.invalidate();
      const [agentId, how] = payload.split(' ');
      const handle = agentId ? this.registry.get(agentId) : undefined;
      if (handle) tellDrain(handle, how === 'undrain');
    }
  }

  /**
   * Step 1 of a graceful stop: no replica places work on this one's agents any more. They are
   * shown disconnected (their streams stay open, and deliver what was placed before), a new
   * agent stream is refused, and the leader is told to read the fleet again.
   */
  async leave(): Promise<void> {
    this.#leaving = true;
    try {
      // No Welcome anywhere names this replica from now on.
      await withdrawReplica(this.#o.sql, this.#o.replicaId);
      const n = await disconnectReplica(this.#o.sql, this.#o.replicaId);
      this.#log.info({ agents: n }, 'shutting down: no more work is placed on the agents of this replica');
    } catch (err) {
      // The stop goes on: its agents still move, and an Assign that can no longer reach one is
      // given back or sent again when it reconnects.
      this.#log.error({ err }, "shutting down: could not show this replica's agents as disconnected");
    }
    this.placement.invalidate();
    this.#o.nudge();
  }

  /**
   * Step 3 of a graceful stop (after `leave()` and after leadership is released): tells every
   * agent of this replica to reconnect elsewhere, and waits (at most `waitMs`) for their
   * streams to close. Agents keep their attempts and send again what was not acknowledged.
   * Resolves how many were still connected at the end.
   */
  async sendAway(waitMs: number): Promise<number> {
    const deadline = Date.now() + waitMs;
    const reason = `replica ${this.#o.replicaId} is shutting down`;
    // Where to: the other live replicas. Agents given this replica's address only learn them here.
    const others = await liveReplicaAddresses(this.#o.sql)
      .then((all) => all.filter((r) => r.replicaId !== this.#o.replicaId).map((r) => r.agentUrl))
      .catch((err: unknown) => {
        this.#log.warn(
          { err },
          "shutting down: could not read the other replicas' addresses: agents are told to reconnect without one",
        );
        return [] as string[];
      });
    if (others.length === 0 && this.registry.size > 0) {
      this.#log.warn(
        { agents: this.registry.size },
        'shutting down: no other replica is advertised: agents that know no other address wait for one',
      );
    }
    for (;;) {
      // Every pass: a stream that opened just before `leave()` registers a little later.
      for (const handle of this.registry.all()) handle.goAway(reason, others);
      if (this.registry.size === 0 || Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    if (this.registry.size > 0)
      this.#log.warn(
        { agents: this.registry.size, waitMs },
        'agents still connected after being told to reconnect elsewhere: their streams are closed',
      );
    return this.registry.size;
  }

  async close(): Promise<void> {
    await this.#heartbeats.close();
    await this.placement.close();
  }

  #replicaUrls(): Promise<string[]> {
    const o = this.#o;
    if (this.#addresses === null || Date.now() - this.#addresses.at > 1000) {
      const urls = liveReplicaAddresses(o.sql).then((all) =>
        [...all.filter((r) => r.replicaId === o.replicaId), ...all.filter((r) => r.replicaId !== o.replicaId)].map(
          (r) => r.agentUrl,
        ),
      );
      this.#addresses = { at: Date.now(), urls };
      urls.catch(() => (this.#addresses = null));
    }
    return this.#addresses.urls;
  }

  /**
   * Gives back an attempt a stream of this replica could not take, unless the agent has a newer
   * session (which delivers it).
   */
  #giveBack(attempt: Attempt, closedSessionId: string, reason: string) {
    return releaseUndelivered(this.#o.sql, { ...attempt, agentId: attempt.agentId! }, closedSessionId, reason);
  }
}

export function createAgentFleet(o: AgentFleetOptions): AgentFleet {
  return new AgentFleet(o);
}
