import type { DescMethod } from '@bufbuild/protobuf';
import type { ApiRole } from '../../core/api-role.js';
import { AgentService } from '../../gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../../gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../../gen/leoflow/v1/token_pb.js';
import { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';

const w = WorkflowService.method;
const c = ClusterService.method;
const t = TokenService.method;

/**
 * The role each API RPC needs: viewers read, operators act on runs and agents, admins change what
 * is defined (DAGs, history, tokens). An RPC missing here is refused to everyone (the guard says
 * so), and a unit test generated from the service descriptors fails until it is given a rule.
 */
export const RPC_ROLES: ReadonlyMap<DescMethod, ApiRole> = new Map<DescMethod, ApiRole>([
  [w.getDag, 'viewer'],
  [w.listDags, 'viewer'],
  [w.getRun, 'viewer'],
  [w.listRuns, 'viewer'],
  [w.listTaskInstances, 'viewer'],
  [w.getTaskOutput, 'viewer'],
  [w.tailLogs, 'viewer'],
  [w.watchRun, 'viewer'],
  [w.watchRuns, 'viewer'],
  [c.getLeader, 'viewer'],
  [c.getHealth, 'viewer'],
  [c.listAgents, 'viewer'],
  [c.listNotifications, 'viewer'],
  [t.whoAmI, 'viewer'],
  [w.triggerRun, 'operator'],
  [w.sendEvent, 'operator'],
  // The approval's own role (operator or admin) is checked by the handler too.
  [w.approveTask, 'operator'],
  [w.cancelRun, 'operator'],
  [w.clearTaskInstance, 'operator'],
  [w.cancelTaskInstance, 'operator'],
  [w.pauseDag, 'operator'],
  [c.drainAgent, 'operator'],
  [c.forgetAgent, 'operator'],
  [w.applyDag, 'admin'],
  [w.deleteDag, 'admin'],
  [w.cleanHistory, 'admin'],
  [w.watchCleanHistory, 'admin'],
  [t.createToken, 'admin'],
  [t.listTokens, 'admin'],
  [t.revokeToken, 'admin'],
]);

/**
 * RPCs the bearer-token guard lets through: the agent stream authenticates in its Hello (a token
 * bound to the agent id, see agent-credential.ts), where the id it claims is known.
 */
export const HELLO_AUTHENTICATED: readonly DescMethod[] = [AgentService.method.connect];
