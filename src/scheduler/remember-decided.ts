import type { AppliedPlans } from '../db/plan/run-plan.js';
import type { PlannerTi } from '../db/tis.js';
import type { DecidedRun } from './decide-run.js';
import { mappedMemory } from './mapped-fast-path.js';
import type { PlannerMemory } from './planner-memory.js';

/**
 * Remembers a run the planner decided and wrote, as it now knows it: as read, with the moves that
 * applied (a move claimed with it is `queued`) and the run started if its start applied. A run of
 * a paused DAG is forgotten instead: nothing is planned ahead of its ends; so is a run whose mapped
 * instances the memory cannot follow (mapped-fast-path.ts).
 */
export function rememberDecided(memory: PlannerMemory, d: DecidedRun, applied: AppliedPlans): void {
  if (d.run.dag_paused) return memory.forget([d.run.id]);
  const to = new Map<string, PlannerTi['state']>();
  for (const m of d.plan?.moves ?? [])
    if (applied.moved.has(m.tiId)) to.set(m.tiId, applied.claims.has(m.tiId) ? 'queued' : m.to);
  // A run with mapped tasks is kept as a read would give it, if the memory knows what is next.
  const tis = mappedMemory(
    d.run,
    d.tis.map((t) => (to.has(t.id) ? { ...t, state: to.get(t.id)!, pending_reason: null } : t)),
  );
  if (!tis) return memory.forget([d.run.id]);
  memory.remember({ run: applied.started.has(d.run.id) ? { ...d.run, state: 'running' } : d.run, tis });
}
