import { describe, expect, it } from 'vitest';
import { AgentService } from '../../src/gen/leoflow/v1/agent_pb.js';
import { ClusterService } from '../../src/gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../../src/gen/leoflow/v1/token_pb.js';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { READ_RPCS, WRITE_RPCS } from '../../src/server/auth/role-guard.js';

describe('role guard', () => {
  it('classes every RPC of the API as a read, a write, or the agents stream, and none twice', () => {
    const all = [WorkflowService, ClusterService, AgentService, TokenService].flatMap((s) =>
      s.methods.map((m) => `${s.typeName}/${m.name}`),
    );
    const classed = [...READ_RPCS, ...WRITE_RPCS, AgentService.method.connect].map(
      (m) => `${m.parent.typeName}/${m.name}`,
    );
    expect(new Set(classed).size).toBe(classed.length);
    expect([...classed].sort()).toEqual([...all].sort());
  });
});
