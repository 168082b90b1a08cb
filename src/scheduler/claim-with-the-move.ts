import { specTaskId } from '../core/map-spec.js';
import type { TiMove } from '../db/plan/run-plan.js';
import type { ClaimCandidate, ClaimsAhead } from '../dispatch/dispatcher.js';
import type { SchedulerContext } from './context.js';
import type { DecidedRun } from './decide-run.js';

/**
 * Marks the moves to `scheduled` that the dispatcher takes at once to be claimed in the same
 * statement (`Dispatcher.claimAhead`): the attempt then starts without a claim of its own, one
 * round trip sooner. The caller tells the result how the write went and when the claims are
 * offered.
 */
export function claimWithTheMove(ctx: SchedulerContext, decided: DecidedRun[]): ClaimsAhead {
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
      const task = ti && tasks.get(specTaskId(ti.task_id));
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
