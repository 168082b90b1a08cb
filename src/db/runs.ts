import type { DagSpec } from '../core/dag-spec.js';
import { actorPayload, type WriteActor } from '../core/actor.js';
import { newRunTrace, type TraceContext, type TraceParent } from '../core/trace-context.js';
import {
  ACTIVE_RUN_STATES,
  RUN_START_FROM,
  STARTED_RUN_STATES,
  runMoveFrom,
  type RunStateName,
} from '../core/states.js';
import type postgres from 'postgres';
import { EVENT_KIND, runEvents } from './events/record-events.js';
import { inlineLiterals } from './inline-literals.js';
import type { Fragment, PendingQuery, Sql, TxSql } from './sql.js';
import type { TiRow } from './tis.js';

export interface RunRow {
  id: string;
  dag_id: string;
  run_key: string;
  run_type: 'manual' | 'scheduled' | 'event';
  /** The version of its DAG the run was made from (its spec in `dag_versions`). */
  dag_version: number;
  logical_date: Date;
  state: RunStateName;
  conf: Record<string, unknown>;
  poison_error: string | null;
  created_at: Date;
  /** Its first start: kept when a clear re-opens it, so its duration is its wall time. */
  started_at: Date | null;
  ended_at: Date | null;
  settled_at: Date | null;
  /** When a clear last re-opened it (migration 017); the orphan-run reaper measures from it. */
  reopened_at: Date | null;
  /** Bumped by a clear; the planner's writes are guarded on it (db/plan/). A bigint, as text. */
  plan_epoch: string;
  /** The run span's W3C context (migration 016); null for runs made before tracing. */
  traceparent: string | null;
  /** The caller's span the run continues, when it was triggered with a traceparent. */
  trace_parent_span: string | null;
  tracestate: string | null;
  /** When it is due to end (the DAG's `deadline`, migration 027), and whether it did, once due. */
  deadline_at: Date | null;
  deadline_state: 'met' | 'missed' | null;
}

/** A run's trace context, as its attempts' spans take it (null for a run made before tracing). */
export function runTraceOf(r: Pick<RunRow, 'traceparent' | 'tracestate'>): TraceContext | null {
  return r.traceparent ? { traceparent: r.traceparent, tracestate: r.tracestate } : null;
}

/** A run with the spec of the DAG version it was made from. */
export type RunWithSpec = RunRow & { spec: DagSpec };

export interface NewRun {
  dagId: string;
  /** A version stored in `dag_versions` (upsertDag writes each): the run is made from its spec. */
  dagVersion: number;
  runKey: string;
  runType: 'manual' | 'scheduled' | 'event';
  logicalDate: Date;
  conf: Record<string, unknown>;
  /** The executor a task with `executor: default` gets in this edition. */
  defaultExecutor: string;
  /** The caller's trace context it continues (TriggerRun's traceparent); absent: a trace of its own. */
  caller?: { traceparent: TraceParent; tracestate: string | null };
  /** Who triggered it through the API (recorded in its first event); absent for a scheduled run. */
  by?: WriteActor;
  /** `--no-cache`: its cached tasks run instead of reusing an earlier result. */
  noCache?: boolean;
}

/** A run just created, as the planner reads it: its task instances, and the runs of its DAG running
 *  at its creation (for max_active_runs). */
export interface CreatedRunRead {
  tis: TiRow[];
  runningInDag: number;
  /** The spec of the version the run was made from. */
  spec: DagSpec;
}

/**
 * Creates a run and one task instance per task, and records it in the events log, in one
 * statement (in the caller's transaction, if any). Idempotent on (dag_id, run_key): a second call
 * returns the existing run with created = false. A run created comes with what the planner would
 * read of it (`read`), so it can be planned without reading it again.
 */
