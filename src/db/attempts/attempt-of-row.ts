import type { Attempt } from '../../core/attempt.js';
import { attemptOf } from '../../core/attempt-env.js';
import type { TaskDefinition } from '../../core/dag-spec.js';
import { runTraceOf } from '../runs.js';

/** The columns of a task instance joined with its run that rebuild one of its attempts. */
export interface AttemptRow {
  id: string;
  run_id: string;
  task_id: string;
  try_number: number;
  max_tries: number;
  attempt_token: string;
  dispatch_key: string;
  dag_id: string;
  conf: Record<string, unknown>;
  logical_date: Date;
  traceparent: string | null;
  tracestate: string | null;
}

/** The attempt a row stands for, with its task's spec (read by the caller from the DAG version). */
export function attemptOfRow(row: AttemptRow, task: TaskDefinition, install: string, agentId?: string): Attempt {
  return attemptOf(
    {
      tiId: row.id,
      runId: row.run_id,
      dagId: row.dag_id,
      taskId: row.task_id,
      task,
      conf: row.conf,
      logicalDate: row.logical_date,
      runTrace: runTraceOf(row),
    },
    {
      tryNumber: row.try_number,
      maxTries: row.max_tries,
      attemptToken: row.attempt_token,
      dispatchKey: row.dispatch_key,
    },
    install,
    agentId,
  );
}
