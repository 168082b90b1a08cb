import { applyPlans } from '../../db/plan/apply-plans.js';
import { finalizeRuns } from '../../db/plan/finalize-runs.js';
import type { AppliedPlans, RunPlan } from '../../db/plan/run-plan.js';
import { isConnectionError } from '../../db/is-connection-error.js';
import { activeRuns, poisonRun, type ActiveRunRow } from '../../db/runs.js';
import { listTisOfRuns, setPendingReasons, type PlannerTi } from '../../db/tis.js';
import { claimWithTheMove } from '../claim-with-the-move.js';
import type { SchedulerContext } from '../context.js';
import { decideRun, type DecidedRun } from '../decide-run.js';
import { offerInOrder, scheduledOffers, type PendingOffer } from '../offer-scheduled.js';
import type { RunRead } from '../planner-memory.js';
import { rememberDecided } from '../remember-decided.js';
import { createScheduledRuns } from './create-scheduled-runs.js';
import { lookBackForWaits } from '../look-back-for-waits.js';
import { expandAndSettleMaps } from '../expand-mapped.js';
import { mapRoom } from '../mapped-fast-path.js';

export interface PlanResult {
  runsCreated: number;
  runsStarted: number;
  runsAdvanced: number;
  runsFinalized: number;
  offered: number;
  errors: number;
}

type ActiveRun = ActiveRunRow;

/** However many runs are running, a full step reads this many queued runs: one DAG each, at the
 *  least (they are read fairly across DAGs), so no DAG's queued runs wait on another's. */
const MIN_QUEUED_PER_STEP = 100;

/**
 * Phase 1: create due cron runs, start queued runs within max_active_runs, advance running runs,
 * finalize runs whose task instances are all terminal, and offer scheduled TIs to the pool. Each
 * run is decided in memory from one read (`readTargeted`, `readFull`); a run that throws poisons
 * only itself.
 */
export async function plan(
  ctx: SchedulerContext,
  opts: { cron: boolean; runIds?: string[] | null; queued?: number; waiting?: 'retries' | 'all' } = { cron: true },
): Promise<PlanResult> {
  const result: PlanResult = {
    runsCreated: 0,
    runsStarted: 0,
    runsAdvanced: 0,
    runsFinalized: 0,
    offered: 0,
    errors: 0,
  };
  if (opts.cron) {
    try {
      result.runsCreated = (await createScheduledRuns(ctx)).created;
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.cron', err);
    }
  }

  // A targeted step (these runs were nudged): only they are read and, with `queued`, the oldest
  // queued runs too. A full step reads the runs with work waiting, the sweep's next stretch and
  // queued runs fairly across DAGs.
  let targeted = opts.runIds || opts.queued ? (opts.runIds ?? []) : null;
  // Runs ended in the round trip of their last attempt's end have nothing left to read or decide;
  // only the room they made in a DAG whose queued runs were held back counts (below).
  const endedAhead = targeted
    ? (ctx.memory?.takeEndedAhead(targeted) ?? new Map<string, string>())
    : new Map<string, string>();
  if (endedAhead.size > 0) {
    targeted = targeted!.filter((id) => !endedAhead.has(id));
    result.runsFinalized += endedAhead.size;
  }
  const heldBackEndedAhead = [...new Set(endedAhead.values())].filter((d) => ctx.heldBackDags?.has(d));
  if (targeted && targeted.length === 0 && !opts.queued && heldBackEndedAhead.length === 0) return result;
  const { runs, tiRows, freshened } = targeted
    ? await readTargeted(ctx, targeted, opts.queued, result)
    : await readFull(ctx, opts.waiting ?? 'all');
  await freshened;
  // Their work is offered again now: a refusal in this step lists them again.
  ctx.roomWaiters?.reading(runs.map((r) => r.id));
  if (runs.length === 0 && heldBackEndedAhead.length === 0) return result;
  const tisByRun = new Map<string, PlannerTi[]>();
  for (const ti of tiRows) (tisByRun.get(ti.run_id) ?? tisByRun.set(ti.run_id, []).get(ti.run_id)!).push(ti);
  const reasons = new Map<string, string | null>();

  const decide = async (run: ActiveRun, start: boolean, into: DecidedRun[]) => {
    try {
      into.push(await decideOrPoison(ctx, run, tisByRun.get(run.id) ?? [], start));
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.advance', err, { runId: run.id, dagId: run.dag_id });
      ctx.memory?.forget([run.id]);
    }
  };

  // Running runs first, so a run that ends in this step frees its max_active_runs slot for a
  // queued run of the same DAG in this same step.
  const running: DecidedRun[] = [];
  for (const run of runs) if (run.state === 'running') await decide(run, false, running);
  const ended = await writeAndOffer(ctx, running, reasons, result);

  // Then queued runs, oldest first, while their DAG has room, advanced at once.
  await startQueued(
    ctx,
    { runs, tisByRun, ended, targeted: targeted !== null, heldBackEndedAhead },
    reasons,
    decide,
    result,
  );

  try {
    await setPendingReasons(ctx.sql, reasons);
    // So that a step deciding from memory does not write them again.
    ctx.memory?.noteReasons(reasons);
  } catch (err) {
    result.errors++;
    ctx.counters.error('plan.reasons', err);
  }
  return result;
}

