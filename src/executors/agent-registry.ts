import type { Attempt } from '../core/attempt.js';

/**
 * The agents whose streams this replica holds, by agent id. A session registers on Hello and
 * deregisters when its stream ends (in a `finally`); the agents executor delivers through it.
 */
export interface AgentHandle {
  readonly agentId: string;
  readonly sessionId: string;
  /** Pushes an Assign down the stream. False if the stream is closing. */
  assign(attempt: Attempt): boolean;
  /** Pushes a Cancel for one attempt. */
  cancel(tiId: string, reason: string): boolean;
  /** Pushes a Drain. */
  drain(reason: string): void;
  /** Pushes a Reconnect (this replica is going away); no Assign is pushed after it. */
  goAway(reason: string): void;
  /** The ti ids of the attempts it holds (as last reported or assigned). */
  holds(tiId: string): boolean;
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
