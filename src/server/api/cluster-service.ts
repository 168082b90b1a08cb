import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { agentHealth, type AgentHealthName } from '../../core/agent-health.js';
import { formatDuration } from '../../core/duration.js';
import { getAgent, listAgents as readAgents, setDraining, type AgentApiView } from '../../db/agents.js';
import type { WriteActor } from '../../core/actor.js';
import { callerOf } from '../auth/caller.js';
import { forgetAgent as writeAgentForgotten, type ForgetOutcome } from '../../db/forget-agent.js';
import { currentLeader, type LeaderStepReport } from '../../db/leader.js';
import { listReplicas } from '../../db/replicas.js';
import type { Sql } from '../../db/sql.js';
import {
  AgentHealth,
  ClusterService,
  type DrainAgentRequest,
  type ForgetAgentRequest,
  type ListNotificationsRequest,
} from '../../gen/leoflow/v1/cluster_pb.js';
import { LEADER_LOCK_KEY, type LeaderElector } from '../../scheduler/leader.js';
import { fullStepLateMs } from '../../scheduler/scheduler-loop.js';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, parseId, toConnectError } from './errors.js';
import {
  listNotifications as readNotifications,
  type NotificationRow,
} from '../../db/notify-out/list-notifications.js';
import type { Health } from '../observability/health.js';

export interface ClusterDeps {
  sql: Sql;
  replicaId: string;
  edition: string;
  role: string;
  leader: LeaderElector;
  health: Health;
  /** An agent is "connected" while its stream is open and it was seen this recently. */
  agentFreshMs: number;
  /** Silent longer than this, an agent is dead: the heartbeat reaper has ended its attempts. */
  heartbeatThresholdMs: number;
  tickMs: number;
  /** This replica's dispatch queue. */
  dispatchQueue(): { depth: number; capacity: number };
  /**
   * When this replica began its last full step (ms), while it leads; null otherwise (the leader's is read
   * from its lock session).
   */
  lastFullStepAt(): number | null;
  /** An agent was drained (or, with `undrain`, undrained) by `by`: its stream is told, wherever it is. */
  drained(agentId: string, undrain: boolean, by: WriteActor): void;
  /** An agent was forgotten by hand, by `by`. */
  forgotten(agentId: string, by: WriteActor): void;
}

const HEALTH: Record<AgentHealthName, AgentHealth> = {
  healthy: AgentHealth.HEALTHY,
  stale: AgentHealth.STALE,
  dead: AgentHealth.DEAD,
  stopped: AgentHealth.STOPPED,
};

function agentToProto(a: AgentApiView, deps: Pick<ClusterDeps, 'agentFreshMs' | 'heartbeatThresholdMs'>) {
  const freshMs = deps.agentFreshMs;
  const connected =
    a.connected_replica !== null && a.last_seen_at !== null && Date.now() - a.last_seen_at.getTime() < freshMs;
  return {
    agentId: a.agent_id,
    labels: a.labels,
    capabilities: a.capabilities,
    slots: a.slots,
    draining: a.draining,
    connected,
    connectedReplica: a.connected_replica ?? '',
    lastSeenAt: a.last_seen_at ? timestampFromDate(a.last_seen_at) : undefined,
    running: a.running,
    health:
      HEALTH[
        agentHealth(
          { connected: a.connected_replica !== null, lastSeenAt: a.last_seen_at, stoppedAt: a.stopped_at },
          { freshMs, thresholdMs: deps.heartbeatThresholdMs, now: Date.now() },
        )
      ],
  };
}

