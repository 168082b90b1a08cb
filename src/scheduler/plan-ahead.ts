import { parseMappedTaskId } from '../core/map-spec.js';
import { isTerminalTi } from '../core/states.js';
import { applyPlansQuery, appliedFrom } from '../db/plan/apply-plans.js';
import { finalizeRunsQuery, type RunEnd } from '../db/plan/finalize-runs.js';
import type { AppliedPlans, RunPlan } from '../db/plan/run-plan.js';
import type { EndSent, EndsSentPort } from '../db/attempts/ends-sent-port.js';
import { isConnectionError } from '../db/is-connection-error.js';
import type { Sql } from '../db/sql.js';
import type { PlannerTi } from '../db/tis.js';
import type { ClaimsAhead } from '../dispatch/dispatcher.js';
import { claimWithTheMove } from './claim-with-the-move.js';
import type { SchedulerContext } from './context.js';
import { decideRun, type DecidedRun } from './decide-run.js';
import { offerInOrder, scheduledOffers, type PendingOffer } from './offer-scheduled.js';
import type { PlannerMemory, RunRead } from './planner-memory.js';
import { mapRoom } from './mapped-fast-path.js';
import { rememberDecided } from './remember-decided.js';

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
   * step that follows decides from that memory, now current (`PlannerMemory.takeCurrentReads`), and if
   * it does not, reads the run itself. No read is sent behind them: a whole run's read
   * behind every end would delay the next start of a chain.
   */
  plannedFromMemory: Set<string>;
}

/**
 * Registers on the report batcher's port what the leader sends behind every batch of ends it
 * writes (`planBehindEnds`). A replica that does not lead sends nothing; one that is stopping sends
 * only the reads (planning ahead is stepping, and a replica that is stopping plans nothing new).
 * Returns the function that deregisters it.
 */
export function registerPlanBehindEnds(
  port: EndsSentPort,
  ctx: SchedulerContext,
  when: { leading(): boolean; stopping(): boolean },
): () => void {
  return port.register((on, ends) => {
    if (!when.leading()) return null;
    if (when.stopping())
      return (
        ctx.memory?.readBehindEnds(
          on,
          ends.map((e) => e.tiId),
        ) ?? null
      );
    return planBehindEnds(ctx, on, ends);
  });
}

/**
 * What the leader sends behind the ends the report batcher writes, on the same connection: the
 * plans ahead of those ends, then the reads of their runs for the step that follows (none for a
 * run ended with its last attempt, or planned ahead from memory). Settles once all of it has
 * answered; null without a planner memory (nothing to plan from or keep reads in).
 */
export function planBehindEnds(ctx: SchedulerContext, on: Sql, ends: readonly EndSent[]): Promise<void> | null {
  const memory = ctx.memory;
  if (!memory) return null;
  const planned = planAhead(ctx, on, ends);
  const read = memory.readBehindEnds(
    on,
    ends.filter((e) => !planned.endingTis.has(e.tiId) && !planned.plannedFromMemory.has(e.tiId)).map((e) => e.tiId),
  );
  return planned.done ? Promise.all([planned.done, read]).then(() => {}) : read;
}

/** A run whose last task instances are among the ends: it is ended in their round trip. */
type EndingRun = RunEnd & { dagId: string };

/**
 * Plans the runs of attempts whose ends were just sent on `on` and sends the writes right behind
 * them: the next tasks are scheduled (and claimed, where no placement is needed) in the round trip
 * that records the ends, and a run whose last task instances these were ends in it too. Leader only.
 */
