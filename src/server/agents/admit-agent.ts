import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { Hello } from '../../gen/leoflow/v1/agent_pb.js';
import type { AgentTokenUsed } from '../auth/agent-credential.js';
import type { AgentConnectionDeps } from './connection-deps.js';

/**
 * A stream's agent let in after its Hello: recorded connected, or the refusal thrown (a duplicate
 * id, a token over its bounds, a one-shot claim refused, a replica leaving). A live stream of the
 * same process is replaced.
 */
export async function admitAgent(
  deps: AgentConnectionDeps,
  sessionId: string,
  hello: Hello,
  token: AgentTokenUsed | null,
  log: Logger,
): Promise<{ draining: boolean }> {
  const { store, registry } = deps;
  // A live stream of this agent id from another process: a duplicate id never takes its place.
  // The same process (its stream half-dead, it reconnected) takes over its own.
  const live = registry.get(hello.agentId);
  if (live && live.incarnationId !== hello.incarnationId) throw heldElsewhere(hello.agentId, log);
  if (token) await admitToken(deps, hello, token);
  // A one-shot claim is a placement like any other, checked before anything is written. (A
  // pod's claim names its attempt's token instead, bound to that pod at Hello.)
  if (isOneShot(hello) && hello.onlyAttemptToken === '') {
    const why = await store.oneShotRefusal(hello.onlyTiId, hello);
    if (why !== null) {
      deps.onRejected('hello', 'invalid');
      log.warn({ tiId: hello.onlyTiId, why }, `one-shot claim of task instance ${hello.onlyTiId} refused`);
      throw new ConnectError(
        `hello.only_ti_id: agent "${hello.agentId}" may not take task instance ${hello.onlyTiId}: ${why}`,
        Code.PermissionDenied,
      );
    }
  }
  const connected = await store.connectAgent({
    agentId: hello.agentId,
    labels: hello.labels,
    capabilities: hello.capabilities,
    slots: hello.slots,
    sessionId,
    protocolVersion: hello.protocolVersion,
    incarnationId: hello.incarnationId,
    liveMs: 3 * deps.keepaliveMs,
    oneShot: isOneShot(hello),
    tokenId: token?.id ?? null,
  });
  if (!connected) throw heldElsewhere(hello.agentId, log);
  // Checked after the write: the replica's agents are marked gone when it starts to leave, and
  // a Hello written after that is undone here.
  if (deps.leaving()) {
    await store
      .disconnectAgent(hello.agentId, sessionId)
      .catch((err: unknown) => log.error({ err }, 'could not mark a refused agent disconnected'));
    throw new ConnectError(`replica ${deps.replicaId} is shutting down: connect to another`, Code.Unavailable);
  }
  if (live) live.close(`replaced by a newer stream of the same agent process (session ${sessionId.slice(0, 8)})`);
  return connected;
}

/** An agent token's bounds: its open streams, and the agent rows it may hold (`--max-token-agents`). */
async function admitToken(deps: AgentConnectionDeps, hello: Hello, token: AgentTokenUsed): Promise<void> {
  const c = deps.agentCredentials;
  c.streams?.admit(token.id, 'agent');
  if (c.maxTokenAgents === undefined) return;
  const held = await deps.store.agentsOfTokenPast(token.id, hello.agentId, c.maxTokenAgents);
  if (held === null) return;
  c.limited?.('agents');
  throw new ConnectError(
    `hello.agent_id: API token "${token.id}" holds ${held} agents, ` +
      `the limit (--max-token-agents ${c.maxTokenAgents}): ` +
      `reuse an agent id, or forget gone agents (leoflow agents forget)`,
    Code.ResourceExhausted,
  );
}

function heldElsewhere(agentId: string, log: Logger): ConnectError {
  log.warn(`agent ${agentId} refused: another process holds this agent id on a live stream`);
  return new ConnectError(
    `agent_id ${JSON.stringify(agentId)} is held by another process on a live stream (a different ` +
      `hello.incarnation_id): agent ids must be unique; retry once that stream has ended`,
    Code.AlreadyExists,
  );
}

/** A one-shot agent (`leoflow agent --once`, a pod's agent) names the one TI it is for. */
export function isOneShot(hello: Hello): boolean {
  return hello.onlyTiId !== '0' && hello.onlyTiId !== '';
}
