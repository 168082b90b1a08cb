import { nextFireTime } from '../../core/schedule.js';
import { advanceNextRunAt, dueScheduledDags, type DagRow } from '../../db/dags.js';
import { createRun } from '../../db/runs.js';
import type { SchedulerContext } from '../context.js';

/** At most this many catch-up runs are created per DAG per step, so a long backlog can't stall a tick. */
const MAX_CATCHUP_PER_STEP = 50;

/**
 * Creates the runs of cron-scheduled DAGs that are due. With catchup, one run per missed fire
 * time (in batches); without, only the latest one. The DAG's next_run_at moves forward in the
 * same transaction, guarded by the value read, so two leaders can't both create the runs (and
 * the run key makes a duplicate collapse anyway).
 */
export async function createScheduledRuns(ctx: SchedulerContext): Promise<{ created: number }> {
  const now = ctx.now();
  let created = 0;
  for (const dag of await dueScheduledDags(ctx.sql, now)) {
    try {
      created += await createForDag(ctx, dag, now);
    } catch (err) {
      ctx.counters.error('plan.cron', err, { dagId: dag.dag_id });
    }
  }
  return { created };
}

async function createForDag(ctx: SchedulerContext, dag: DagRow, now: Date): Promise<number> {
  const schedule = dag.schedule!;
  const due: Date[] = [];
  let next = dag.next_run_at!;
  if (dag.catchup) {
    while (next.getTime() <= now.getTime() && due.length < MAX_CATCHUP_PER_STEP) {
      due.push(next);
      next = nextFireTime(schedule, dag.timezone, next);
    }
  } else {
    let latest = next;
    while (next.getTime() <= now.getTime()) {
      latest = next;
      next = nextFireTime(schedule, dag.timezone, next);
    }
    due.push(latest);
  }
  return ctx.sql.begin(async (tx) => {
    if (!(await advanceNextRunAt(tx, dag.dag_id, dag.next_run_at!, next))) return 0;
    let n = 0;
    for (const logicalDate of due) {
      const r = await createRun(tx, {
        dagId: dag.dag_id,
        dagVersion: dag.version,
        runKey: `scheduled__${logicalDate.toISOString()}`,
        runType: 'scheduled',
        logicalDate,
        conf: {},
        defaultExecutor: ctx.defaultExecutor,
      });
      if (r.created) n++;
    }
    return n;
  });
}
