import { WAITING_TI_STATES, legalTiFrom, type RunStateName, type TiState } from '../core/states.js';
import { EVENT_KIND, pendingReasonEvents, tiEvents } from './events/record-events.js';
import { inlineLiterals } from './inline-literals.js';
import { MAP_WINDOW } from '../core/map-spec.js';
import type { Fragment, PendingQuery, Sql, TxSql } from './sql.js';

export interface TiRow {
  id: string;
  run_id: string;
  task_id: string;
  try_number: number;
  max_tries: number;
  state: TiState;
  attempt_token: string | null;
  executor: string;
  agent_id: string | null;
  dispatch_key: string | null;
  pid: number | null;
  pending_reason: string | null;
  next_try_at: Date | null;
  queued_at: Date | null;
  started_at: Date | null;
  heartbeat_at: Date | null;
  ended_at: Date | null;
  exit_code: number | null;
  /** The signal that killed the latest try (SIGKILL, …); null when it exited or has not ended. */
  signal: string | null;
  error: string | null;
  /** When it is due to end (`deadline:`, from its first scheduling; migration 030), and whether it did, once due. */
  deadline_at: Date | null;
  deadline_state: 'met' | 'missed' | null;
  /** Of a mapped task's own instance: how many mapped instances it was expanded into; else null. */
  map_count?: number | null;
}

export async function listTis(sql: Sql | TxSql, runId: string): Promise<TiRow[]> {
  return sql<TiRow[]>`select * from task_instances where run_id = ${runId} order by id`;
}

/** The columns of a task instance the API shows (`TaskInstance` in types.proto), and no others. */
export const TI_VIEW_COLUMNS = [
  'id',
  'run_id',
  'task_id',
  'state',
  'try_number',
  'max_tries',
  'executor',
  'agent_id',
  'queued_at',
  'started_at',
  'heartbeat_at',
  'ended_at',
  'exit_code',
  'signal',
  'error',
  'pending_reason',
  'next_try_at',
  'deadline_at',
  'deadline_state',
  'map_count',
] as const;

/** A task instance as the API shows it. */
export type TiView = Pick<TiRow, (typeof TI_VIEW_COLUMNS)[number]>;

/**
 * A run's state and the states of its task instances (of one task, when named), in one
 * statement: all a log follower needs to know whether its selection has ended. Null when there
 * is no such run.
 */
export async function runAndTiStates(
  sql: Sql | TxSql,
  runId: string,
  taskId?: string,
): Promise<{ run: RunStateName; tis: TiState[] } | null> {
  const [row] = await sql<{ run: RunStateName; tis: TiState[] }[]>`
    select r.state as run, coalesce(array_agg(t.state order by t.id) filter (where t.id is not null), '{}') as tis
    from dag_runs r
    left join task_instances t on t.run_id = r.id and (${taskId ?? null}::text is null or t.task_id = ${taskId ?? null})
    where r.id = ${runId}
    group by r.state`;
  return row ?? null;
}

/** The task instances of a run as the API shows them, in creation (spec) order. */
export async function listTiViews(sql: Sql | TxSql, runId: string): Promise<TiView[]> {
  return sql<TiView[]>`select ${sql(TI_VIEW_COLUMNS)} from task_instances where run_id = ${runId} order by id`;
}

/** The columns of a task instance the planner decides and offers from, and no others: a full
 *  row took the client two to three times as long to read (200 runs' TIs, a busy machine). */
export const PLANNER_TI_COLUMNS = [
  'id',
  'run_id',
  'task_id',
  'state',
  'executor',
  'pending_reason',
  'next_try_at',
  'map_count',
] as const;

/** A task instance as the planner reads it. */
export type PlannerTi = Pick<TiRow, (typeof PLANNER_TI_COLUMNS)[number]>;

/** Task instances of many runs at once (the planner reads all active runs' TIs in one query). */
export async function listTisOfRuns(sql: Sql, runIds: string[]): Promise<PlannerTi[]> {
  if (runIds.length === 0) return [];
  return sql<PlannerTi[]>`${plannerTisOf(sql, sql`${runIds}::bigint[]`)}`;
}

/**
 * What the planner reads of runs (`runs`: an array of their ids): their own task instances, and of
 * their mapped instances only those in flight and the next `MAP_WINDOW` of each mapped task still
 * to schedule, so a step costs the same whether a list has ten items or 100,000.
 */
