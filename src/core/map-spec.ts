/**
 * Fan-out at run time (`map:`): a task runs once per item of a JSON list in an upstream's output,
 * each run a task instance of its own named `task[index]`. Pure: the store expands and reads.
 */

/** `map: { over: upstream.path.to.list, max_parallel: N }` of a task. */
export interface MapSpec {
  /** The upstream whose output holds the list (one of the task's `depends_on`). */
  upstream: string;
  /** The keys (or list indexes) from that output to the list; empty: the output is the list. */
  path: string[];
  /** How many of its mapped instances may be scheduled or running at once; absent: no cap. */
  maxParallel?: number;
}

/** The most items one map expands into: past it, the expansion fails with this number in its error. */
export const MAX_MAP_ITEMS = 100_000;

/** The most a task's `max_parallel` may say. */
export const MAX_MAP_PARALLEL = 100_000;

/**
 * How many waiting mapped instances of one task a step reads and may schedule: the rest wait their
 * turn in the database, so a step costs this much however long the list is.
 */
export const MAP_WINDOW = 500;

/** The pending reason of a task whose mapped instances are running (it holds nothing itself). */
export const MAPPED_REASON = 'MAPPED';

/** The pending reason of a mapped instance held back by its task's `max_parallel`. */
export const MAX_PARALLEL_REASON = 'MAX_PARALLEL';

const MAPPED_ID = /^(.+)\[(\d+)\]$/;

/** The id of mapped instance `index` of task `taskId`. */
export function mappedTaskId(taskId: string, index: number): string {
  return `${taskId}[${index}]`;
}

/** `task[17]` → { task, index: 17 }; null for a task id that is not a mapped instance's. */
export function parseMappedTaskId(taskId: string): { task: string; index: number } | null {
  const m = MAPPED_ID.exec(taskId);
  return m ? { task: m[1]!, index: Number(m[2]) } : null;
}

/** The id of the task in the DAG a task instance runs (a mapped instance runs its task's spec). */
export function specTaskId(taskId: string): string {
  return parseMappedTaskId(taskId)?.task ?? taskId;
}
