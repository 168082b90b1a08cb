import { advanceRun, type TiView } from '../../core/advance-run.js';
import { activeRuns, poisonRun, runningCounts, transitionRun, type RunRow } from '../../db/runs.js';
import { finalizeRun } from '../../db/finalize-run.js';
import { listTisOfRuns, setPendingReasons, transitionTis, type TiRow } from '../../db/tis.js';
import type { DispatchItem, SchedulerContext } from '../context.js';
import { createScheduledRuns } from './create-scheduled-runs.js';

export interface PlanResult {
  runsCreated: number;
  runsStarted: number;
  runsAdvanced: number;
  runsFinalized: number;
  offered: number;
  errors: number;
}

/**
 * Phase 1: create due cron runs, start queued runs within max_active_runs, advance every running
 * run by its trigger rules in isolation (one run's failure never stops the others), finalize runs
 * whose task instances are all terminal, and offer scheduled task instances to the dispatch pool.
 */
export async function plan(ctx: SchedulerContext, opts: { cron: boolean } = { cron: true }): Promise<PlanResult> {
  const result: PlanResult = { runsCreated: 0, runsStarted: 0, runsAdvanced: 0, runsFinalized: 0, offered: 0, errors: 0 };
  if (opts.cron) {
    try {
      result.runsCreated = (await createScheduledRuns(ctx)).created;
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.cron', err);
    }
  }

  const runs = await activeRuns(ctx.sql, ctx.maxRunsPerStep);
  if (runs.length === 0) return result;
  const tisByRun = new Map<string, TiRow[]>();
  for (const ti of await listTisOfRuns(ctx.sql, runs.map((r) => r.id))) {
    (tisByRun.get(ti.run_id) ?? tisByRun.set(ti.run_id, []).get(ti.run_id)!).push(ti);
  }
  const reasons = new Map<string, string | null>();

  const advance = async (run: RunRow & { dag_paused: boolean }) => {
    try {
      result.offered += await advanceOne(ctx, run, tisByRun.get(run.id) ?? [], reasons, result);
      result.runsAdvanced++;
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.advance', err, { runId: run.id, dagId: run.dag_id });
    }
  };

  // Running runs first, so a run that ends in this step frees its max_active_runs slot for a
  // queued run of the same DAG in this same step.
  for (const run of runs) if (run.state === 'running') await advance(run);

  // Then start queued runs, oldest first, while their DAG has room, and advance them at once.
  const queued = runs.filter((r) => r.state === 'queued');
  const counts = await runningCounts(ctx.sql, [...new Set(queued.map((r) => r.dag_id))]);
  for (const run of queued) {
    const n = counts.get(run.dag_id) ?? 0;
    const blocked = run.dag_paused ? 'DAG_PAUSED' : n >= run.spec.maxActiveRuns ? 'MAX_ACTIVE_RUNS' : null;
    if (blocked) {
      for (const ti of tisByRun.get(run.id) ?? []) if (ti.pending_reason !== blocked) reasons.set(ti.id, blocked);
      continue;
    }
    let started = false;
    try {
      started = await transitionRun(ctx.sql, run.id, 'running');
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.start', err, { runId: run.id, dagId: run.dag_id });
    }
    if (!started) continue;
    counts.set(run.dag_id, n + 1);
    result.runsStarted++;
    await advance(run);
  }

  try {
    await setPendingReasons(ctx.sql, reasons);
  } catch (err) {
    result.errors++;
    ctx.counters.error('plan.reasons', err);
  }
  return result;
}

/** Reasons the planner itself sets; those of a dispatcher (e.g. NO_AGENT_WITH_LABELS) are left alone. */
function isPlannerReason(reason: string | null): boolean {
  return reason !== null && (['DISPATCH_QUEUE_FULL', 'DAG_PAUSED', 'MAX_ACTIVE_RUNS', 'RUN_QUEUED', 'UPSTREAM_RUNNING'].includes(reason) || reason.startsWith('NO_EXECUTOR:'));
}

/** The tasks a decision rests on: the ones it moves and their direct upstreams. */
function dependsOnMoves(run: RunRow, d: { schedule: string[]; retry: string[]; upstreamFailed: string[]; skipped: string[] }): Set<string> {
  const spec = new Map(run.spec.tasks.map((t) => [t.id, t]));
  const out = new Set<string>();
  for (const id of [...d.schedule, ...d.retry, ...d.upstreamFailed, ...d.skipped]) {
    out.add(id);
    for (const up of spec.get(id)?.dependsOn ?? []) out.add(up);
  }
  return out;
}

/** Thrown by the pure part of advancing: the run itself is bad, not the database. */
class PoisonRunError extends Error {
  override readonly name = 'PoisonRunError';
}