/** Why ForgetAgent was refused, and what to do about it. */
function forgetRefusal(
  agentId: string,
  o: Exclude<ForgetOutcome, { outcome: 'forgotten' }>,
  heartbeatThresholdMs: number,
): Error {
  if (o.outcome === 'unknown') return new NotFoundError(`agent "${agentId}" not found`);
  if (o.outcome === 'connected') {
    const seen = o.lastSeenAt
      ? `, last seen ${formatDuration(Math.max(0, Math.round((Date.now() - o.lastSeenAt.getTime()) / 1000) * 1000))} ` +
        `ago`
      : '';
    return new FailedPreconditionError(
      `agent "${agentId}" is connected (to replica ${o.replica ?? '?'}${seen}): ` +
        `only a disconnected agent can be forgotten; ` +
        `stop the agent first (\`leoflow agents drain ${agentId}\` lets it finish its work)`,
    );
  }
  const named = o.first.map((a) => `run ${a.runId} task ${a.taskId} ${a.state}`).join(', ');
  const more = o.attempts > o.first.length ? `, and ${o.attempts - o.first.length} more` : '';
  return new FailedPreconditionError(
    `agent "${agentId}" still holds ${o.attempts} attempt${o.attempts === 1 ? '' : 's'} (${named}${more}): ` +
      `only an agent no queued or running attempt names can be forgotten; ` +
      `cancel them (\`leoflow run cancel RUN --task TASK\`) ` +
      `or wait for them to end (an attempt whose agent is gone is ended as lost ` +
      `${formatDuration(heartbeatThresholdMs)} after its last heartbeat)`,
  );
}

/**
 * The leader's id (and what it last said of its loop) and every replica connected to the database, each with
 * its role.
 */
async function replicasWithLeader(sql: Sql) {
  const [leader, replicas] = await Promise.all([currentLeader(sql, LEADER_LOCK_KEY), listReplicas(sql)]);
  const leaderId = leader?.replicaId ?? null;
  return {
    leaderId: leaderId ?? '',
    leaderReport: leader?.report ?? null,
    replicas: replicas.map((r) => ({
      replicaId: r.replicaId,
      role: r.role,
      leader: r.replicaId === leaderId,
      connectedSince: timestampFromDate(r.connectedSince),
    })),
  };
}

export function createClusterService(deps: ClusterDeps): ServiceImpl<typeof ClusterService> {
  return {
    getLeader: answered(() => getLeader(deps)),
    getHealth: answered(() => getHealth(deps)),
    listAgents: answered(() => listAgents(deps)),
    drainAgent: answered((req, ctx) => drainAgent(deps, req, ctx)),
    forgetAgent: answered((req, ctx) => forgetAgent(deps, req, ctx)),
    listNotifications: answered((req) => listNotifications(deps, req)),
  };
}

/** A handler whose every failure reaches the caller as a ConnectError (errors.ts maps them). */
function answered<A extends unknown[], R>(handler: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
  return async (...args) => {
    try {
      return await handler(...args);
    } catch (err) {
      throw toConnectError(err);
    }
  };
}

/** The leader's id and every replica connected to the database, as this replica sees them. */
async function getLeader(deps: ClusterDeps) {
  const { leaderId, replicas } = await replicasWithLeader(deps.sql);
  const since = deps.leader.leadingSince;
  return {
    leaderId,
    replicaId: deps.replicaId,
    leadingSince: since ? timestampFromDate(since) : undefined,
    edition: deps.edition,
    role: deps.role,
    replicas,
  };
}

/** This replica's liveness and readiness, with the cluster's figures when the database answers. */
async function getHealth(deps: ClusterDeps) {
  const [live, ready] = await Promise.all([deps.health.live(), deps.health.ready()]);
  // The cluster is read only when the database answers: health must answer regardless.
  const reachable = ready.checks.find((c) => c.name === 'database')?.ok === true;
  const [cluster, agents] = reachable
    ? await Promise.all([replicasWithLeader(deps.sql).catch(() => null), readAgents(deps.sql).catch(() => null)])
    : [null, null];
  const count = (h: AgentHealth) => (agents ?? []).filter((a) => agentToProto(a, deps).health === h).length;
  // The leader's own figures; elsewhere, the leader's as it last told them (its watchdog's
  // period old at most).
  const own = deps.leader.isLeader ? deps.lastFullStepAt() : null;
  const step: LeaderStepReport | null = deps.leader.isLeader
    ? own !== null
      ? { lastFullStepAt: new Date(own), lateMs: fullStepLateMs(own, deps.tickMs) }
      : null
    : (cluster?.leaderReport ?? null);
  const queue = deps.dispatchQueue();
  return {
    replicaId: deps.replicaId,
    role: deps.role,
    edition: deps.edition,
    leader: deps.leader.isLeader,
    live: live.ok,
    ready: ready.ok,
    liveChecks: live.checks,
    readyChecks: ready.checks,
    replicas: cluster?.replicas ?? [],
    databaseReachable: reachable,
    databaseLatencyMs: ready.figures?.databaseLatencyMs ?? 0,
    migrationsVersion: ready.figures?.migrationsVersion ?? '',
    leaderId: cluster?.leaderId ?? '',
    agentsHealthy: count(AgentHealth.HEALTHY),
    agentsStale: count(AgentHealth.STALE),
    agentsDead: count(AgentHealth.DEAD),
    agentsStopped: count(AgentHealth.STOPPED),
    dispatchQueueDepth: queue.depth,
    dispatchQueueCapacity: queue.capacity,
    lastFullStepAt: step ? timestampFromDate(step.lastFullStepAt) : undefined,
    lastFullStepLateMs: BigInt(step?.lateMs ?? 0),
  };
}

