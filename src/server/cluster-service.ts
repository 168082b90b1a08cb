import type { ServiceImpl } from '@connectrpc/connect';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { getAgent, listAgents, setDraining, type AgentView } from '../db/agents.js';
import { currentLeaderId } from '../db/leader.js';
import { listReplicas } from '../db/replicas.js';
import type { Sql } from '../db/sql.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { LEADER_LOCK_KEY, type LeaderElector } from '../scheduler/leader.js';
import { InvalidArgumentError, NotFoundError, toConnectError } from './errors.js';
import type { Health } from './health.js';

export interface ClusterDeps {
  sql: Sql;
  replicaId: string;
  edition: string;
  role: string;
  leader: LeaderElector;
  health: Health;
  /** An agent is "connected" while its stream is open and it was seen this recently. */
  agentFreshMs: number;
  /** Tells the replica holding the agent's stream to send Drain now. */
  /** An agent was drained (or, with `undrain`, undrained): its stream is told, wherever it is. */
  drained(agentId: string, undrain: boolean): void;
}

function agentToProto(a: AgentView, freshMs: number) {
  const connected = a.connected_replica !== null && a.last_seen_at !== null && Date.now() - a.last_seen_at.getTime() < freshMs;
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
  };
}

/** The leader's id and every replica connected to the database, each with its role. */
async function replicasWithLeader(sql: Sql) {
  const [leaderId, replicas] = await Promise.all([currentLeaderId(sql, LEADER_LOCK_KEY), listReplicas(sql)]);
  return {
    leaderId: leaderId ?? '',
    replicas: replicas.map((r) => ({ replicaId: r.replicaId, role: r.role, leader: r.replicaId === leaderId, connectedSince: timestampFromDate(r.connectedSince) })),
  };
}

export function createClusterService(deps: ClusterDeps): ServiceImpl<typeof ClusterService> {
  return {
    async getLeader() {
      try {
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
      } catch (err) {
        throw toConnectError(err);
      }
    },
    async getHealth() {
      try {
        const [live, ready] = await Promise.all([deps.health.live(), deps.health.ready()]);
        // The replicas are read only when the database answers: health must answer regardless.
        const replicas = ready.checks.find((c) => c.name === 'database')?.ok ? (await replicasWithLeader(deps.sql).catch(() => null))?.replicas ?? [] : [];
        return {
          replicaId: deps.replicaId,
          role: deps.role,
          edition: deps.edition,
          leader: deps.leader.isLeader,
          live: live.ok,
          ready: ready.ok,
          liveChecks: live.checks,
          readyChecks: ready.checks,
          replicas,
        };
      } catch (err) {
        throw toConnectError(err);
      }
    },
    async listAgents() {
      try {
        return { agents: (await listAgents(deps.sql)).map((a) => agentToProto(a, deps.agentFreshMs)) };
      } catch (err) {
        throw toConnectError(err);
      }
    },
    async drainAgent(req) {
      try {
        if (req.agentId.trim() === '') throw new InvalidArgumentError('agent_id', 'is required');
        if (!(await setDraining(deps.sql, req.agentId, !req.undrain))) throw new NotFoundError(`agent "${req.agentId}" not found`);
        deps.drained(req.agentId, req.undrain);
        return { agent: agentToProto((await getAgent(deps.sql, req.agentId))!, deps.agentFreshMs) };
      } catch (err) {
        throw toConnectError(err);
      }
    },
  };
}