async function advanceOne(
  ctx: SchedulerContext,
  run: RunRow & { dag_paused: boolean },
  tis: TiRow[],
  reasons: Map<string, string | null>,
  result: PlanResult,
): Promise<number> {
  const views = new Map<string, TiView>(
    tis.map((ti) => [ti.task_id, { state: ti.state, nextTryAt: ti.next_try_at, pendingReason: ti.pending_reason }]),
  );
  let decision;
  try {
    decision = advanceRun(run.spec.tasks, views, ctx.now());
  } catch (err) {
    // A run that cannot be advanced would throw on every tick: mark it and move on.
    await poisonRun(ctx.sql, run.id, (err as Error).message);
    throw new PoisonRunError(`run ${run.id} poisoned: ${(err as Error).message}`, { cause: err });
  }
  const byTask = new Map(tis.map((ti) => [ti.task_id, ti]));
  if (run.dag_paused) {
    // A paused DAG starts nothing new: running attempts finish, failures still propagate and the
    // run can still end, but what would be scheduled waits, saying why.
    for (const taskId of [...decision.schedule, ...decision.retry]) {
      if (byTask.get(taskId)!.pending_reason !== 'DAG_PAUSED') decision.reasons.set(taskId, 'DAG_PAUSED');
      else decision.reasons.delete(taskId);
    }
    decision.schedule = [];
    decision.retry = [];
  }

  const moved =
    decision.schedule.length + decision.retry.length + decision.upstreamFailed.length + decision.skipped.length > 0;
  if (moved) {
    const applied = await ctx.sql.begin(async (tx) => {
      // The decision was made from a read outside this transaction. Every move of a TI is
      // forward except a clear (terminal → none), which locks the run row; so lock it too and
      // check that the tasks this decision rests on (the moved ones and their upstreams) did not
      // move since the read, or a stale "upstream failed" could land on a task just cleared.
      // Other tasks finishing meanwhile cannot invalidate it. If one moved, the next step decides.
      await tx`select 1 from dag_runs where id = ${run.id} for update`;
      const now = await tx<{ task_id: string; state: string }[]>`
        select task_id, state from task_instances where run_id = ${run.id} and task_id = any(${[...dependsOnMoves(run, decision)]}::text[])`;
      if (now.some((t) => byTask.get(t.task_id)?.state !== t.state)) return false;
      // Guarded on the state each decision was read in, so a stale read (another leader moved on)
      // never pulls a claimed attempt back to scheduled.
      await transitionTis(tx, run.id, decision.schedule, 'scheduled', { from: ['none'] });
      await transitionTis(tx, run.id, decision.retry, 'scheduled', { from: ['up_for_retry'] });
      await transitionTis(tx, run.id, decision.upstreamFailed, 'upstream_failed', { endedNow: true });
      await transitionTis(tx, run.id, decision.skipped, 'skipped', { endedNow: true });
      return true;
    });
    if (!applied) {
      ctx.logger.debug({ runId: run.id }, 'run changed while it was being planned; planning it again next step');
      return 0;
    }
  }
  if (decision.nextRetryAt) ctx.wakeAt(decision.nextRetryAt);
  for (const [taskId, reason] of decision.reasons) reasons.set(byTask.get(taskId)!.id, reason);

  if (decision.outcome) {
    if (await finalizeRun(ctx.sql, run.id, decision.outcome)) result.runsFinalized++;
    return 0;
  }

  if (run.dag_paused) {
    for (const ti of tis) if (ti.state === 'scheduled' && ti.pending_reason !== 'DAG_PAUSED') reasons.set(ti.id, 'DAG_PAUSED');
    return 0;
  }

  // Offer every scheduled TI: the ones just scheduled and those a full queue refused before.
  const justScheduled = new Set([...decision.schedule, ...decision.retry]);
  const scheduled = new Set(justScheduled);
  for (const ti of tis) if (ti.state === 'scheduled') scheduled.add(ti.task_id);
  let offered = 0;
  const tasks = new Map(run.spec.tasks.map((t) => [t.id, t]));
  for (const taskId of scheduled) {
    const ti = byTask.get(taskId)!;
    if (!ctx.executors.has(ti.executor)) {
      const reason = `NO_EXECUTOR:${ti.executor}`;
      if (ti.pending_reason !== reason) reasons.set(ti.id, reason);
      continue;
    }
    const item: DispatchItem = {
      tiId: ti.id,
      runId: run.id,
      dagId: run.dag_id,
      taskId,
      executor: ti.executor,
      task: tasks.get(taskId)!,
      conf: run.conf,
      logicalDate: run.logical_date,
      // A TI moved to scheduled in this step had its reason cleared by the move.
      pendingReason: justScheduled.has(taskId) ? null : ti.pending_reason,
    };
    const outcome = ctx.offer(item);
    if (outcome === 'accepted') offered++;
    // A full queue says so; an accepted offer clears only that reason (a dispatcher may set its
    // own, e.g. NO_AGENT_WITH_LABELS, which must not flap every step).
    if (outcome === 'full' && ti.pending_reason !== 'DISPATCH_QUEUE_FULL') reasons.set(ti.id, 'DISPATCH_QUEUE_FULL');
    if (outcome === 'accepted' && isPlannerReason(ti.pending_reason)) reasons.set(ti.id, null);
  }
  return offered;
}
