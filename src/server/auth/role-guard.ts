import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import type { DescMethod } from '@bufbuild/protobuf';
import { AgentService } from '../../gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../../gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../../gen/leoflow/v1/token_pb.js';
import { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import type { ReplicaRole } from '../config/config.js';

const w = WorkflowService.method;

/**
 * The RPCs that change something: every other one only reads. A dry run of a removal
 * (`CleanHistory`, `WatchCleanHistory` or `DeleteDag` with dry_run) is refused too: it is asked of a replica that may
 * remove, and an observer answers reads of the data, not rehearsals of writes.
 */
export const WRITE_RPCS: readonly DescMethod[] = [
  w.applyDag,
  w.pauseDag,
  w.triggerRun,
  w.sendEvent,
  w.approveTask,
  w.cancelRun,
  w.clearTaskInstance,
  w.cancelTaskInstance,
  w.deleteDag,
  w.cleanHistory,
  w.watchCleanHistory,
  ClusterService.method.drainAgent,
  ClusterService.method.forgetAgent,
  TokenService.method.createToken,
  TokenService.method.revokeToken,
];

/** The RPCs that only read: all an observer answers. */
export const READ_RPCS: readonly DescMethod[] = [
  w.getDag,
  w.listDags,
  w.getRun,
  w.listRuns,
  w.listTaskInstances,
  w.getTaskOutput,
  w.tailLogs,
  w.watchRun,
  w.watchRuns,
  ClusterService.method.getLeader,
  ClusterService.method.getHealth,
  ClusterService.method.listAgents,
  ClusterService.method.listNotifications,
  TokenService.method.listTokens,
  // The dashboard asks it first, of whichever replica serves it: an observer's page was a token form.
  TokenService.method.whoAmI,
];

const key = (m: DescMethod) => `${m.parent.typeName}/${m.name}`;
const READS = new Set(READ_RPCS.map(key));
const WRITES = new Set(WRITE_RPCS.map(key));
const AGENT_STREAM = key(AgentService.method.connect);

/**
 * What a replica's role allows through its API, checked before any handler runs. An observer
 * answers the reads and refuses everything else with PERMISSION_DENIED naming its role (an RPC
 * added later and not listed as a read is refused until someone decides it is one). It takes no agent stream either:
 * a stream writes (the agent's row, its heartbeats, its attempts' starts and ends). That refusal is
 * UNAVAILABLE, not PERMISSION_DENIED, because an agent stops for good on PERMISSION_DENIED at
 * Hello while the fix is only another address: behind a Service that also selects observers, its
 * next connection lands elsewhere.
 */
export function roleGuard(role: ReplicaRole, replicaId: string): Interceptor {
  return (next) => async (req) => {
    if (role === 'observer') {
      const k = `${req.service.typeName}/${req.method.name}`;
      if (k === AGENT_STREAM) {
        throw new ConnectError(
          `replica "${replicaId}" has role observer and takes no agent streams: ` +
            `connect to a replica with role auto, leader or worker`,
          Code.Unavailable,
        );
      }
      if (!READS.has(k)) {
        const what = WRITES.has(k) ? 'is a write' : 'is not among the reads an observer answers';
        throw new ConnectError(
          `${req.method.name} ${what}, and replica "${replicaId}" has role observer (read-only): ` +
            `send it to a replica with role auto, leader or worker`,
          Code.PermissionDenied,
        );
      }
    }
    return next(req);
  };
}