export function planAhead(
  ctx: SchedulerContext,
  on: Sql,
  ends: readonly { tiId: string; outcome: string }[],
): PlannedAhead {
  const endingTis = new Set<string>();
  const plannedFromMemory = new Set<string>();
  const memory = ctx.memory;
  if (!memory) return { done: null, endingTis, plannedFromMemory };
  // Every end makes its run's memory out of date until a plan that assumed it applies.
  const since = memory.noteEndsInFlight(ends.map((e) => e.tiId));
  const succeeded = new Map<string, Set<string>>();
  const reads = new Map<string, RunRead>();
  /** Runs with an end here that is not a success: their memory cannot become current. */
  const otherEnds = new Set<string>();
  collectSuccesses(memory, ends, reads, succeeded, otherEnds);
  const decided: DecidedRun[] = [];
  const ending: EndingRun[] = [];
  for (const [runId, read] of reads) {
    const ended = succeeded.get(runId)!;
    const planned = planRunAhead(ctx, read, ended, decided, ending);
    if (planned === 'ends') for (const id of ended) endingTis.add(id);
    // If the plan applies, the memory it leaves is current (markCurrent when it settles) and the
    // step that follows decides from it: these ends need no read of their run behind them.
    else if (planned === 'moves' && !otherEnds.has(runId)) for (const id of ended) plannedFromMemory.add(id);
  }
  if (decided.length === 0 && ending.length === 0) return { done: null, endingTis, plannedFromMemory };
  // These runs get no read behind their ends: one kept from before them must not be used either
  // (if the end does not apply, the step reads the run).
  if (ending.length > 0) memory.dropReads(ending.map((e) => e.runId));
  const ahead = claimWithTheMove(ctx, decided);
  // Sent now, before anything is awaited: right behind the ends on the wire.
  const sent =
    decided.length > 0
      ? applyPlansQuery(
          on,
          decided.map((d) => d.plan!),
        ).execute()
      : null;
  const endsSent = ending.length > 0 ? finalizeRunsQuery(on, ending).execute() : null;
  const done = (async () => {
    try {
      await Promise.all([
        settleMovesAhead(ctx, memory, { sent, decided, ahead, otherEnds, since }),
        settleEndsAhead(ctx, memory, endsSent, ending),
      ]);
    } finally {
      ahead.done();
    }
  })();
  return { done, endingTis, plannedFromMemory };
}

/**
 * Fills `reads` and `succeeded` with the runs to plan from what the planner last knew of them,
 * with these attempts ended in success, and `otherEnds` with runs that had any other end: only
 * successes are planned ahead (a failure's state depends on its tries), and only runs that go on
 * or end (a retry coming due, a paused DAG: the step that follows decides those).
 */
function collectSuccesses(
  memory: PlannerMemory,
  ends: readonly { tiId: string; outcome: string }[],
  reads: Map<string, RunRead>,
  succeeded: Map<string, Set<string>>,
  otherEnds: Set<string>,
): void {
  for (const e of ends) {
    const read = memory.ofTi(e.tiId);
    if (e.outcome !== 'success') {
      if (read) otherEnds.add(read.run.id);
      continue;
    }
    if (!read || read.run.state !== 'running' || read.run.dag_paused) continue;
    reads.set(read.run.id, read);
    (succeeded.get(read.run.id) ?? succeeded.set(read.run.id, new Set()).get(read.run.id)!).add(e.tiId);
  }
}

/**
 * Decides one run with its `ended` task instances assumed successes, and adds its end to `ending`
 * or its plan to `decided`: the caller learns which ('ends', 'moves'), or null when the step that
 * follows the ends must read and decide the run itself.
 */
function planRunAhead(
  ctx: SchedulerContext,
  read: RunRead,
  ended: Set<string>,
  decided: DecidedRun[],
  ending: EndingRun[],
): 'ends' | 'moves' | null {
  if (read.tis.some((t) => ended.has(t.id) && isTerminalTi(t.state))) return null; // not what was known: read it
  const tis = read.tis.map((t) => (ended.has(t.id) ? { ...t, state: 'success' as const } : t));
  let d: DecidedRun;
  try {
    d = decideRun(read.run, tis, false, ctx.now(), mapRoom(ctx));
  } catch {
    return null; // the step that follows reads the run, and poisons it
  }
  if (d.decision.outcome) {
    // Its last task instances ended: the run ends in this round trip too, if every state
    // assumed holds at the write (a run that still has moves to make is left to the step).
    if (d.plan && d.plan.moves.length > 0) return null;
    ending.push({
      runId: read.run.id,
      dagId: read.run.dag_id,
      epoch: read.run.plan_epoch,
      outcome: d.decision.outcome,
      expect: tis.map((t) => ({ tiId: t.id, state: t.state })),
    });
    return 'ends';
  }
  // A mapped task's expansion and end are the step's (expand-mapped.ts), from a read.
  if (!d.plan || d.decision.expand.length > 0 || d.decision.settle.length > 0) return null;
  if (!keepMovesPlannedAhead(d, d.plan)) return null;
  d.plan.expect = expectedUpstreamStates(d, read, ended);
  decided.push(d);
  return 'moves';
}

