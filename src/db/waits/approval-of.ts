import type { TiState } from '../../core/states.js';
import type { Sql } from '../sql.js';

/** A task instance as an approval reads it: its state and, if it is an approval that waits, the role it asks for. */
export interface ApprovalTarget {
  ti_id: string;
  state: TiState;
  /** The open wait's kind; null when the task instance has no open wait. */
  kind: 'event' | 'approval' | null;
  role: 'operator' | 'admin' | null;
}

/**
 * The task `taskId` of run `runId` with its open wait, or null when the run has no such task (`runFound` says
 * which).
 */
export async function approvalOf(
  sql: Sql,
  runId: string,
  taskId: string,
): Promise<{ target: ApprovalTarget | null; runFound: boolean }> {
  const [target] = await sql<ApprovalTarget[]>`
    select t.id::text as ti_id, t.state, w.kind, w.role
    from task_instances t left join task_waits w on w.ti_id = t.id and w.ended_at is null
    where t.run_id = ${runId} and t.task_id = ${taskId}`;
  if (target) return { target, runFound: true };
  const [run] = await sql`select 1 from dag_runs where id = ${runId}`;
  return { target: null, runFound: run !== undefined };
}