/** Every agent the cluster knows, with its health. */
async function listAgents(deps: ClusterDeps) {
  return { agents: (await readAgents(deps.sql)).map((a) => agentToProto(a, deps)) };
}

/** Drains (or undrains) an agent: no more work is placed on it. */
async function drainAgent(deps: ClusterDeps, req: DrainAgentRequest, ctx: HandlerContext) {
  if (req.agentId.trim() === '') throw new InvalidArgumentError('agent_id', 'is required');
  if (!(await setDraining(deps.sql, req.agentId, !req.undrain)))
    throw new NotFoundError(`agent "${req.agentId}" not found`);
  deps.drained(req.agentId, req.undrain, callerOf(ctx));
  return { agent: agentToProto((await getAgent(deps.sql, req.agentId))!, deps) };
}

/** Forgets an agent that holds nothing, or says why it may not. */
async function forgetAgent(deps: ClusterDeps, req: ForgetAgentRequest, ctx: HandlerContext) {
  if (req.agentId.trim() === '') throw new InvalidArgumentError('agent_id', 'is required');
  const o = await writeAgentForgotten(deps.sql, req.agentId, deps.agentFreshMs);
  if (o.outcome !== 'forgotten') throw forgetRefusal(req.agentId, o, deps.heartbeatThresholdMs);
  deps.forgotten(req.agentId, callerOf(ctx));
  return { lastSeenAt: o.lastSeenAt ? timestampFromDate(o.lastSeenAt) : undefined };
}

/** A page of notifications, newest first, by state and DAG. */
async function listNotifications(deps: ClusterDeps, req: ListNotificationsRequest) {
  if (req.limit < 0 || req.limit > 1000)
    throw new InvalidArgumentError('limit', `must be between 0 and 1000, got ${req.limit}`);
  if (req.state !== '' && !NOTIFICATION_STATES.includes(req.state))
    throw new InvalidArgumentError('state', `must be one of ${NOTIFICATION_STATES.join(', ')}, got "${req.state}"`);
  const limit = req.limit || 50;
  const before = req.pageToken ? parseId('page_token', req.pageToken) : null;
  // One more than asked for tells whether another page follows.
  const rows = await readNotifications(deps.sql, {
    state: req.state || null,
    dagId: req.dagId || null,
    limit: limit + 1,
    before,
  });
  const page = rows.slice(0, limit);
  return {
    notifications: page.map(notificationToProto),
    nextPageToken: rows.length > limit ? page.at(-1)!.id : '',
  };
}

const NOTIFICATION_STATES = ['pending', 'delivered', 'failed'];

function notificationToProto(n: NotificationRow) {
  return {
    id: n.id,
    runId: n.run_id,
    dagId: n.dag_id,
    kind: n.kind,
    receiver: n.receiver,
    taskId: n.task_id,
    state: n.state,
    attempts: n.attempts,
    lastError: n.last_error ?? '',
    createdAt: timestampFromDate(n.created_at),
    deliveredAt: n.delivered_at ? timestampFromDate(n.delivered_at) : undefined,
    nextAt: timestampFromDate(n.next_at),
  };
}
