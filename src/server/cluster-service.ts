import type { ServiceImpl } from '@connectrpc/connect';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { currentLeaderId } from '../db/leader.js';
import type { Sql } from '../db/sql.js';
import { ClusterService } from '../gen/leoflow/v1/cluster_pb.js';
import { LEADER_LOCK_KEY, type LeaderElector } from '../scheduler/leader.js';
import { toConnectError } from './errors.js';

export function createClusterService(deps: { sql: Sql; replicaId: string; edition: string; leader: LeaderElector }): ServiceImpl<typeof ClusterService> {
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
  };
}
