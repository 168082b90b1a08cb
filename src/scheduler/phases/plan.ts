import { advanceRun, type RunDecision, type TiView } from '../../core/advance-run.js';
import { isTerminalTi } from '../../core/states.js';
import { applyPlans, applyPlansQuery, appliedFrom, finalizeRuns, finalizeRunsQuery, type AppliedPlans, type RunEnd, type RunPlan, type TiMove } from '../../db/apply-plan.js';
import { isConnectionError } from '../../db/is-connection-error.js';
import { activeRuns, poisonRun, type ActiveRunRow } from '../../db/runs.js';
import type { Sql } from '../../db/sql.js';
import { listTisOfRuns, setPendingReasons, type TiRow } from '../../db/tis.js';
import type { WorkItem } from '../../core/work-item.js';
import type { ClaimCandidate, ClaimsAhead } from '../../dispatch/dispatcher.js';
import type { SchedulerContext } from '../context.js';
import type { PrefetchedRuns, RunRead } from '../prefetched-runs.js';
import { createScheduledRuns } from './create-scheduled-runs.js';

export interface PlanResult {
  runsCreated: number;
  runsStarted: number;
  runsAdvanced: number;
  runsFinalized: number;
  offered: number;
  errors: number;
}

type ActiveRun = ActiveRunRow;

/** A run decided in this step, waiting for its writes. */
interface Decided {
  run: ActiveRun;
  tis: TiRow[];
  byTask: Map<string, TiRow>;
  decision: RunDecision;
  plan: RunPlan | null;
}

/**
 * Phase 1: create due cron runs, start queued runs within max_active_runs, advance running runs
 * by their trigger rules, finalize runs whose task instances are all terminal, and offer
 * scheduled task instances to the dispatch pool.
 *
 * Every run is decided in memory from one read, and the writes of all runs go out together: one
 * statement for the moves (and run starts), one for the runs that end, one for changed pending
 * reasons, however many runs there are. A run's decision that throws poisons that run only; a
 * write refused by the database for one run is retried run by run so it cannot hold up the others.
 * With `runIds` (a targeted step: these runs were nudged) only those runs are read, with `queued`
 * the oldest queued runs too. Without them, the step reads the oldest running runs and the oldest
 * queued runs, `maxRunsPerStep` in all but at least one queued run.
 */