interface PlannerRead {
  runs: ActiveRun[];
  tiRows: PlannerTi[];
  /** Settles when what the agents executor places from has been read again, if it was asked to be. */
  freshened: Promise<void> | undefined;
}

/** A targeted step's read: these runs (most already in the planner's memory) and, with `queued`, the oldest queued. */
async function readTargeted(
  ctx: SchedulerContext,
  targeted: string[],
  queued: number | undefined,
  result: PlanResult,
): Promise<PlannerRead> {
  let freshened: Promise<void> | undefined;
  // Runs read right behind the ends of their attempts need no read of their own; for the rest
  // the ids are known, so both reads go out at once.
  const ahead = ctx.memory?.takeReads(targeted) ?? new Map<string, RunRead>();
  // Runs whose plan ahead applied are decided from the planner's memory of them, now current.
  for (const [id, read] of ctx.memory?.takeCurrentReads(targeted.filter((id) => !ahead.has(id))) ?? [])
    ahead.set(id, read);
  const rest = ahead.size === 0 ? targeted : targeted.filter((id) => !ahead.has(id));
  // A step that reads runs, or starts one, reads along with them what the agents executor
  // places from if it is getting old, so agent work can be claimed with its move (a step that
  // only goes on with runs read behind their ends does not wait for it).
  if (rest.length > 0 || queued || [...ahead.values()].some((r) => r.run.state === 'queued'))
    freshened = ctx.dispatcher.freshenPlacement();
  const [runs, tiRows] =
    rest.length === 0
      ? [[], []]
      : await Promise.all([activeRuns(ctx.sql, ctx.maxRunsPerStep, { runIds: rest }), listTisOfRuns(ctx.sql, rest)]);
  for (const { run, tis } of ahead.values()) {
    runs.push(run);
    tiRows.push(...tis);
  }
  if (queued) {
    // As many as the dispatch pool takes now, and at least as many as were asked for.
    const room = Math.min(ctx.maxRunsPerStep, Math.max(queued, ctx.dispatcher.room()));
    const more =
      room > 0 ? await readQueued(ctx, result, 'any', new Set(runs.map((r) => r.id)), room) : { runs: [], tis: [] };
    runs.push(...more.runs);
    tiRows.push(...more.tis);
  }
  runs.sort((a, b) => compareIds(a.id, b.id));
  return { runs, tiRows, freshened };
}

/**
 * A full step's read: the running runs with work waiting on the planner, the sweep's next
 * stretch of running runs, and queued runs taken fairly across DAGs.
 */
async function readFull(ctx: SchedulerContext, waitingOn: 'retries' | 'all'): Promise<PlannerRead> {
  // Everything is read now: reads kept from before are older than this one.
  ctx.memory?.dropReads();
  const freshened = ctx.dispatcher.freshenPlacement();
  // Running runs: those with work waiting on the planner (a retry due; when a nudge asked for
  // everything, e.g. an agent connected or this replica was elected, every TI scheduled and not
  // yet claimed too, since what it waited for may have come: the tick leaves those to the
  // events that concern them and to the sweep), and the sweep's next stretch, on from where the
  // last full step stopped, so every running run is looked at within a known number of ticks
  // however many there are, while a step reads only a bounded number of them. Then queued
  // runs, fairly across DAGs, up to `maxRunsPerStep` active runs in all but always some: a
  // queued run (a cron run, say) makes progress however many runs are running.
  const sweepSize = ctx.sweepRunsPerStep ?? ctx.maxRunsPerStep;
  const [waiting, swept] = await Promise.all([
    activeRuns(ctx.sql, ctx.maxRunsPerStep, { waiting: waitingOn }),
    activeRuns(ctx.sql, sweepSize, { running: true, after: ctx.sweep?.cursor ?? '0' }),
  ]);
  if (ctx.sweep) ctx.sweep.cursor = swept.length < sweepSize ? '0' : swept[swept.length - 1]!.id;
  const running = [...new Map([...waiting, ...swept].map((r) => [r.id, r])).values()];
  const queued = await activeRuns(ctx.sql, Math.max(MIN_QUEUED_PER_STEP, ctx.maxRunsPerStep - running.length), {
    queuedOf: 'any',
  });
  const runs = [...running, ...queued].sort((a, b) => compareIds(a.id, b.id));
  const tiRows =
    runs.length === 0
      ? []
      : await listTisOfRuns(
          ctx.sql,
          runs.map((r) => r.id),
        );
  return { runs, tiRows, freshened };
}