export async function createRun(
  tx: Sql | TxSql,
  run: NewRun,
): Promise<{ run: RunRow; created: boolean; read?: CreatedRunRead }> {
  const source = tx`select dag_id, version, spec, null::bool as paused from dag_versions
                    where dag_id = ${run.dagId} and version = ${run.dagVersion}`;
  const made = await insertRun(tx, source, run);
  if (!made) throw new Error(`DAG ${run.dagId} has no version ${run.dagVersion}`);
  return made;
}

/**
 * `createRun` of the DAG's current version, read in the same statement (one round trip for
 * TriggerRun). Null when there is no such DAG. The read it returns knows whether the DAG is paused.
 */
export async function createRunOfDag(
  sql: Sql | TxSql,
  run: Omit<NewRun, 'dagVersion'>,
): Promise<{ run: RunRow; created: boolean; read?: CreatedRunRead & { dagPaused: boolean } } | null> {
  // The DAG's spec is its current version's (upsertDag writes both in one statement): one probe.
  const source = sql`select dag_id, version, spec, paused from dags where dag_id = ${run.dagId}`;
  const made = await insertRun(sql, source, run);
  if (!made?.read) return made as { run: RunRow; created: boolean } | null;
  return { ...made, read: { ...made.read, dagPaused: made.read.dagPaused! } };
}

/** The statement of both: the task instances are made from the version's spec. Null when
 *  `source` gave no DAG and no run has the key. */
async function insertRun(
  tx: Sql | TxSql,
  source: PendingQuery<postgres.Row[]>,
  run: Omit<NewRun, 'dagVersion'>,
): Promise<{ run: RunRow; created: boolean; read?: CreatedRunRead & { dagPaused: boolean | null } } | null> {
  const trace = newRunTrace(run.caller?.traceparent ?? null, run.caller?.tracestate ?? null);
  const queued = tx.json({
    to: 'queued',
    run_key: run.runKey,
    run_type: run.runType,
    ...actorPayload(run.by),
  } as never);
  const [inserted] = await tx<
    (RunRow & {
      dag_paused: boolean | null;
      running_in_dag: number;
      tis_json: Record<string, unknown>[];
      spec: DagSpec;
    })[]
  >`
    with src as (${source}),
    run as (
      insert into dag_runs (dag_id, run_key, run_type, dag_version, logical_date, conf,
                            traceparent, trace_parent_span, tracestate, deadline_at, notifies, no_cache)
      select dag_id, ${run.runKey}, ${run.runType}, version, ${run.logicalDate}, ${tx.json(run.conf as never)},
        ${trace.traceparent}, ${trace.parentSpan}, ${trace.tracestate},
        -- A scheduled run's deadline counts from its logical date, any other's from its trigger.
        (case when ${run.runType} = 'scheduled' then ${run.logicalDate}::timestamptz else now() end)
          + (spec ->> 'deadlineMs')::bigint * interval '1 millisecond',
        -- Whether its end has rules to read (migration 030): without, only the server's defaults.
        spec ? 'notify',
        ${run.noCache === true}
      from src
      on conflict (dag_id, run_key) do nothing
      returning *),
    tis as (
      insert into task_instances (run_id, task_id, max_tries, executor, retry_delay_ms, max_retry_delay_ms, timeout_ms,
                                  pending_reason, deadline_ms)
      select run.id, t->>'id', (t->>'retries')::int + 1,
             case when t->>'executor' = 'default' then ${run.defaultExecutor} else t->>'executor' end,
             (t->>'retryDelayMs')::bigint, (t->>'maxRetryDelayMs')::bigint, (t->>'timeoutMs')::int, 'RUN_QUEUED',
             (t->>'deadlineMs')::bigint
      from run, src, jsonb_array_elements(src.spec->'tasks') with ordinality as e(t, n)
      order by e.n
      returning *),
    ev as (${runEvents(tx, EVENT_KIND.runState, tx`run`, tx`${queued}`)})
    select run.*, (select paused from src) as dag_paused, (select spec from src) as spec,
      (select count(*)::int from dag_runs x
       where x.dag_id = run.dag_id and x.state in (${inlineLiterals(tx, STARTED_RUN_STATES)})) as running_in_dag,
      (select coalesce(jsonb_agg(to_jsonb(t) order by t.id), '[]'::jsonb) from tis t) as tis_json
    from run`;
  if (!inserted) {
    const [existing] = await tx<
      RunRow[]
    >`select * from dag_runs where dag_id = ${run.dagId} and run_key = ${run.runKey}`;
    return existing ? { run: existing, created: false } : null;
  }
  const { dag_paused: dagPaused, running_in_dag: runningInDag, tis_json: tisJson, spec, ...created } = inserted;
  return { run: created, created: true, read: { dagPaused, runningInDag, spec, tis: tisJson.map(tiFromJson) } };
}

