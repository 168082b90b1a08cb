import type { DagSpec, TaskDefinition } from '../core/dag-spec.js';
import { specTaskId } from '../core/map-spec.js';
import type { Sql } from './sql.js';

/** What a one-shot claim of a task instance is checked against (core/one-shot-claim.ts). */
export interface OneShotTi {
  executor: string;
  state: string;
  agentId: string | null;
  task: TaskDefinition;
}

/** The task instance with its task's spec, as of its run's DAG version; null when there is none. */
export async function readOneShotTi(sql: Sql, tiId: string): Promise<OneShotTi | null> {
  const [row] = await sql<
    { executor: string; state: string; agent_id: string | null; task_id: string; spec: DagSpec }[]
  >`
    select t.executor, t.state, t.agent_id, t.task_id, v.spec
    from task_instances t join dag_runs r on r.id = t.run_id
    join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version
    where t.id = ${tiId}`;
  const task = row?.spec.tasks.find((t) => t.id === specTaskId(row.task_id));
  return row && task ? { executor: row.executor, state: row.state, agentId: row.agent_id, task } : null;
}
