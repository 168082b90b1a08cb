import type { ServiceImpl } from '@connectrpc/connect';
import { AgentService } from '../gen/leoflow/v1/agent_pb.js';
import { AgentSession, type SessionDeps } from './agent-session.js';

/** `AgentService.Connect`: one AgentSession per stream (see agent-session.ts). */
export function createAgentService(deps: SessionDeps): ServiceImpl<typeof AgentService> {
  return {
    async *connect(requests, context) {
      yield* new AgentSession(deps).run(requests, context.signal);
    },
  };
}
