import type { TaskDefinition } from './dag-spec.js';
import type { TraceContext } from './trace-context.js';

/**
 * A scheduled task instance on its way to an executor: what the planner read of it, handed to
 * the dispatcher, placed, claimed and turned into an attempt. One record from plan to executor.
 */
export interface WorkItem {
  tiId: string;
  runId: string;
  dagId: string;
  taskId: string;
  /** The executor kind that runs it (`subprocess`, `agents`, …). */
  executor: string;
  task: TaskDefinition;
  conf: Record<string, unknown>;
  logicalDate: Date;
  /** The run's trace context (its span's), which its attempts' spans are children of; null: untraced. */
  runTrace?: TraceContext | null;
  /** The reason the TI shows now, so an unchanged one is not written again. */
  pendingReason: string | null;
  /** Higher is placed first among work waiting for a slot (`taskPriority`); absent: 0. */
  priority?: number;
  /** Set when the planner claimed the TI with its move to scheduled: dispatch it as it is. */
  claim?: Claim;
}

/** A claim of a scheduled task instance: its new attempt's try, token and dispatch key. */
export interface Claim {
  tryNumber: number;
  maxTries: number;
  /** Random per attempt; every report carries it so a superseded attempt is fenced off. */
  attemptToken: string;
  dispatchKey: string;
  /** The agent it was claimed for, if it was placed on one. */
  agentId: string | null;
}
