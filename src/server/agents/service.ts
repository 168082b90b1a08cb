import type { ServiceImpl } from '@connectrpc/connect';
import { AgentService } from '../../gen/leoflow/v1/agent_pb.js';
import { AgentConnection } from './connection.js';
import type { AgentConnectionDeps } from './connection-deps.js';
import { clientCertificateKey } from '../auth/tls-identity.js';
import { undecodableAsInvalid } from './undecodable-frames.js';

/** `AgentService.Connect`: one AgentConnection per stream (see connection.ts). */
export function createAgentService(deps: AgentConnectionDeps): ServiceImpl<typeof AgentService> {
  return {
    async *connect(requests, context) {
      const frames = undecodableAsInvalid(requests, 'leoflow.v1.ConnectRequest');
      yield* new AgentConnection(deps).run(frames, context.signal, context.values.get(clientCertificateKey));
    },
  };
}