/** A task instance row as `to_jsonb` gives it: ids back to decimal strings, times to Dates. */
function tiFromJson(j: Record<string, unknown>): TiRow {
  const date = (v: unknown) => (v === null || v === undefined ? null : new Date(v as string));
  return {
    ...(j as unknown as TiRow),
    id: String(j.id),
    run_id: String(j.run_id),
    // Not in TiRow's type, but in a read's rows: bigints as decimal strings there too.
    ...({ retry_delay_ms: String(j.retry_delay_ms), max_retry_delay_ms: String(j.max_retry_delay_ms) } as object),
    next_try_at: date(j.next_try_at),
    queued_at: date(j.queued_at),
    started_at: date(j.started_at),
    heartbeat_at: date(j.heartbeat_at),
    ended_at: date(j.ended_at),
  };
}

export async function getRun(sql: Sql | TxSql, runId: string): Promise<RunRow | null> {
  const [row] = await sql<RunRow[]>`select * from dag_runs where id = ${runId}`;
  return row ?? null;
}

/** The columns of a run the API shows (`Run` in types.proto), and no others: a read for the API
 *  leaves out what it would drop (the spec is not in the row: it is the version's). */
export const RUN_VIEW_COLUMNS = [
  'id',
  'dag_id',
  'run_key',
  'run_type',
  'dag_version',
  'logical_date',
  'state',
  'conf',
  'created_at',
  'started_at',
  'ended_at',
  'traceparent',
  'deadline_at',
  'deadline_state',
] as const;

/** A run as the API shows it. */
export type RunView = Pick<RunRow, (typeof RUN_VIEW_COLUMNS)[number]>;

/** A run as the API shows it; null when there is no such run. */
export async function getRunView(sql: Sql | TxSql, runId: string): Promise<RunView | null> {
  const [row] = await sql<RunView[]>`select ${sql(RUN_VIEW_COLUMNS)} from dag_runs where id = ${runId}`;
  return row ?? null;
}

/** The newest runs, of one DAG or of all, as the API shows them. */
export async function listRuns(
  sql: Sql,
  opts: {
    dagId?: string;
    states?: readonly RunStateName[];
    limit: number;
    beforeId?: string;
    createdFrom?: Date;
    createdTo?: Date;
  },
): Promise<RunView[]> {
  const ofDag = opts.dagId ? sql`dag_id = ${opts.dagId}` : sql`true`;
  const inStates = opts.states?.length ? sql`state = any(${opts.states as RunStateName[]}::text[])` : sql`true`;
  const before = opts.beforeId ? sql`id < ${opts.beforeId}` : sql`true`;
  const from = opts.createdFrom ? sql`created_at >= ${opts.createdFrom}` : sql`true`;
  const to = opts.createdTo ? sql`created_at < ${opts.createdTo}` : sql`true`;
  return sql<RunView[]>`
    select ${sql(RUN_VIEW_COLUMNS)} from dag_runs
    where ${ofDag} and ${inStates} and ${before} and ${from} and ${to} order by id desc limit ${opts.limit}`;
}

/** A run as the planner reads it: with whether its DAG is paused and, for a queued run, how many
 *  runs of its DAG were running at the read (for max_active_runs). */
