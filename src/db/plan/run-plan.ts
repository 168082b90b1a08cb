import type { TiState } from '../../core/states.js';
import type { WaitStart } from '../../core/wait-start.js';
import type { Claim } from '../../core/work-item.js';

/** One task instance moved by the planner, from the state its decision was read in. */
export interface TiMove {
  tiId: string;
  from: TiState;
  to: 'scheduled' | 'waiting' | 'upstream_failed' | 'skipped';
  /** For a move to `waiting`: what it waits for (its task_waits row, written in the same statement). */
  wait?: WaitStart;
  /**
   * For a move to `scheduled`: also claim it, in the same statement, for a new attempt on this
   * executor (scheduled → queued, both moves in the events log). The caller has room to dispatch
   * it at once; it saves the dispatcher its own claim's round trip.
   */
  claimFor?: string;
  /** With `claimFor`: the agent the executor placed the attempt on (null or absent: none). */
  agentId?: string | null;
}

/** The planner's writes for one run, decided from a read of the run at `epoch`. */
export interface RunPlan {
  runId: string;
  /** dag_runs.plan_epoch as read: a clear since then voids this plan. */
  epoch: string;
  /** queued → running first (max_active_runs was checked by the caller). */
  start: boolean;
  moves: TiMove[];
  /**
   * For a plan decided ahead of a read (plan-ahead.ts): the states its decision assumed, as the
   * database must hold them when the plan is applied, or no part of it applies. `active`: any
   * state that is not terminal. The run's DAG must not be paused either.
   */
  expect?: { tiId: string; state: TiState | 'active' }[];
}

/** What `applyPlans` applied. */
export interface AppliedPlans {
  /** Runs whose plan applied (started, or still running at the epoch read). */
  runs: Set<string>;
  /** Of those, the runs started now. */
  started: Set<string>;
  /** Task instances actually moved (one another writer moved first is left alone). */
  moved: Set<string>;
  /** Of those, the ones claimed with the move, by ti id. */
  claims: Map<string, Claim>;
  /** Of those, the ones that started to wait (their task_waits row written), by ti id. */
  waits: Set<string>;
}
