import logUpdate from 'log-update';
import type { Run, TaskInstance } from '../gen/leoflow/v1/types_pb.js';
import type { Clients } from './client.js';
import { followRun } from './follow-run.js';
import { formatElapsed, runStateName, table, taskStateName } from './format.js';
import { paintState } from './paint-state.js';

const ENDED_TASK = new Set(['success', 'failed', 'upstream_failed', 'skipped', 'cancelled']);

/** The live view of a run in a terminal: a table of the tasks and a progress bar, redrawn in place. */
export function drawRun(r: Run, tis: TaskInstance[], columns: number): string {
  const ended = tis.filter((t) => ENDED_TASK.has(taskStateName(t.state))).length;
  const barWidth = Math.max(10, Math.min(40, columns - 30));
  const filled = tis.length === 0 ? 0 : Math.round((ended / tis.length) * barWidth);
  const bar = `[${'#'.repeat(filled)}${'-'.repeat(barWidth - filled)}] ${ended}/${tis.length} tasks ended`;
  const rows = tis.map((t) => [
    t.taskId,
    paintState(taskStateName(t.state)),
    t.tryNumber > 0 ? `${t.tryNumber}/${t.maxTries}` : '-',
    formatElapsed(t.startedAt, t.endedAt),
    t.pendingReason || (t.error && taskStateName(t.state) !== 'success' ? t.error : ''),
  ]);
  return (
    `run ${r.runId} of ${r.dagId}: ` +
    `${paintState(runStateName(r.state))}\n${bar}\n${table(['TASK', 'STATE', 'TRY', 'DURATION', 'WHY'], rows)}`
  );
}

/**
 * `run watch` (and `run trigger --wait`) at a terminal: the view drawn at once, redrawn at each
 * batch of the run's events and each second (running tasks' durations move with the clock), until
 * the run ends (with follow, until `signal`). Resolves the last state read.
 */
export async function watchRunLive(
  clients: Clients,
  runId: string,
  o: {
    afterSeq?: string;
    follow?: boolean;
    signal?: AbortSignal;
    first?: { run?: Run; taskInstances: TaskInstance[] };
  } = {},
): Promise<{ run: Run; tis: TaskInstance[] }> {
  let last = o.first ?? (await clients.workflow.getRun({ runId }));
  const draw = () => logUpdate(drawRun(last.run!, last.taskInstances, process.stdout.columns ?? 80));
  draw();
  const timer = setInterval(draw, 1_000);
  try {
    for await (const _batch of followRun(clients, runId, o)) {
      last = await clients.workflow.getRun({ runId });
      draw();
    }
    last = await clients.workflow.getRun({ runId });
    draw();
  } finally {
    clearInterval(timer);
    logUpdate.done();
  }
  return { run: last.run!, tis: last.taskInstances };
}
