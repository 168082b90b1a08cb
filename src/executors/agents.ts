import type { Logger } from 'pino';
import type { Attempt } from '../core/attempt.js';
import type { PlacementSpec } from '../core/dag-spec.js';
import { placeAttempt, type AgentView } from '../core/placement.js';
import type { AgentRegistry } from './agent-registry.js';
import type { Executor } from './executor.js';

/** A connected agent as the store reports it, with the replica holding its stream. */
export interface AvailableAgent extends Omit<AgentView, 'runningThisTask'> {
  connectedReplica: string;
}

/** The store operations the agents executor needs (passed in: executors never import db). */
export interface AgentsStore {
  availableAgents(): Promise<AvailableAgent[]>;
  /** Attempts of this task (by DAG and task id) each agent holds now. */
  taskLoad(runId: string, taskId: string): Promise<Map<string, number>>;
  /** Claims the TI for a new attempt on this agent; null if someone else moved it. */
  claim(tiId: string, agentId: string): Promise<Attempt | null>;
  /** Undoes a claim that could not be delivered. */
  release(attempt: Attempt, reason: string): Promise<void>;
  setPendingReason(tiId: string, reason: string): Promise<void>;
  /** Asks the replica holding the agent's stream to deliver the attempt. */
  notifyAssign(agentId: string, tiId: string): Promise<void>;
}

export interface AgentsWork {
  tiId: string;
  runId: string;
  taskId: string;
  placement: PlacementSpec | null;
  /** The reason last shown for this TI, so an unchanged one is not written again. */
  pendingReason: string | null;
}

export type AgentsDispatchOutcome = { kind: 'assigned'; agentId: string } | { kind: 'waiting'; reason: string } | { kind: 'lost' };

/**
 * The standalone-agent executor: chooses an agent for a scheduled TI (placement rules in
 * core/placement.ts), claims the TI for it, and delivers the Assign down the agent's stream —
 * directly when this replica holds it, else through a notification to the replica that does.
 * Placement decisions are serialized, so two drainers never both take an agent's last slot.
 */
export class AgentsExecutor implements Executor {
  readonly kind = 'agents';
  #chain: Promise<unknown> = Promise.resolve();
  #cache: { at: number; agents: AvailableAgent[] } | null = null;

  constructor(
    private readonly deps: { registry: AgentRegistry; store: AgentsStore; replicaId: string; logger: Logger; cacheMs: number },
  ) {}

  /** Place, claim and deliver one TI. Never throws for "no agent": it says why the TI waits. */
  placeAndDispatch(work: AgentsWork): Promise<AgentsDispatchOutcome> {
    const next = this.#chain.then(() => this.#placeAndDispatch(work));
    this.#chain = next.catch(() => {});
    return next;
  }

  /** Forget the cached fleet view (an agent connected, left, or was drained). */
  invalidate(): void {
    this.#cache = null;
  }

  async #agents(): Promise<AvailableAgent[]> {
    if (this.#cache && Date.now() - this.#cache.at < this.deps.cacheMs) return this.#cache.agents;
    const agents = await this.deps.store.availableAgents();
    this.#cache = { at: Date.now(), agents };
    return agents;
  }

  async #placeAndDispatch(work: AgentsWork): Promise<AgentsDispatchOutcome> {
    const agents = await this.#agents();
    const load = work.placement?.maxParallelPerAgent ? await this.deps.store.taskLoad(work.runId, work.taskId) : new Map<string, number>();
    const views = agents.map((a) => ({ ...a, runningThisTask: load.get(a.agentId) ?? 0 }));
    const placement = placeAttempt(work.placement, views);
    if (placement.kind === 'waiting') {
      if (work.pendingReason !== placement.reason) await this.deps.store.setPendingReason(work.tiId, placement.reason);
      return placement;
    }
    const agent = agents.find((a) => a.agentId === placement.agentId)!;
    const attempt = await this.deps.store.claim(work.tiId, agent.agentId);
    if (!attempt) return { kind: 'lost' };
    // Count the slot as taken in the cached view until the next refresh.
    agent.running++;
    await this.dispatch(attempt);
    return { kind: 'assigned', agentId: agent.agentId };
  }

  /** Delivers a claimed attempt to its agent. */
  async dispatch(attempt: Attempt): Promise<void> {
    const agentId = attempt.agentId!;
    const local = this.deps.registry.get(agentId);
    if (local) {
      if (!local.assign(attempt)) {
        this.invalidate();
        await this.deps.store.release(attempt, `AGENT_GONE:${agentId}`);
      }
      return;
    }
    await this.deps.store.notifyAssign(agentId, attempt.tiId);
  }

  /** Stops an attempt held by an agent of this replica (others learn it at their next keepalive). */
  cancel(tiId: string, reason: string): boolean {
    for (const a of this.deps.registry.all()) if (a.holds(tiId)) return a.cancel(tiId, reason);
    return false;
  }

  get activeCount(): number {
    return 0;
  }

  /** Nothing runs in this process: agents keep their work across a control-plane restart. */
  async shutdown(): Promise<void> {
    await this.#chain;
  }
}