function plannerTisOf(sql: Sql, runs: Fragment) {
  const cols = sql(PLANNER_TI_COLUMNS);
  return sql`
    select ${cols} from task_instances where run_id = any(${runs}) and map_parent is null
    union all
    select ${cols} from task_instances
    where run_id = any(${runs}) and map_parent is not null
      and state in ('scheduled', 'queued', 'running', 'up_for_retry')
    union all
    select c.* from task_instances p cross join lateral (
      select ${cols} from task_instances c where c.map_parent = p.id and c.state = 'none'
      order by c.map_index limit ${MAP_WINDOW}) c
    where p.run_id = any(${runs}) and p.map_parent is null and p.map_count is not null and p.state = 'waiting'
    order by id`;
}

/**
 * Every task instance of the runs of these TIs. Not sent until awaited or `execute()`d. Sent on
 * the reports pool, whose plans are generic and kept: the runs' ids are computed first (an array,
 * once), then their task instances are looked up by the run's index, so the plan stays an index
 * lookup whatever the statistics were when it was made. As joins, kept plans read the whole
 * table: hashed before the table had statistics (2.5 ms at 10,000 task instances), and after,
 * the distinct runs read through the run index from end to end.
 */
export function listTisOfRunsOfTis(sql: Sql, tiIds: string[]): PendingQuery<PlannerTi[]> {
  return sql<PlannerTi[]>`${plannerTisOf(
    sql,
    sql`array(select distinct run_id from task_instances where id = any(${tiIds}::bigint[]))`,
  )}`;
}

export async function getTi(sql: Sql | TxSql, tiId: string): Promise<TiRow | null> {
  const [row] = await sql<TiRow[]>`select * from task_instances where id = ${tiId}`;
  return row ?? null;
}

/**
 * The guarded transition for task instances of one run: moves the named tasks to `to` only from
 * the states the state table allows, and records each move in the events log in the same
 * statement. Returns the ids actually moved (rows someone else moved first are left alone).
 * `fields.from` narrows the guard to the state the caller's decision was based on: a planner
 * that read `none` must not move a TI another leader has meanwhile claimed (`queued` →
 * `scheduled` is legal in the table, but undoing that claim would run the task twice).
 */
export async function transitionTis(
  sql: Sql | TxSql,
  runId: string,
  taskIds: string[],
  to: TiState,
  fields: { error?: string | null; endedNow?: boolean; from?: readonly TiState[] } = {},
): Promise<string[]> {
  if (taskIds.length === 0) return [];
  const legal = legalTiFrom(to);
  const from = fields.from ? legal.filter((s) => fields.from!.includes(s)) : legal;
  if (from.length === 0) return [];
  const rows = await sql<{ ti_id: string }[]>`
    with moved as (
      update task_instances set state = ${to}, pending_reason = null,
        error = coalesce(${fields.error ?? null}, error),
        ended_at = case when ${fields.endedNow ?? false} then now() else ended_at end
      where run_id = ${runId} and task_id = any(${taskIds}::text[]) and state = any(${from as string[]}::text[])
      returning id, run_id, task_id, try_number)
    ${tiEvents(
      sql,
      EVENT_KIND.tiState,
      sql`moved`,
      sql`jsonb_build_object('task_id', task_id, 'to', ${to}::text, 'try', try_number)`,
    )}
    returning ti_id`;
  return rows.map((r) => r.ti_id);
}

/**
 * Writes pending reasons that changed (one statement for all of them). A reason is a hint for
 * the reader, rewritten at every step: a row another writer holds (a step overlapping this one,
 * a claim) is skipped rather than waited for, so two such writes over the same rows in different
 * orders can never deadlock.
 */
export async function setPendingReasons(sql: Sql | TxSql, reasons: Map<string, string | null>): Promise<void> {
  if (reasons.size === 0) return;
  const ids = [...reasons.keys()];
  const values = ids.map((id) => reasons.get(id) ?? null);
  // Only a reason that changed is written, and recorded in the events log for watchers.
  await sql`
    with r as (select * from unnest(${ids}::bigint[], ${values as string[]}::text[]) as r(id, reason)),
    free as (
      select t.id, r.reason from task_instances t join r on t.id = r.id
      where t.state in (${inlineLiterals(sql, WAITING_TI_STATES)}) and t.pending_reason is distinct from r.reason
      for update of t skip locked),
    moved as (
      update task_instances t set pending_reason = free.reason from free where t.id = free.id
      returning t.id, t.run_id, t.task_id, t.try_number, t.pending_reason)
    ${pendingReasonEvents(sql, sql`moved`)}`;
}
