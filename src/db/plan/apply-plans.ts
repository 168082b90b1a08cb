import { RUN_START_FROM, STARTED_RUN_STATES, TERMINAL_TI_STATES, legalTiFrom } from '../../core/states.js';
import { claimEvent, claimReturning, claimSet } from '../attempts/claim-write.js';
import { EVENT_KIND, eventKind, insertEvents } from '../events/record-events.js';
import { inlineLiterals } from '../inline-literals.js';
import type { Fragment, PendingQuery, Sql } from '../sql.js';
import type { AppliedPlans, RunPlan } from './run-plan.js';

/**
 * Applies the planner's decisions for many runs in one statement, each state change recorded in
 * the events log in the same statement.
 *
 * Guards, row by row, so no decision made from a stale read ever lands:
 * - a run starts only if its DAG's `max_active_runs` has room at the write;
 * - a run's part applies only while its `plan_epoch` is the one read and it is not poisoned. A
 *   clear, the one move of a task instance backwards, bumps the epoch with the run row locked; the
 *   no-op update below takes the same row lock, and Postgres re-checks the epoch on the row
 *   version the clear left;
 * - a task instance moves only from the state its decision was read in (`from`), so a TI
 *   another leader has meanwhile claimed is never pulled back, and forward moves of other tasks
 *   (which never invalidate a decision) are harmless;
 * - a plan decided from states assumed rather than read (`expect`) applies only if the database
 *   holds every one of them at the write, and the run's DAG is not paused: the decision is then
 *   the one a read at that moment would have given.
 */
export async function applyPlans(sql: Sql, plans: RunPlan[]): Promise<AppliedPlans> {
  if (plans.length === 0) return emptyApplied();
  if (plans.length <= PLANS_PER_STATEMENT) return appliedFrom(await applyPlansQuery(sql, plans));
  // One statement after another, not at once: each sees the runs the one before started, so
  // max_active_runs still holds across them.
  const rows: AppliedRow[] = [];
  for (let i = 0; i < plans.length; i += PLANS_PER_STATEMENT)
    rows.push(...(await applyPlansQuery(sql, plans.slice(i, i + PLANS_PER_STATEMENT))));
  return appliedFrom(rows);
}

/**
 * The most runs one statement applies. The planner cannot know how many queued runs a burst
 * (a backfill, a thousand triggers) has just made until the table is analyzed again, and with
 * so few expected it may join each run of the batch to a rescan of the whole batch: 1,000 runs
 * took 105 ms in one statement (70 ms of it rescans), 100 runs at a time a few ms each.
 */
export const PLANS_PER_STATEMENT = 100;

type AppliedRow = {
  kind: 'run' | 'started' | 'ti' | 'claim' | 'wait';
  id: string;
  try_number: number | null;
  max_tries: number | null;
  token: string | null;
  dispatch_key: string | null;
  agent_id: string | null;
};

const emptyApplied = (): AppliedPlans => ({
  runs: new Set(),
  started: new Set(),
  moved: new Set(),
  claims: new Map(),
  waits: new Set(),
});

/** The statement of `applyPlans`, not sent until awaited or `execute()`d (so a caller can choose
 *  its place in a connection's pipeline); `appliedFrom` reads its answer. Plans must not be empty. */