/**
 * Starts the queued runs read, oldest first, while their DAG has room (`max_active_runs`), with
 * the queued runs of DAGs that runs ending in this step made room in; the rest get their reason.
 */
async function startQueued(
  ctx: SchedulerContext,
  step: {
    runs: ActiveRun[];
    tisByRun: Map<string, PlannerTi[]>;
    /** Runs that ended in this step. */
    ended: Set<string>;
    targeted: boolean;
    heldBackEndedAhead: string[];
  },
  reasons: Map<string, string | null>,
  decide: (run: ActiveRun, start: boolean, into: DecidedRun[]) => Promise<void>,
  result: PlanResult,
): Promise<void> {
  const { runs, tisByRun, ended } = step;
  let queued = runs.filter((r) => r.state === 'queued');
  // Running runs per DAG as read with the runs, less those that ended in this step.
  const counts = new Map<string, number>();
  for (const r of queued) counts.set(r.dag_id, r.running_in_dag ?? 0);
  for (const r of runs) if (ended.has(r.id) && counts.has(r.dag_id)) counts.set(r.dag_id, counts.get(r.dag_id)! - 1);
  const heldBack = ctx.heldBackDags;
  const roomMade =
    step.targeted && heldBack
      ? [
          ...new Set([
            ...runs.filter((r) => ended.has(r.id) && heldBack.has(r.dag_id)).map((r) => r.dag_id),
            ...step.heldBackEndedAhead,
          ]),
        ]
      : [];
  if (roomMade.length > 0) {
    // A run that ended made room in a DAG whose queued runs were held back: they start now, not
    // at the next tick. They are read after the ends were written, so their running counts
    // already leave the ended runs out.
    for (const d of roomMade) heldBack!.delete(d);
    const more = await readQueued(ctx, result, roomMade, new Set(), ctx.maxRunsPerStep);
    const fresh = new Set(roomMade);
    const byId = new Set(more.runs.map((r) => r.id));
    queued = [...queued.filter((r) => !fresh.has(r.dag_id) && !byId.has(r.id)), ...more.runs].sort((a, b) =>
      compareIds(a.id, b.id),
    );
    for (const d of roomMade) counts.delete(d);
    for (const r of more.runs) counts.set(r.dag_id, r.running_in_dag ?? 0);
    for (const id of byId) tisByRun.set(id, []);
    for (const ti of more.tis) tisByRun.get(ti.run_id)?.push(ti);
  }
  if (queued.length > 0) {
    const starting: DecidedRun[] = [];
    for (const run of queued) {
      const n = counts.get(run.dag_id) ?? 0;
      const blocked = run.dag_paused ? 'DAG_PAUSED' : n >= run.spec.maxActiveRuns ? 'MAX_ACTIVE_RUNS' : null;
      if (blocked) {
        if (blocked === 'MAX_ACTIVE_RUNS') ctx.heldBackDags?.add(run.dag_id);
        for (const ti of tisByRun.get(run.id) ?? []) if (ti.pending_reason !== blocked) reasons.set(ti.id, blocked);
        continue;
      }
      counts.set(run.dag_id, n + 1);
      await decide(run, true, starting);
    }
    await writeAndOffer(ctx, starting, reasons, result);
  }
}

/**
 * Writes the decided runs' moves (one statement, however many runs), ends the runs that are done
 * (one more), and offers what is scheduled. A write refused for one run is retried run by run
 * (`applyAll`), so it cannot hold up the others.
 */
async function writeAndOffer(
  ctx: SchedulerContext,
  decided: DecidedRun[],
  reasons: Map<string, string | null>,
  result: PlanResult,
): Promise<Set<string>> {
  if (decided.length === 0) return new Set();
  const ahead = claimWithTheMove(ctx, decided);
  const ending: { runId: string; epoch: string; outcome: 'success' | 'failed' }[] = [];
  try {
    const applied = await applyAll(
      ctx,
      decided.flatMap((d) => (d.plan ? [d.plan] : [])),
      result,
    );
    ahead.answered(applied.claims);
    decideOffers(ctx, decided, applied, reasons, result, ending);
    result.errors += await expandAndSettleMaps(ctx, decided, applied);
    if (applied.waits.size > 0) await lookBackForWaits(ctx, decided, applied.waits, result);
  } finally {
    ahead.done();
  }
  if (ending.length === 0) return new Set();
  try {
    const ended = await finalizeRuns(ctx.sql, ending);
    result.runsFinalized += ended.size;
    return ended;
  } catch (err) {
    result.errors++;
    ctx.counters.error('plan.finalize', err);
    return new Set();
  }
}