export type ActiveRunRow = RunWithSpec & { dag_paused: boolean; running_in_dag: number | null };

/** A read not sent until awaited or `execute()`d. */
export interface ActiveRunsRead extends PromiseLike<ActiveRunRow[]> {
  execute(): Promise<ActiveRunRow[]>;
}

/** Which active runs to read: these runs; the runs of these TIs (read right after their ends
 *  were written); the oldest queued runs, of these DAGs or of any; the running runs after a run id
 *  (a sweep's next stretch; from the oldest without `after`); or the running runs with work waiting
 *  on the planner: a retry due, and with `all` a TI scheduled but not yet claimed too. */
export type ActiveRunsOf =
  | { runIds: string[] }
  | { ofTis: string[] }
  | { queuedOf: string[] | 'any' }
  | { running: true; after?: string }
  | { waiting: 'retries' | 'all' };

/** Runs the planner looks at: queued or running, not poisoned, oldest first (all of them without
 *  `of`; queued runs taken fairly across DAGs). One round trip, the running counts
 *  included. Not sent until awaited or `execute()`d, so a caller can choose its place in a
 *  connection's pipeline. */
export function activeRuns(sql: Sql, limit: number, of: ActiveRunsOf | null = null): ActiveRunsRead {
  const read = (where: Fragment, from: Fragment = sql`dag_runs`) => sql`
      select r.*, d.paused as dag_paused from ${from} r join dags d on d.dag_id = r.dag_id
      where r.state in (${inlineLiterals(sql, ACTIVE_RUN_STATES)}) and r.poison_error is null ${where}
      order by r.id limit ${limit}`;
  // Runs named by key are read by key alone (the fence keeps the state test out of the scan):
  // a kept plan made before the table had statistics otherwise read the index of every active
  // run, end to end, and intersected it with the keys (reads behind ends go on the reports pool,
  // whose plans are kept).
  const byKey = (ids: Fragment) => read(sql``, sql`(select * from dag_runs where id = any(${ids}) offset 0)`);
  const queuedStates = inlineLiterals(sql, RUN_START_FROM);
  const startedStates = inlineLiterals(sql, STARTED_RUN_STATES);
  const runs =
    of !== null && 'queuedOf' in of
      ? // Fair across DAGs: each DAG's oldest queued runs, as many as it has room for under
        // max_active_runs and one more (so the step says why the rest wait and knows the DAG is
        // held back), then taken in turn: every DAG's first, then every DAG's second… (of those,
        // the DAGs of higher `priority` first).
        // DAGs with room before those without, paused DAGs last (they start nothing). So one
        // DAG's backlog, however old, never keeps another DAG's run from starting.
        sql`
      select r.*, d.paused as dag_paused from dags d
      cross join lateral (
        select count(*)::int as n from dag_runs x where x.dag_id = d.dag_id and x.state in (${startedStates})) c
      cross join lateral (
        select * from dag_runs r
        where r.dag_id = d.dag_id and r.state in (${queuedStates}) and r.poison_error is null
        order by r.id limit least(${limit}, greatest(0, d.max_active_runs - c.n) + 1)) r
      -- Only the DAGs with a queued run have their running runs counted (5,000 running runs
      -- counted every tick, with none queued, were most of an idle step's read).
      where exists (select 1 from dag_runs q where q.dag_id = d.dag_id and q.state in (${queuedStates}))
      ${of.queuedOf === 'any' ? sql`` : sql`and d.dag_id = any(${of.queuedOf}::text[])`}
      order by d.paused, c.n < d.max_active_runs desc, row_number() over (partition by d.dag_id order by r.id),
        coalesce((d.spec->>'priority')::int, 0) desc, r.id
      limit ${limit}`
      : of === null
        ? read(sql``)
        : 'runIds' in of
          ? byKey(sql`${of.runIds}::bigint[]`)
          : 'ofTis' in of
            ? // The runs' ids first, an array computed once, each TI found by its key.
              byKey(sql`array(select run_id from task_instances where id = any(${of.ofTis}::bigint[]))`)
            : 'waiting' in of
              ? // By the TIs' live index: as many rows as there is work waiting, not as there are runs.
                read(sql`and r.state in (${startedStates}) and r.id in (
                  select t.run_id from task_instances t
                  where ${of.waiting === 'all' ? sql`t.state = 'scheduled' or` : sql``}
                    (t.state = 'up_for_retry' and (t.next_try_at is null or t.next_try_at <= now())))`)
              : read(sql`and r.state in (${startedStates}) and r.id > ${of.after ?? '0'}::bigint`);
  // Each version's spec is sent once, with the first of its runs (in the order sent), and shared
  // by the others: most runs read together are of a few versions, and a spec is 1–13 KB.
  const rows = sql<(Omit<ActiveRunRow, 'spec'> & { spec: DagSpec | null })[]>`
    with q as (${runs}),
    -- Materialized: counted once. Inlined, the planner may rescan it for every run read (it did,
    -- with statistics taken before a bulk load: one read took over 10 s and stalled the scheduler
    -- until autovacuum analyzed the table again).
    c as materialized (
      select x.dag_id, count(*)::int as n from dag_runs x
      where x.state in (${startedStates}) and x.dag_id in (select dag_id from q where state in (${queuedStates}))
      group by x.dag_id)
    select q.*, case when q.state in (${queuedStates}) then coalesce(c.n, 0) end as running_in_dag,
      case when row_number() over (partition by q.dag_id, q.dag_version order by q.id) = 1 then v.spec end as spec
    from q left join c on c.dag_id = q.dag_id
    join dag_versions v on v.dag_id = q.dag_id and v.version = q.dag_version
    order by q.id`;
  return {
    execute: () => rows.execute().then(withSpecs),
    then: (onFulfilled, onRejected) => rows.then(withSpecs).then(onFulfilled, onRejected),
  };
}