export async function plan(ctx: SchedulerContext, opts: { cron: boolean; runIds?: string[] | null; queued?: number } = { cron: true }): Promise<PlanResult> {
  const result: PlanResult = { runsCreated: 0, runsStarted: 0, runsAdvanced: 0, runsFinalized: 0, offered: 0, errors: 0 };
  if (opts.cron) {
    try {
      result.runsCreated = (await createScheduledRuns(ctx)).created;
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.cron', err);
    }
  }

  // A targeted step: these runs and, with `queued`, the oldest queued runs; else every run.
  let targeted = opts.runIds || opts.queued ? (opts.runIds ?? []) : null;
  // Runs ended in the round trip of their last attempt's end have nothing left to read or decide;
  // only the room they made in a DAG whose queued runs were held back counts (below).
  const endedAhead = targeted ? (ctx.known?.takeEnded(targeted) ?? new Map<string, string>()) : new Map<string, string>();
  if (endedAhead.size > 0) {
    targeted = targeted!.filter((id) => !endedAhead.has(id));
    result.runsFinalized += endedAhead.size;
  }
  const heldBackEndedAhead = [...new Set(endedAhead.values())].filter((d) => ctx.heldBackDags?.has(d));
  if (targeted && targeted.length === 0 && !opts.queued && heldBackEndedAhead.length === 0) return result;
  let runs: ActiveRun[];
  let tiRows: TiRow[];
  let freshened: Promise<void> | undefined;
  if (targeted) {
    // Runs read right behind the ends of their attempts need no read of their own; for the rest
    // the ids are known, so both reads go out at once.
    const ahead = ctx.prefetched?.take(targeted) ?? new Map<string, RunRead>();
    // Runs whose plan ahead applied are decided from the planner's memory of them, now current.
    for (const [id, read] of ctx.known?.takeCurrent(targeted.filter((id) => !ahead.has(id))) ?? []) ahead.set(id, read);
    const rest = ahead.size === 0 ? targeted : targeted.filter((id) => !ahead.has(id));
    // A step that reads runs, or starts one, reads along with them what the agents executor
    // places from if it is getting old, so agent work can be claimed with its move (a step that
    // only goes on with runs read behind their ends does not wait for it).
    if (rest.length > 0 || opts.queued || [...ahead.values()].some((r) => r.run.state === 'queued')) freshened = ctx.dispatcher.freshenPlacement();
    [runs, tiRows] = rest.length === 0 ? [[], []] : await Promise.all([activeRuns(ctx.sql, ctx.maxRunsPerStep, { runIds: rest }), listTisOfRuns(ctx.sql, rest)]);
    for (const { run, tis } of ahead.values()) {
      runs.push(run);
      tiRows.push(...tis);
    }
    if (opts.queued) {
      // As many as the dispatch pool takes now, and at least as many as were asked for.
      const room = Math.min(ctx.maxRunsPerStep, Math.max(opts.queued, ctx.dispatcher.room()));
      const more = room > 0 ? await readQueued(ctx, result, 'any', new Set(runs.map((r) => r.id)), room) : { runs: [], tis: [] };
      runs.push(...more.runs);
      tiRows.push(...more.tis);
    }
    runs.sort((a, b) => compareIds(a.id, b.id));
  } else {
    // Everything is read now: reads kept from before are older than this one.
    ctx.prefetched?.clear();
    freshened = ctx.dispatcher.freshenPlacement();
    // The oldest running runs, then the oldest queued runs up to `maxRunsPerStep` active runs in
    // all, but always at least one: a queued run (a cron run, say) makes progress however many
    // older runs are running, and a backlog starts no faster than runs end.
    const running = await activeRuns(ctx.sql, ctx.maxRunsPerStep, { running: true });
    const queued = await activeRuns(ctx.sql, Math.max(1, ctx.maxRunsPerStep - running.length), { queuedOf: 'any' });
    runs = [...running, ...queued].sort((a, b) => compareIds(a.id, b.id));
    tiRows = runs.length === 0 ? [] : await listTisOfRuns(ctx.sql, runs.map((r) => r.id));
  }
  await freshened;
  if (runs.length === 0 && heldBackEndedAhead.length === 0) return result;
  const tisByRun = new Map<string, TiRow[]>();
  for (const ti of tiRows) (tisByRun.get(ti.run_id) ?? tisByRun.set(ti.run_id, []).get(ti.run_id)!).push(ti);
  const reasons = new Map<string, string | null>();

  const decide = async (run: ActiveRun, start: boolean, into: Decided[]) => {
    try {
      into.push(await decideRun(ctx, run, tisByRun.get(run.id) ?? [], start));
    } catch (err) {
      result.errors++;
      ctx.counters.error('plan.advance', err, { runId: run.id, dagId: run.dag_id });
      ctx.known?.forget([run.id]);
    }
  };

  // Running runs first, so a run that ends in this step frees its max_active_runs slot for a
  // queued run of the same DAG in this same step.
  const running: Decided[] = [];
  for (const run of runs) if (run.state === 'running') await decide(run, false, running);
  const ended = await writeAndOffer(ctx, running, reasons, result);

  // Then queued runs, oldest first, while their DAG has room, advanced at once.
  let queued = runs.filter((r) => r.state === 'queued');
  // Running runs per DAG as read with the runs, less those that ended in this step.
  const counts = new Map<string, number>();
  for (const r of queued) counts.set(r.dag_id, r.running_in_dag ?? 0);
  for (const r of runs) if (ended.has(r.id) && counts.has(r.dag_id)) counts.set(r.dag_id, counts.get(r.dag_id)! - 1);
  const heldBack = ctx.heldBackDags;
  const roomMade = targeted && heldBack ? [...new Set([...runs.filter((r) => ended.has(r.id) && heldBack.has(r.dag_id)).map((r) => r.dag_id), ...heldBackEndedAhead])] : [];
  if (roomMade.length > 0) {
    // A run that ended made room in a DAG whose queued runs were held back: they start now, not
    // at the next tick. They are read after the ends were written, so their running counts
    // already leave the ended runs out.
    for (const d of roomMade) heldBack!.delete(d);
    const more = await readQueued(ctx, result, roomMade, new Set(), ctx.maxRunsPerStep);
    const fresh = new Set(roomMade);
    const byId = new Set(more.runs.map((r) => r.id));
    queued = [...queued.filter((r) => !fresh.has(r.dag_id) && !byId.has(r.id)), ...more.runs].sort((a, b) => compareIds(a.id, b.id));
    for (const d of roomMade) counts.delete(d);
    for (const r of more.runs) counts.set(r.dag_id, r.running_in_dag ?? 0);
    for (const id of byId) tisByRun.set(id, []);
    for (const ti of more.tis) tisByRun.get(ti.run_id)?.push(ti);
  }
  if (queued.length > 0) {
    const starting: Decided[] = [];
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

  try {
    await setPendingReasons(ctx.sql, reasons);
    // So that a step deciding from memory does not write them again.
    ctx.known?.noteReasons(reasons);
  } catch (err) {
    result.errors++;
    ctx.counters.error('plan.reasons', err);
  }
  return result;
}

/** Writes the decided runs' moves (one statement), ends the runs that are done (one more), and
 *  offers what is scheduled. */
async function writeAndOffer(ctx: SchedulerContext, decided: Decided[], reasons: Map<string, string | null>, result: PlanResult): Promise<Set<string>> {
  if (decided.length === 0) return new Set();
  const ahead = claimWithTheMove(ctx, decided);
  const ending: { runId: string; epoch: string; outcome: 'success' | 'failed' }[] = [];
  try {
    const applied = await applyAll(ctx, decided.flatMap((d) => (d.plan ? [d.plan] : [])), result);
    ahead.answered(applied.claims);
    decideOffers(ctx, decided, applied, reasons, result, ending);
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
  decided: Decided[],
  applied: AppliedPlans,
  reasons: Map<string, string | null>,
  result: PlanResult,
  ending: { runId: string; epoch: string; outcome: 'success' | 'failed' }[],
): void {
  for (const d of decided) {
    // A plan that did not apply (a clear since the read, or the write failed): the next step
    // decides again from a fresh read.
    if (d.plan && !applied.runs.has(d.run.id)) {
      ctx.known?.forget([d.run.id]);
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
      ctx.known?.forget([d.run.id]);
    } else {
      result.offered += offerScheduled(ctx, d, applied, reasons);
      rememberAfter(ctx, d, applied);
    }
  }
}

/** Keeps what the planner now knows of a run it decided: as read, with the moves that applied. */
function rememberAfter(ctx: SchedulerContext, d: Decided, applied: AppliedPlans): void {
  if (!ctx.known) return;
  if (d.run.dag_paused) return ctx.known.forget([d.run.id]);
  const to = new Map<string, TiRow['state']>();
  for (const m of d.plan?.moves ?? []) if (applied.moved.has(m.tiId)) to.set(m.tiId, applied.claims.has(m.tiId) ? 'queued' : m.to);
  ctx.known.remember({
    run: applied.started.has(d.run.id) ? { ...d.run, state: 'running' } : d.run,
    tis: d.tis.map((t) => (to.has(t.id) ? { ...t, state: to.get(t.id)!, pending_reason: null } : t)),
  });
}

/**
 * Plans the runs of attempts whose ends were just sent on `on` and are not answered yet, and sends
 * the writes on `on` right behind them: the next tasks are scheduled (and, for an executor that
 * needs no placement, claimed) in the round trip that records the ends, instead of one round trip
 * after it, and a run whose last task instances these were ends in it too. Leader only.
 *
 * A run is planned from what the planner last knew of it (`ctx.known`), with these attempts
 * ended in success: only successes are planned ahead (a failure's state depends on its tries),
 * and only runs that go on or end (a retry coming due, a paused DAG: the step that follows the
 * ends decides those as before). A plan states every upstream state its moves assumed, and a
 * run's end every task instance's state; the database applies none of it unless each holds at
 * the write, the ends just recorded included (apply-plan.ts): a plan from an out-of-date memory,
 * or after an end that was refused, writes nothing, and the step that follows the ends reads the
 * run as always. A run ended here is not read again (`endingTis`, `KnownRuns.endedAhead`).
 */
export function planAhead(ctx: SchedulerContext, on: Sql, ends: readonly { tiId: string; outcome: string }[]): PlannedAhead {
  const endingTis = new Set<string>();
  const readless = new Set<string>();
  const known = ctx.known;
  if (!known) return { done: null, endingTis, readless };
  // Every end makes its run's memory out of date until a plan that assumed it applies.
  for (const e of ends) known.stale(e.tiId);
  const since = known.now();
  const succeeded = new Map<string, Set<string>>();
  const reads = new Map<string, RunRead>();
  /** Runs with an end here that is not a success: their memory cannot become current. */
  const otherEnds = new Set<string>();
  for (const e of ends) {
    const read = known.ofTi(e.tiId);
    if (e.outcome !== 'success') {
      if (read) otherEnds.add(read.run.id);
      continue;
    }
    if (!read || read.run.state !== 'running' || read.run.dag_paused) continue;
    reads.set(read.run.id, read);
    (succeeded.get(read.run.id) ?? succeeded.set(read.run.id, new Set()).get(read.run.id)!).add(e.tiId);
  }
  const decided: Decided[] = [];
  const ending: (RunEnd & { dagId: string })[] = [];
  for (const [runId, read] of reads) {
    const ended = succeeded.get(runId)!;
    if (read.tis.some((t) => ended.has(t.id) && isTerminalTi(t.state))) continue; // not what was known: read it
    const tis = read.tis.map((t) => (ended.has(t.id) ? { ...t, state: 'success' as const } : t));
    let d: Decided;
    try {
      d = decideFrom(read.run, tis, false, ctx.now());
    } catch {
      continue; // the step that follows reads the run, and poisons it
    }
    if (d.decision.outcome) {
      // Its last task instances ended: the run ends in this round trip too, if every state
      // assumed holds at the write (a run that still has moves to make is left to the step).
      if (d.plan && d.plan.moves.length > 0) continue;
      ending.push({ runId, dagId: read.run.dag_id, epoch: read.run.plan_epoch, outcome: d.decision.outcome, expect: tis.map((t) => ({ tiId: t.id, state: t.state })) });
      for (const id of ended) endingTis.add(id);
      continue;
    }
    if (!d.plan) continue;
    // A retry's backoff is read, never assumed.
    const retrying = new Set(d.decision.retry.map((id) => d.byTask.get(id)!.id));
    d.plan.moves = d.plan.moves.filter((m) => !retrying.has(m.tiId));
    d.decision.retry = [];
    if (d.plan.moves.length === 0) continue;
    const spec = new Map(read.run.spec.tasks.map((t) => [t.id, t]));
    const expect = new Map<string, TiRow['state'] | 'active'>();
    for (const taskId of [...d.decision.schedule, ...d.decision.upstreamFailed, ...d.decision.skipped]) {
      for (const dep of spec.get(taskId)!.dependsOn) {
        const up = d.byTask.get(dep)!;
        expect.set(up.id, isTerminalTi(up.state) ? up.state : 'active');
      }
    }
    d.plan.expect = [...expect].map(([tiId, state]) => ({ tiId, state }));
    decided.push(d);
    // If the plan applies, the memory it leaves is current (markCurrent below) and the step that
    // follows decides from it: these ends need no read of their run behind them.
    if (!otherEnds.has(runId)) for (const id of ended) readless.add(id);
  }
  if (decided.length === 0 && ending.length === 0) return { done: null, endingTis, readless };
  // These runs get no read behind their ends: one kept from before them must not be used either
  // (if the end does not apply, the step reads the run).
  if (ending.length > 0) ctx.prefetched?.changed(ending.map((e) => e.runId));
  const ahead = claimWithTheMove(ctx, decided);
  // Sent now, before anything is awaited: right behind the ends on the wire.
  const sent = decided.length > 0 ? applyPlansQuery(on, decided.map((d) => d.plan!)).execute() : null;
  const endsSent = ending.length > 0 ? finalizeRunsQuery(on, ending).execute() : null;

  const settleMoves = async () => {
    if (!sent) return;
    let applied: AppliedPlans;
    try {
      applied = appliedFrom(await sent);
    } catch (err) {
      // Nothing applied (one statement): the step that follows the ends plans these runs.
      ahead.answered(new Map());
      known.forget(decided.map((d) => d.run.id));
      if (!isConnectionError(err)) ctx.counters.error('plan.ahead', err);
      return;
    }
    ahead.answered(applied.claims);
    const reasons = new Map<string, string | null>();
    for (const d of decided) {
      if (!applied.runs.has(d.run.id)) {
        known.forget([d.run.id]);
        continue;
      }
      offerScheduled(ctx, d, applied, reasons);
      rememberAfter(ctx, d, applied);
      if (!otherEnds.has(d.run.id)) known.markCurrent(d.run.id, since);
    }
    // A refused offer's reason is left to the step that follows the ends (it offers again).
  };

  const settleEnds = async () => {
    if (!endsSent) return;
    let done: Set<string>;
    try {
      done = new Set((await endsSent).map((r) => r.id));
    } catch (err) {
      done = new Set();
      if (!isConnectionError(err)) ctx.counters.error('plan.ahead', err);
    }
    // A run not ended here (an assumption that did not hold) is read and decided by the step.
    for (const e of ending) {
      if (done.has(e.runId)) known.endedAhead(e.runId, e.dagId);
      else known.forget([e.runId]);
    }
  };

  const done = (async () => {
    try {
      await Promise.all([settleMoves(), settleEnds()]);
    } finally {
      ahead.done();
    }
  })();
  return { done, endingTis, readless };
}

/**
 * What the leader sends behind the ends the report batcher writes, on the same connection: the
 * plans ahead of those ends, then the reads of their runs for the step that follows (none for a
 * run ended with its last attempt). Settles once all of it has answered.
 */
export function sendBehindEnds(ctx: SchedulerContext, prefetched: PrefetchedRuns, on: Sql, ends: readonly { tiId: string; outcome: string }[]): Promise<void> {
  const planned = planAhead(ctx, on, ends);
  const read = prefetched.readAfter(on, ends.filter((e) => !planned.endingTis.has(e.tiId) && !planned.readless.has(e.tiId)).map((e) => e.tiId));
  return planned.done ? Promise.all([planned.done, read]).then(() => {}) : read;
}

/** What `planAhead` sent behind the ends. */
export interface PlannedAhead {
  /** Settles once its answers are in (never rejects); null when nothing was sent. */
  done: Promise<void> | null;
  /**
   * The ended task instances whose runs were ended with them (if the states assumed hold): the
   * step that follows has nothing to read for them.
   */
  endingTis: Set<string>;
  /**
   * The ended task instances whose runs were planned ahead from memory: if the plan applies, the
   * step that follows decides from that memory, now current (`KnownRuns.takeCurrent`), and if it
   * does not, reads the run itself. No read is sent behind them: a whole run's read behind every
   * end would delay the next start of a chain.
   */
  readless: Set<string>;
}

/**
 * Marks the moves to `scheduled` that the dispatcher takes at once to be claimed in the same
 * statement (`Dispatcher.claimAhead`): the attempt then starts without a claim of its own, one
 * round trip sooner. The caller tells the result how the write went and when the claims are
 * offered.
 */
function claimWithTheMove(ctx: SchedulerContext, decided: Decided[]): ClaimsAhead {
  const candidates: ClaimCandidate[] = [];
  const moves = new Map<string, TiMove>();
  const waiting = new Map<string, number>();
  for (const d of decided) {
    if (d.run.dag_paused) continue;
    const byId = new Map(d.tis.map((t) => [t.id, t]));
    const tasks = new Map(d.run.spec.tasks.map((t) => [t.id, t]));
    for (const t of d.tis) if (t.state === 'scheduled') waiting.set(t.executor, (waiting.get(t.executor) ?? 0) + 1);
    for (const m of d.plan?.moves ?? []) {
      const ti = byId.get(m.tiId);
      const task = ti && tasks.get(ti.task_id);
      if (m.to !== 'scheduled' || !ti || !task) continue;
      candidates.push({ tiId: m.tiId, executor: ti.executor, task });
      moves.set(m.tiId, m);
    }
  }
  const ahead = ctx.dispatcher.claimAhead(candidates, waiting);
  for (const [tiId, c] of ahead.claims) {
    const move = moves.get(tiId)!;
    move.claimFor = c.executor;
    if (c.agentId) move.agentId = c.agentId;
  }
  return ahead;
}

/** All runs' writes in one statement; if the database refuses it (not a lost connection), run by
 *  run, so one run's bad write cannot stop every other run. */
async function applyAll(ctx: SchedulerContext, plans: RunPlan[], result: PlanResult): Promise<AppliedPlans> {
  const none: AppliedPlans = { runs: new Set(), started: new Set(), moved: new Set(), claims: new Map() };
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
async function readQueued(ctx: SchedulerContext, result: PlanResult, dags: string[] | 'any', skip: Set<string>, limit: number): Promise<{ runs: ActiveRun[]; tis: TiRow[] }> {
  try {
    const runs = (await activeRuns(ctx.sql, limit, { queuedOf: dags })).filter((r) => !skip.has(r.id));
    return { runs, tis: await listTisOfRuns(ctx.sql, runs.map((r) => r.id)) };
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

/** Reasons the planner itself sets; those of a dispatcher (e.g. NO_AGENT_WITH_LABELS) are left alone. */
function isPlannerReason(reason: string | null): boolean {
  return reason !== null && (['DISPATCH_QUEUE_FULL', 'DAG_PAUSED', 'MAX_ACTIVE_RUNS', 'RUN_QUEUED', 'UPSTREAM_RUNNING'].includes(reason) || reason.startsWith('NO_EXECUTOR:'));
}

/** Thrown by the pure part of advancing: the run itself is bad, not the database. */
class PoisonRunError extends Error {
  override readonly name = 'PoisonRunError';
}

/** Decides one run's moves in memory (no writes, except marking a run whose rules throw). */
async function decideRun(ctx: SchedulerContext, run: ActiveRun, tis: TiRow[], start: boolean): Promise<Decided> {
  try {
    return decideFrom(run, tis, start, ctx.now());
  } catch (err) {
    // A run that cannot be advanced would throw on every tick: mark it and move on.
    await poisonRun(ctx.sql, run.id, (err as Error).message);
    throw new PoisonRunError(`run ${run.id} poisoned: ${(err as Error).message}`, { cause: err });
  }
}

/** Decides one run's moves in memory; throws when the run's rules cannot be applied. */
function decideFrom(run: ActiveRun, tis: TiRow[], start: boolean, now: Date): Decided {
  const views = new Map<string, TiView>(
    tis.map((ti) => [ti.task_id, { state: ti.state, nextTryAt: ti.next_try_at, pendingReason: ti.pending_reason }]),
  );
  const decision: RunDecision = advanceRun(run.spec.tasks, views, now);
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
  const move = (taskIds: string[], from: TiMove['from'], to: TiMove['to']): TiMove[] => taskIds.map((id) => ({ tiId: byTask.get(id)!.id, from, to }));
  const moves = [
    ...move(decision.schedule, 'none', 'scheduled'),
    ...move(decision.retry, 'up_for_retry', 'scheduled'),
    ...move(decision.upstreamFailed, 'none', 'upstream_failed'),
    ...move(decision.skipped, 'none', 'skipped'),
  ];
  const plan = start || moves.length > 0 ? { runId: run.id, epoch: run.plan_epoch, start, moves } : null;
  return { run, tis, byTask, decision, plan };
}

/** Offers every scheduled TI of a run: the ones just scheduled and those a full queue refused
 *  before. Returns how many the pool accepted. */
function offerScheduled(ctx: SchedulerContext, d: Decided, applied: AppliedPlans, reasons: Map<string, string | null>): number {
  const { run, tis, byTask } = d;
  if (run.dag_paused) {
    for (const ti of tis) if (ti.state === 'scheduled' && ti.pending_reason !== 'DAG_PAUSED') reasons.set(ti.id, 'DAG_PAUSED');
    return 0;
  }
  const justScheduled = new Set<string>();
  for (const taskId of [...d.decision.schedule, ...d.decision.retry]) if (applied.moved.has(byTask.get(taskId)!.id)) justScheduled.add(taskId);
  const scheduled = new Set(justScheduled);
  for (const ti of tis) if (ti.state === 'scheduled') scheduled.add(ti.task_id);
  let offered = 0;
  const tasks = new Map(run.spec.tasks.map((t) => [t.id, t]));
  for (const taskId of scheduled) {
    const ti = byTask.get(taskId)!;
    if (!ctx.dispatcher.executors.has(ti.executor)) {
      const reason = `NO_EXECUTOR:${ti.executor}`;
      if (ti.pending_reason !== reason) reasons.set(ti.id, reason);
      continue;
    }
    const item: WorkItem = {
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
      claim: justScheduled.has(taskId) ? applied.claims.get(ti.id) : undefined,
    };
    const outcome = ctx.dispatcher.offer(item);
    if (outcome === 'accepted') offered++;
    // A full queue says so; an accepted offer clears only that reason (a dispatcher may set its
    // own, e.g. NO_AGENT_WITH_LABELS, which must not flap every step).
    if (outcome === 'full' && ti.pending_reason !== 'DISPATCH_QUEUE_FULL') reasons.set(ti.id, 'DISPATCH_QUEUE_FULL');
    if (outcome === 'accepted' && isPlannerReason(ti.pending_reason) && !justScheduled.has(taskId)) reasons.set(ti.id, null);
  }
  return offered;
}
