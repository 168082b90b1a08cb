import type { ServiceImpl } from '@connectrpc/connect';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { getAgent, listAgents, setDraining, type AgentView } from '../db/agents.js';
import { currentLeaderId } from '../db/leader.js';
import type { Sql } from '../db/sql.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { LEADER_LOCK_KEY, type LeaderElector } from '../scheduler/leader.js';
import { InvalidArgumentError, NotFoundError, toConnectError } from './errors.js';

export interface ClusterDeps {
  sql: Sql;
  replicaId: string;
  edition: string;
  leader: LeaderElector;
  /** An agent is "connected" while its stream is open and it was seen this recently. */
  agentFreshMs: number;
  /** Tells the replica holding the agent's stream to send Drain now. */
  drained(agentId: string): void;
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

export function createClusterService(deps: ClusterDeps): ServiceImpl<typeof ClusterService> {
  return {
    async getLeader() {
      try {
        const leaderId = await currentLeaderId(deps.sql, LEADER_LOCK_KEY);
        const since = deps.leader.leadingSince;
        return {
          leaderId: leaderId ?? '',
          replicaId: deps.replicaId,
          leadingSince: since ? timestampFromDate(since) : undefined,
          edition: deps.edition,
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
        if (!req.undrain) deps.drained(req.agentId);
        return { agent: agentToProto((await getAgent(deps.sql, req.agentId))!, deps.agentFreshMs) };
      } catch (err) {
        throw toConnectError(err);
      }
    },
  };
}