/**
 * Drops from a decided run the moves only a step makes, and says whether any are left: a retry's
 * backoff is read, never assumed, and a wait's start (and its look back for events) is the step's.
 */
function keepMovesPlannedAhead(d: DecidedRun, plan: RunPlan): boolean {
  const retrying = new Set(d.decision.retry.map((id) => d.byTask.get(id)!.id));
  plan.moves = plan.moves.filter((m) => !retrying.has(m.tiId) && m.to !== 'waiting');
  d.decision.retry = [];
  d.decision.wait = [];
  return plan.moves.length > 0;
}

/**
 * Every upstream state the plan's moves assumed (a run's end, every TI's state), so that the
 * database applies none of it unless each holds at the write, the ends just recorded included
 * (db/plan/apply-plans.ts, finalize-runs.ts): a plan from an out-of-date memory, or behind an end
 * that was refused, writes nothing, and the step that follows reads the run as always.
 */
function expectedUpstreamStates(d: DecidedRun, read: RunRead, ended: Set<string>): NonNullable<RunPlan['expect']> {
  const spec = new Map(read.run.spec.tasks.map((t) => [t.id, t]));
  const expect = new Map<string, PlannerTi['state'] | 'active'>();
  for (const taskId of [...d.decision.schedule, ...d.decision.upstreamFailed, ...d.decision.skipped]) {
    const mapped = parseMappedTaskId(taskId);
    // A mapped instance runs once its task expanded, which waits on it until all of them are done;
    // the room max_parallel left it was counted with these ends done (one refused spoils the plan).
    if (mapped) {
      expect.set(d.byTask.get(mapped.task)!.id, 'waiting');
      for (const id of ended) expect.set(id, 'success');
    } else
      for (const dep of spec.get(taskId)!.dependsOn) {
        const up = d.byTask.get(dep)!;
        expect.set(up.id, isTerminalTi(up.state) ? up.state : 'active');
      }
  }
  return [...expect].map(([tiId, state]) => ({ tiId, state }));
}

/**
 * Once the plans' answer is in: the claims made with the moves are told how the write went, the
 * runs whose plan applied are remembered (and current, without another end) and their scheduled
 * task instances offered; a run whose plan did not apply is forgotten, for the step to read.
 */
async function settleMovesAhead(
  ctx: SchedulerContext,
  memory: PlannerMemory,
  o: {
    sent: ReturnType<typeof applyPlansQuery> | null;
    decided: DecidedRun[];
    ahead: ClaimsAhead;
    otherEnds: Set<string>;
    since: number;
  },
): Promise<void> {
  if (!o.sent) return;
  let applied: AppliedPlans;
  try {
    applied = appliedFrom(await o.sent);
  } catch (err) {
    // Nothing applied (one statement): the step that follows the ends plans these runs.
    o.ahead.answered(new Map());
    memory.forget(o.decided.map((d) => d.run.id));
    if (!isConnectionError(err)) ctx.counters.error('plan.ahead', err);
    return;
  }
  o.ahead.answered(applied.claims);
  const reasons = new Map<string, string | null>();
  const offers: PendingOffer[] = [];
  for (const d of o.decided) {
    if (!applied.runs.has(d.run.id)) {
      memory.forget([d.run.id]);
      continue;
    }
    offers.push(...scheduledOffers(ctx, d, applied, reasons));
    rememberDecided(memory, d, applied);
    if (!o.otherEnds.has(d.run.id)) memory.markCurrent(d.run.id, o.since);
  }
  offerInOrder(ctx, offers, reasons);
  // A refused offer's reason is left to the step that follows the ends (it offers again).
}

/**
 * Once the runs' ends are answered: a run ended here is remembered as ended ahead, one not ended
 * (an assumption that did not hold) is forgotten, for the step to read and decide.
 */
async function settleEndsAhead(
  ctx: SchedulerContext,
  memory: PlannerMemory,
  endsSent: ReturnType<typeof finalizeRunsQuery> | null,
  ending: EndingRun[],
): Promise<void> {
  if (!endsSent) return;
  let done: Set<string>;
  try {
    done = new Set((await endsSent).map((r) => r.id));
  } catch (err) {
    done = new Set();
    if (!isConnectionError(err)) ctx.counters.error('plan.ahead', err);
  }
  for (const e of ending) {
    if (done.has(e.runId)) memory.recordEndedAhead(e.runId, e.dagId);
    else memory.forget([e.runId]);
  }
}
