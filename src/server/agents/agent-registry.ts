import type { Attempt } from '../../core/attempt.js';

/**
 * The agents whose streams this replica holds, by agent id. A session registers on Hello and
 * deregisters when its stream ends (in a `finally`); the agents executor delivers through it.
 */
/**
 * What became of an Assign: `sent` down the stream; `gone`, the stream is closing and nothing was
 * sent (the claim may be given back); `refused`, the attempt was given to another process of the
 * agent, or is no longer current, so it must not be sent here (nor its claim given back).
 */
export type AssignResult = 'sent' | 'gone' | 'refused';

export interface AgentHandle {
  readonly agentId: string;
  readonly sessionId: string;
  /** The agent process on the other end of the stream (Hello.incarnation_id). */
  readonly incarnationId: string;
  /**
   * Pushes an Assign down the stream, once its delivery to this agent process is recorded: an
   * attempt is never sent, with the same token, to two processes.
   */
  assign(attempt: Attempt): Promise<AssignResult>;
  /** Pushes a Cancel for one attempt. */
  cancel(tiId: string, reason: string): boolean;
  /** Pushes a Drain (with `undrain`, the Drain that lifts it: work may come again). */
  drain(reason: string, undrain?: boolean): void;
  /** Pushes a Reconnect naming where to go (this replica is going away); no Assign is pushed after it. */
  goAway(reason: string, replicaUrls: readonly string[]): void;
  /** The ti ids of the attempts it holds (as last reported or assigned). */
  holds(tiId: string): boolean;
  /** Ends the stream (a newer stream of the same agent process took over). */
  close(reason: string): void;
}

export class AgentRegistry {
  readonly #agents = new Map<string, AgentHandle>();

  /** Registers a session; a newer session of the same agent replaces the older one. */
  register(handle: AgentHandle): void {
    this.#agents.set(handle.agentId, handle);
  }

  /** Deregisters a session, unless a newer one of the same agent has replaced it. */
  deregister(handle: AgentHandle): void {
    if (this.#agents.get(handle.agentId) === handle) this.#agents.delete(handle.agentId);
  }

  get(agentId: string): AgentHandle | undefined {
    return this.#agents.get(agentId);
  }

  all(): AgentHandle[] {
    return [...this.#agents.values()];
  }

  get size(): number {
    return this.#agents.size;
  }
}