/** After the writes: what applied is offered (and remembered), what ends is listed in `ending`. */
function decideOffers(
  ctx: SchedulerContext,
  decided: DecidedRun[],
  applied: AppliedPlans,
  reasons: Map<string, string | null>,
  result: PlanResult,
  ending: { runId: string; epoch: string; outcome: 'success' | 'failed' }[],
): void {
  const offers: PendingOffer[] = [];
  for (const d of decided) {
    // A plan that did not apply (a clear since the read, or the write failed): the next step
    // decides again from a fresh read.
    if (d.plan && !applied.runs.has(d.run.id)) {
      ctx.memory?.forget([d.run.id]);
      // A start refused for max_active_runs at the write: the DAG's next run to end starts it.
      if (d.plan.start) ctx.heldBackDags?.add(d.run.dag_id);
      continue;
    }
    if (d.plan?.start) result.runsStarted++;
    result.runsAdvanced++;
    if (d.decision.nextRetryAt) ctx.wakeAt(d.decision.nextRetryAt);
    for (const [taskId, reason] of d.decision.reasons) {
      // A move clears the reason in the same write.
      const id = d.byTask.get(taskId)!.id;
      if (!applied.moved.has(id)) reasons.set(id, reason);
    }
    if (d.decision.outcome) {
      ending.push({ runId: d.run.id, epoch: d.run.plan_epoch, outcome: d.decision.outcome });
      ctx.memory?.forget([d.run.id]);
    } else {
      offers.push(...scheduledOffers(ctx, d, applied, reasons));
      if (ctx.memory) rememberDecided(ctx.memory, d, applied);
    }
  }
  result.offered += offerInOrder(ctx, offers, reasons);
}

/** All runs' writes in one statement; if the database refuses it (not a lost connection), run by
 *  run, so one run's bad write cannot stop every other run. */
async function applyAll(ctx: SchedulerContext, plans: RunPlan[], result: PlanResult): Promise<AppliedPlans> {
  const none: AppliedPlans = {
    runs: new Set(),
    started: new Set(),
    moved: new Set(),
    claims: new Map(),
    waits: new Set(),
  };
  if (plans.length === 0) return none;
  try {
    return await applyPlans(ctx.sql, plans);
  } catch (err) {
    if (isConnectionError(err) || plans.length === 1) {
      result.errors++;
      ctx.counters.error('plan.write', err, plans.length === 1 ? { runId: plans[0]!.runId } : {});
      return none;
    }
  }
  for (const p of plans) {
    try {
      const one = await applyPlans(ctx.sql, [p]);
      for (const id of one.runs) none.runs.add(id);
      for (const id of one.started) none.started.add(id);
      for (const id of one.moved) none.moved.add(id);
      for (const [id, c] of one.claims) none.claims.set(id, c);
      for (const id of one.waits) none.waits.add(id);
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.write', err, { runId: p.runId });
    }
  }
  return none;
}

/**
 * The oldest queued runs (of these DAGs, or of any; at most `limit`) and their task instances,
 * leaving out the runs in `skip` (already read). Two round trips: the task instances are read by
 * the ids of the runs read, so a run is never decided without its task instances. A failed read
 * is counted and reads as nothing: the tick starts those runs instead.
 */
async function readQueued(
  ctx: SchedulerContext,
  result: PlanResult,
  dags: string[] | 'any',
  skip: Set<string>,
  limit: number,
): Promise<{ runs: ActiveRun[]; tis: PlannerTi[] }> {
  try {
    const runs = (await activeRuns(ctx.sql, limit, { queuedOf: dags })).filter((r) => !skip.has(r.id));
    return {
      runs,
      tis: await listTisOfRuns(
        ctx.sql,
        runs.map((r) => r.id),
      ),
    };
  } catch (err) {
    result.errors++;
    ctx.counters.error('plan.read-queued', err);
    return { runs: [], tis: [] };
  }
}

/** Orders bigint ids kept as decimal strings (as `order by id` does). */
function compareIds(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}

/** Thrown by the pure part of advancing: the run itself is bad, not the database. */
class PoisonRunError extends Error {
  override readonly name = 'PoisonRunError';
}

/** Decides one run's moves in memory (no writes, except marking a run whose rules throw poisoned). */
async function decideOrPoison(
  ctx: SchedulerContext,
  run: ActiveRun,
  tis: PlannerTi[],
  start: boolean,
): Promise<DecidedRun> {
  try {
    return decideRun(run, tis, start, ctx.now(), mapRoom(ctx));
  } catch (err) {
    // A run that cannot be advanced would throw on every tick: mark it and move on.
    await poisonRun(ctx.sql, run.id, (err as Error).message);
    throw new PoisonRunError(`run ${run.id} poisoned: ${(err as Error).message}`, { cause: err });
  }
}
