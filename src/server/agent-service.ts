import type { ServiceImpl } from '@connectrpc/connect';
import { AgentService } from '../gen/leoflow/v1/agent_pb.js';
import { AgentConnection } from './agent-connection.js';
import type { AgentConnectionDeps } from './agent-connection-deps.js';
import { clientCertificateKey } from './tls-identity.js';
import { undecodableAsInvalid } from './undecodable-frames.js';

/** `AgentService.Connect`: one AgentConnection per stream (see agent-connection.ts). */
export function createAgentService(deps: AgentConnectionDeps): ServiceImpl<typeof AgentService> {
  return {
    async *connect(requests, context) {
      const frames = undecodableAsInvalid(requests, 'leoflow.v1.ConnectRequest');
      yield* new AgentConnection(deps).run(frames, context.signal, context.values.get(clientCertificateKey));
    },
  };
}
