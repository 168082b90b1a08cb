import type { Attempt } from '../../core/attempt.js';
import type { AgentHandle } from './agent-registry.js';
import type { Executor } from '../../executors/executor.js';

/** The store operations the agents executor needs (passed in: executors never import db). */
export interface AgentsStore {
  /** Undoes a claim that this agent stream (`closedSessionId`) could not take. */
  release(attempt: Attempt, reason: string, closedSessionId: string): Promise<void>;
  /** Asks the replica holding the agent's stream to deliver the attempt. */
  notifyAssign(agentId: string, tiId: string): Promise<void>;
}

/** One agent stream as the executor uses it: deliver, cancel, and who holds what. */
export type AgentStream = Pick<AgentHandle, 'sessionId' | 'assign' | 'cancel' | 'holds'>;

/**
 * The executor's one port to the agent streams this replica holds (`AgentRegistry` implements it):
 * the executor never sees how a stream is registered or kept.
 */
export interface AgentStreams {
  get(agentId: string): AgentStream | undefined;
  all(): Iterable<AgentStream>;
}

/**
 * The standalone-agent executor: delivers a claimed attempt down its agent's stream, directly
 * when this replica holds the stream, else through a notification to the replica that does. The
 * dispatcher places the work on an agent first (server/agents/placement.ts).
 */
export class AgentsExecutor implements Executor {
  readonly kind = 'agents';

  constructor(
    private readonly deps: {
      streams: AgentStreams;
      store: AgentsStore;
      /** The agent's stream is gone: the view placement places from is out of date. */
      onAgentGone(agentId: string): void;
    },
  ) {}

  async dispatch(attempt: Attempt): Promise<void> {
    const agentId = attempt.agentId!;
    const local = this.deps.streams.get(agentId);
    if (local) {
      // Refused: another process of the agent has it, or it is over; its end is decided there.
      if ((await local.assign(attempt)) === 'gone') {
        this.deps.onAgentGone(agentId);
        await this.deps.store.release(attempt, `AGENT_GONE:${agentId}`, local.sessionId);
      }
      return;
    }
    await this.deps.store.notifyAssign(agentId, attempt.tiId);
  }

  /** Stops an attempt held by an agent of this replica (others learn it at their next keepalive). */
  cancel(tiId: string, reason: string): boolean {
    for (const a of this.deps.streams.all()) if (a.holds(tiId)) return a.cancel(tiId, reason);
    return false;
  }

  get activeCount(): number {
    return 0;
  }

  /** Nothing runs in this process: agents keep their work across a control-plane restart. */
  async shutdown(): Promise<void> {}
}
