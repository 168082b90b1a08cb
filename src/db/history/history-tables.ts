/**
 * The append-only history tables, each partitioned by ranges of the id of the row it belongs to
 * (migration 008): a partition can go as a whole once its owner table has no row left in its
 * range. One record per table, so the partition upkeep is written once for both.
 */
export interface HistoryTable {
  /** The partitioned table. */
  readonly name: 'events' | 'task_logs';
  /** Its partition key: the id of the row each of its rows belongs to. */
  readonly key: 'run_id' | 'ti_id';
  /** The table that id is the primary key of. */
  readonly owner: 'dag_runs' | 'task_instances';
  /** The least span of a new partition, in owner ids: a quiet installation gets few partitions. */
  readonly minSpan: bigint;
}

export const EVENTS: HistoryTable = { name: 'events', key: 'run_id', owner: 'dag_runs', minSpan: 1_000n };
export const TASK_LOGS: HistoryTable = { name: 'task_logs', key: 'ti_id', owner: 'task_instances', minSpan: 10_000n };

export const HISTORY_TABLES: readonly HistoryTable[] = [EVENTS, TASK_LOGS];