/** Gives every run the spec its version's first run was sent with. */
function withSpecs(rows: readonly (Omit<ActiveRunRow, 'spec'> & { spec: DagSpec | null })[]): ActiveRunRow[] {
  const specs = new Map<string, DagSpec>();
  for (const r of rows) {
    const key = `${r.dag_version}:${r.dag_id}`;
    if (r.spec) specs.set(key, r.spec);
    else r.spec = specs.get(key)!;
  }
  return rows as ActiveRunRow[];
}

/**
 * The one guarded write for run states: moves the run only from a state the state table allows,
 * and records the move in the events log in the same statement. Resolves false if someone else
 * moved it first.
 */
export async function transitionRun(
  sql: Sql | TxSql,
  runId: string,
  to: RunStateName,
  payload: Record<string, unknown> = {},
): Promise<boolean> {
  // Never out of a terminal state: re-opening a run is the clear's alone (clear-task-instance.ts).
  const from = runMoveFrom(to);
  const terminal = to === 'success' || to === 'failed' || to === 'cancelled';
  const rows = await sql`
    with moved as (
      update dag_runs set state = ${to},
        started_at = case when ${to} = 'running' then now() else started_at end,
        ended_at = case when ${terminal} then now() else ended_at end
      where id = ${runId} and state = any(${from as string[]}::text[])
      returning id)
    ${runEvents(sql, EVENT_KIND.runState, sql`moved`, sql`${sql.json({ ...payload, to } as never)}`)}
    returning run_id`;
  return rows.count === 1;
}

/** Marks a run whose advancing threw, so the planner skips it instead of dying on it each tick. */
export async function poisonRun(sql: Sql, runId: string, error: string): Promise<void> {
  await sql`
    with p as (update dag_runs set poison_error = ${error} where id = ${runId} and poison_error is null returning id)
    ${runEvents(sql, EVENT_KIND.runPoisoned, sql`p`, sql`${sql.json({ error } as never)}`)}`;
}
