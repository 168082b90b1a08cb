// The store operations placement on agents needs, and the agents they report. Passed in, so
// placement is driven without a database in tests; its own file, as the fleet view and the
// placing round each use part of it.
import type { Attempt } from '../core/attempt.js';
import type { AgentView } from '../core/placement.js';
import type { WorkItem } from '../core/work-item.js';

/** A connected agent as the store reports it, with the replica holding its stream and the
 *  attempts (by attempt token) that take its slots. */
export interface AvailableAgent extends Omit<AgentView, 'runningThisTask' | 'running'> {
  connectedReplica: string;
  holding: string[];
  /** Connected but draining: never placed on, only counted in why work waits (AGENT_DRAINING). */
  draining?: boolean;
}

/** The store operations placement needs (passed in: it is driven without a database in tests). */
export interface PlacementStore {
  /** The connected agents, those draining included (marked). */
  availableAgents(): Promise<AvailableAgent[]>;
  /** Attempts of this task (by DAG and task id) each agent holds now. */
  taskLoad(runId: string, taskId: string): Promise<Map<string, number>>;
  /** Claims each TI for its agent, all in one write. The attempts claimed, by ti id; a TI
   *  missing was moved by someone else first. */
  claim(claims: { work: WorkItem; agentId: string }[]): Promise<Map<string, Attempt>>;
  /** Writes the reasons these TIs wait (one write for all). */
  setPendingReasons(reasons: Map<string, string>): Promise<void>;
}