export function applyPlansQuery(sql: Sql, plans: RunPlan[]): PendingQuery<AppliedRow[]> {
  const all = plans.flatMap((p) => p.moves);
  for (const m of all) {
    if (!legalTiFrom(m.to).includes(m.from))
      throw new Error(`illegal planner move ${m.from} → ${m.to} for task instance ${m.tiId}`);
    if (m.claimFor !== undefined && (m.to !== 'scheduled' || !legalTiFrom('queued').includes('scheduled'))) {
      throw new Error(`illegal planner claim of task instance ${m.tiId}: only a move to scheduled can be claimed`);
    }
  }
  const moves = all.filter((m) => m.claimFor === undefined);
  for (const m of all) {
    if ((m.to === 'waiting') !== (m.wait !== undefined))
      throw new Error(
        `illegal planner move of task instance ${m.tiId}: a move to waiting, and only one, says what it waits for`,
      );
  }
  const waits = moves.filter((m) => m.wait !== undefined);
  const claiming = all.filter((m) => m.claimFor !== undefined);
  const expect = plans.flatMap((p) => (p.expect ?? []).map((e) => ({ runId: p.runId, ...e })));
  // Each run is found by its key, stated outright: joined only to the plans, Postgres may read
  // every running run through their index instead (see finalizeRunsQuery).
  const runIds = plans.map((p) => p.runId);
  // Only the parts a batch needs are sent (the others would be empty): the statement is planned
  // anew for every batch, and its planning time grows with its parts (1.3 ms for all of them,
  // more than its execution for one chain step).
  const starts = plans.some((p) => p.start);
  const union = (parts: Fragment[]) => parts.reduce((all, part) => sql`${all} union all ${part}`);
  const applying = starts ? sql`select id from started union all select id from kept` : sql`select id from kept`;
  const startedStates = inlineLiterals(sql, STARTED_RUN_STATES);
  const runState = eventKind(sql, EVENT_KIND.runState);
  const tiState = eventKind(sql, EVENT_KIND.tiState);
  const events = [
    ...(starts
      ? [
          sql`select 0 as o, id as run_id, null::bigint as ti_id, ${runState} as kind,
                     '{"to": "running"}'::jsonb as payload from started`,
        ]
      : []),
    ...(moves.length > 0
      ? [
          sql`select 1 as o, run_id, id as ti_id, ${tiState} as kind,
                     jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number)
                       || case when state = 'waiting'
                               then jsonb_strip_nulls(jsonb_build_object('reason', pending_reason, 'message', message))
                               else '{}'::jsonb end
                     as payload from moved`,
        ]
      : []),
    ...(claiming.length > 0
      ? [
          sql`select 1 as o, run_id, id as ti_id, ${tiState} as kind,
                     jsonb_build_object('task_id', task_id, 'to', 'scheduled', 'try', try_number - 1) as payload
              from claimed`,
          sql`select 2 as o, run_id, id as ti_id, ${tiState} as kind, ${claimEvent(sql)} as payload from claimed`,
        ]
      : []),
  ];
  const answer = [
    sql`select 'run' as kind, id, null::int as try_number, null::int as max_tries, null::uuid as token,
               null::text as dispatch_key, null::text as agent_id from kept`,
    ...(starts ? [sql`select 'started', id, null, null, null, null, null from started`] : []),
    ...(moves.length > 0 ? [sql`select 'ti', id, null, null, null, null, null from moved`] : []),
    ...(waits.length > 0 ? [sql`select 'wait', ti_id, null, null, null, null, null from waits`] : []),
    ...(claiming.length > 0
      ? [sql`select 'claim', id, try_number, max_tries, attempt_token, dispatch_key, agent_id from claimed`]
      : []),
  ];
  return sql<AppliedRow[]>`
    with want as (
      select * from unnest(${plans.map((p) => p.runId)}::bigint[], ${plans.map((p) => p.epoch)}::bigint[],
                           ${plans.map((p) => (p.start ? 'true' : 'false'))}::text[]::bool[],
                           ${plans.map((p) => (p.expect ? 'true' : 'false'))}::text[]::bool[])
        as w(run_id, epoch, start, guarded)),
    x as (
      select * from unnest(${expect.map((e) => e.runId)}::bigint[], ${expect.map((e) => e.tiId)}::bigint[],
                           ${expect.map((e) => e.state)}::text[])
        as x(run_id, ti_id, state)),
    -- Plans decided ahead of a read whose assumptions do not hold (any more): none of it applies.
    spoiled as (
      select x.run_id from x join task_instances t on t.id = x.ti_id and t.run_id = x.run_id
      where case when x.state = 'active' then t.state = any(${TERMINAL_TI_STATES as string[]}::text[])
                 else t.state <> x.state end
      union all
      select x.run_id from x
      where not exists (select 1 from task_instances t where t.id = x.ti_id and t.run_id = x.run_id)
      union all
      select w.run_id from want w join dag_runs r on r.id = w.run_id join dags d on d.dag_id = r.dag_id
      where w.guarded and d.paused),
    ${
      starts
        ? sql`
    -- max_active_runs, checked again at the write: the runs of a DAG started here, in order,
    -- fit with those running now (a count read before, or given with a run, may be old).
    -- Each computed once (materialized), the running runs counted once per DAG.
    starting as materialized (
      select w.run_id, r.dag_id, row_number() over (partition by r.dag_id order by w.run_id) as n,
             v.max_active_runs as max_runs
      from want w join dag_runs r on r.id = w.run_id
      join dag_versions v on v.dag_id = r.dag_id and v.version = r.dag_version where w.start),
    busy as materialized (
      select x.dag_id, count(*) as n from dag_runs x
      where x.state in (${startedStates}) and x.dag_id in (select dag_id from starting)
      group by x.dag_id),
    room as materialized (
      select s.run_id from starting s left join busy b on b.dag_id = s.dag_id
      where s.n + coalesce(b.n, 0) <= s.max_runs),
    -- The state guards of these two are parameters, not literals: a literal matches the predicate
    -- of a partial index of runs by state, and a kept (generic) plan then walked that index
    -- instead of looking the runs up by their keys.
    started as (
      update dag_runs r set state = 'running', started_at = now()
      from want w where r.id = w.run_id and r.id = any(${runIds}::bigint[]) and w.start
        and r.state = any(${RUN_START_FROM as string[]}::text[]) and r.plan_epoch = w.epoch and r.poison_error is null
        and r.id not in (select run_id from spoiled) and r.id in (select run_id from room)
      returning r.id),`
        : sql``
    }
    kept as (
      update dag_runs r set plan_epoch = r.plan_epoch
      from want w where r.id = w.run_id and r.id = any(${runIds}::bigint[]) and not w.start
        and r.state = any(${STARTED_RUN_STATES as string[]}::text[]) and r.plan_epoch = w.epoch and
          r.poison_error is null
        and r.id not in (select run_id from spoiled)
      returning r.id),
    ${
      moves.length > 0
        ? sql`
    m as (
      select * from unnest(${moves.map((m) => m.tiId)}::bigint[], ${moves.map((m) => m.from)}::text[],
                           ${moves.map((m) => m.to)}::text[],
                           ${moves.map((m) => m.wait?.reason ?? null) as string[]}::text[],
                           ${moves.map((m) => m.wait?.message ?? null) as string[]}::text[])
        as m(id, from_state, to_state, reason, message)),
    moved as (
      update task_instances t set state = m.to_state, pending_reason = m.reason,
        ended_at = case when m.to_state = any(${TERMINAL_TI_STATES as string[]}::text[]) then now() else t.ended_at end,
        ready_at = case when m.to_state = 'scheduled' then now() else t.ready_at end,
        deadline_at = ${firstScheduling(sql, sql`m.to_state in ('scheduled', 'waiting')`)}
      from m
      where t.id = m.id and t.state = m.from_state
        and t.run_id in (${applying})
      returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.pending_reason, m.message),`
        : sql``
    }
    ${
      waits.length > 0
        ? sql`
    wv as (
      select * from unnest(${waits.map((m) => m.tiId)}::bigint[], ${waits.map((m) => m.wait!.kind)}::text[],
                           ${waits.map((m) => m.wait!.event) as string[]}::text[],
                           ${waits.map((m) => (m.wait!.match ? JSON.stringify(m.wait!.match) : null)) as string[]}
                             ::text[],
                           ${waits.map((m) => m.wait!.role) as string[]}::text[],
                           ${waits.map((m) => m.wait!.timeoutMs)}::bigint[],
                           ${waits.map((m) => m.wait!.onTimeout)}::text[])
        as wv(id, kind, event, match, role, timeout_ms, on_timeout)),
    -- What each wait started here waits for, written with its move: a waiting task instance
    -- always has its row. A task cleared and waiting again starts its row afresh.
    waits as (
      insert into task_waits (ti_id, run_id, task_id, kind, event, match, role, deadline, on_timeout)
      select mv.id, mv.run_id, mv.task_id, wv.kind, wv.event, wv.match::jsonb, wv.role,
             now() + wv.timeout_ms * interval '1 millisecond', wv.on_timeout
      from moved mv join wv on wv.id = mv.id where mv.state = 'waiting'
      on conflict (ti_id) do update set run_id = excluded.run_id, task_id = excluded.task_id, kind = excluded.kind,
        event = excluded.event, match = excluded.match, role = excluded.role, deadline = excluded.deadline,
        on_timeout = excluded.on_timeout, started_at = now(), ended_at = null, outcome = null, event_id = null
      returning ti_id),`
        : sql``
    }
    ${
      claiming.length > 0
        ? sql`
    c as (
      select * from unnest(${claiming.map((m) => m.tiId)}::bigint[], ${claiming.map((m) => m.from)}::text[],
                           ${claiming.map((m) => m.claimFor!)}::text[],
                           ${claiming.map((m) => m.agentId ?? null) as string[]}::text[])
        as c(id, from_state, executor, agent_id)),
    -- The claim every claimer makes (claim-write.ts), guarded here by the state the move was
    -- decided from, in a run this statement applies to.
    claimed as (
      update task_instances t set ${claimSet(sql, sql`c.executor`)}, deadline_at = ${firstScheduling(sql, sql`true`)}
      from c, dag_runs r
      where t.id = c.id and t.state = c.from_state and r.id = t.run_id
        and t.run_id in (${applying})
      returning ${claimReturning(sql)}),`
        : sql``
    }
    ${
      events.length > 0
        ? sql`
    ev as (
      -- One insert, run starts first: the log reads "run running", then its tasks' moves (a
      -- claimed task: scheduled, then queued).
      ${insertEvents(sql, sql`select run_id, ti_id, kind, payload from (${union(events)}) e order by o, ti_id`)}),`
        : sql``
    }
    answer as (${union(answer)})
    select * from answer`;
}

/**
 * A task's deadline counts from its first scheduling (migration 030): set by the first move that
 * schedules it (`when`), kept through retries and clears. Null for a task without `deadline:`.
 */
function firstScheduling(sql: Sql, when: Fragment): Fragment {
  return sql`coalesce(t.deadline_at, case when ${when} then now() + t.deadline_ms * interval '1 millisecond' end)`;
}

/** What a statement of `applyPlansQuery` applied. */
export function appliedFrom(rows: readonly AppliedRow[]): AppliedPlans {
  const out = emptyApplied();
  for (const r of rows) {
    if (r.kind === 'ti') out.moved.add(r.id);
    else if (r.kind === 'wait') out.waits.add(r.id);
    else if (r.kind === 'claim') {
      out.moved.add(r.id);
      out.claims.set(r.id, {
        tryNumber: r.try_number!,
        maxTries: r.max_tries!,
        attemptToken: r.token!,
        dispatchKey: r.dispatch_key!,
        agentId: r.agent_id,
      });
    } else {
      out.runs.add(r.id);
      if (r.kind === 'started') out.started.add(r.id);
    }
  }
  return out;
}
