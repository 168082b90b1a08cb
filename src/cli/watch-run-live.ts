import logUpdate from 'log-update';
import type { Run, TaskInstance } from '../gen/leoflow/v1/types_pb.js';
import type { Clients } from './client.js';
import { followRun } from './follow-run.js';
import { formatElapsed, runStateName, table, taskStateName } from './format.js';
import { groupMapped, mappedSummary } from './group-mapped.js';
import { paintState } from './paint-state.js';
import { countByState, readRunPages } from './run-pages.js';

const ENDED_TASK = new Set(['success', 'failed', 'upstream_failed', 'skipped', 'cancelled']);

/** The live view of a run in a terminal: a table of the tasks and a progress bar, redrawn in place. */
export function drawRun(r: Run, tis: TaskInstance[], columns: number): string {
  const counts = countByState(tis, (t) => taskStateName(t.state));
  let total = 0;
  let ended = 0;
  for (const [s, n] of counts) {
    total += n;
    if (ENDED_TASK.has(s)) ended += n;
  }
  const barWidth = Math.max(10, Math.min(40, columns - 30));
  const filled = total === 0 ? 0 : Math.round((ended / total) * barWidth);
  const bar = `[${'#'.repeat(filled)}${'-'.repeat(barWidth - filled)}] ${ended}/${total} tasks ended`;
  // A mapped task's instances as one row, counted by its own instance (`run show` does the same).
  const own = new Map(tis.map((t) => [t.taskId, t]));
  const rows = groupMapped(tis, (t) => taskStateName(t.state)).map((g) => {
    if (g.kind === 'mapped') {
      const m = mappedSummary(g, own.get(g.task));
      return [m.name, m.states, '', '', ''];
    }
    const t = g.ti;
    return [
      t.taskId,
      paintState(taskStateName(t.state)),
      t.tryNumber > 0 ? `${t.tryNumber}/${t.maxTries}` : '-',
      formatElapsed(t.startedAt, t.endedAt),
      t.pendingReason || (t.error && taskStateName(t.state) !== 'success' ? t.error : ''),
    ];
  });
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
  // The pages up to the run's own task instances: a map's instances are counted, not listed.
  const read = () => readRunPages(clients, runId, { all: false });
  let last = o.first?.run ? { run: o.first.run, tis: o.first.taskInstances } : await read();
  const draw = () => logUpdate(drawRun(last.run, last.tis, process.stdout.columns ?? 80));
  draw();
  const timer = setInterval(draw, 1_000);
  try {
    for await (const _batch of followRun(clients, runId, o)) {
      last = await read();
      draw();
    }
    last = await read();
    draw();
  } finally {
    clearInterval(timer);
    logUpdate.done();
  }
  return last;
}
