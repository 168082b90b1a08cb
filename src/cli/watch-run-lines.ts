import { timestampDate } from '@bufbuild/protobuf/wkt';
import { parseMappedTaskId } from '../core/map-spec.js';
import type { RunEvent } from '../gen/leoflow/v1/workflow_pb.js';
import type { Run, TaskInstance } from '../gen/leoflow/v1/types_pb.js';
import type { Clients } from './client.js';
import { followRun } from './follow-run.js';
import { clock, taskStateName } from './format.js';
import { mappedRange } from './group-mapped.js';
import { readRunPages } from './run-pages.js';

/** How often, by the events' clock, a mapped task's progress line is printed while its instances move. */
export const MAP_PROGRESS_EVERY_MS = 5_000;
/** A mapped task's failed tries printed one by one, up to this many; the rest are counted in its progress. */
export const MAP_FAILURES_LISTED = 10;

const ENDED_TI = new Set(['success', 'failed', 'upstream_failed', 'skipped', 'cancelled']);

/** A task instance's move as the events log records it (`ti.state`, or `ti.pending` with its reason). */
interface TiMove {
  task_id: string;
  to: string;
  try?: number;
  exit_code?: number | null;
  error?: string | null;
  next_try_at?: string | null;
  reason?: string | null;
}

/** A mapped task's instances, folded: their states and counts, and when its progress was last printed. */
interface MapProgress {
  total: number;
  states: Map<string, string>;
  counts: Map<string, number>;
  printedAt: number;
  changed: boolean;
  failuresListed: number;
  reason: string;
}

/**
 * Follows a run until it ends (with follow, until `signal`), printing each task's moves, and why it
 * waits when it says, one line each, so the output reads the same in a terminal and in a CI log.
 * Each line has the time of its event: a run replayed after its end shows when each move happened.
 * A mapped task's instances are folded into a progress line with their counts by state, at most every
 * MAP_PROGRESS_EVERY_MS and when the task ends, so a 100,000-item map is a few hundred lines, not
 * 300,000; their first MAP_FAILURES_LISTED failed tries are printed as they come. Resolves the final
 * run, read up to its own task instances.
 */
export async function watchRunLines(
  clients: Clients,
  run: Run,
  o: { afterSeq?: string; follow?: boolean; signal?: AbortSignal } = {},
): Promise<{ run: Run; tis: TaskInstance[] }> {
  const first = await clients.workflow.getRun({ runId: run.runId });
  const own = first.taskInstances.filter((t) => !parseMappedTaskId(t.taskId));
  // Resumed after a seq, the tasks are where they are now; replayed from the start, they begin at none.
  const resumed = o.afterSeq !== undefined && o.afterSeq !== '0';
  const lines = new MoveLines(own, (s) => process.stdout.write(s), resumed);
  for await (const batch of followRun(clients, run.runId, o)) for (const e of batch) lines.add(e);
  lines.flush();
  return readRunPages(clients, run.runId, { all: false });
}

/** The lines of a run's moves, from its events in order; `write` takes each line as it is made. */
export class MoveLines {
  private readonly maxTries: Map<string, number>;
  private readonly width: number;
  /** The run's own task instances' states, and how many of them have ended. */
  private readonly states: Map<string, string>;
  private ended = 0;
  private readonly maps = new Map<string, MapProgress>();
  private lastAt = 0;

  constructor(
    own: readonly TaskInstance[],
    private readonly write: (line: string) => void,
    fromCurrentStates = false,
  ) {
    this.maxTries = new Map(own.map((t) => [t.taskId, t.maxTries]));
    this.width = Math.max(8, ...own.map((t) => t.taskId.length));
    this.states = new Map();
    for (const t of own) this.setState(t.taskId, fromCurrentStates ? taskStateName(t.state) : 'none');
  }

  add(e: RunEvent): void {
    if (e.kind !== 'ti.state' && e.kind !== 'ti.pending' && e.kind !== 'ti.expanded') return;
    const at = e.at ? timestampDate(e.at).getTime() : Date.now();
    this.lastAt = at;
    const payload = JSON.parse(e.payloadJson) as TiMove & { count?: number };
    if (e.kind === 'ti.expanded') return this.expanded(payload.task_id, payload.count ?? 0, at);
    const mapped = parseMappedTaskId(payload.task_id);
    if (mapped) return this.mappedMove(e.kind, payload, mapped.task, at);
    // Why a task waits, when it says (ti.pending: its state is unchanged).
    if (e.kind === 'ti.pending' && !payload.reason) return;
    const move =
      e.kind === 'ti.pending'
        ? { task_id: payload.task_id, to: this.states.get(payload.task_id) ?? 'scheduled', reason: payload.reason }
        : payload;
    // A mapped task's own instance ends after all of its instances: their last counts come first.
    if (ENDED_TI.has(move.to)) this.progress(move.task_id, at);
    this.setState(move.task_id, move.to);
    this.line(at, move.task_id, move.to, moveDetail(move, this.maxTries.get(move.task_id)));
  }

  /** Prints every mapped task's progress not yet printed (the watch has ended). */
  flush(): void {
    for (const task of this.maps.keys()) this.progress(task, this.lastAt);
  }

  private setState(taskId: string, to: string): void {
    const from = this.states.get(taskId);
    if (from !== undefined && ENDED_TI.has(from)) this.ended--;
    if (ENDED_TI.has(to)) this.ended++;
    this.states.set(taskId, to);
  }

  private expanded(task: string, count: number, at: number): void {
    const g = this.map(task);
    g.total = count;
    g.changed = false;
    g.printedAt = at;
    this.line(at, task, 'expanded', `${count} mapped instances, ${mappedRange(task, count)}`);
  }

  private mappedMove(kind: string, m: TiMove, task: string, at: number): void {
    const g = this.map(task);
    if (kind === 'ti.pending') {
      if (m.reason) g.reason = m.reason;
    } else {
      const from = g.states.get(m.task_id);
      if (from !== undefined) g.counts.set(from, g.counts.get(from)! - 1);
      g.counts.set(m.to, (g.counts.get(m.to) ?? 0) + 1);
      g.states.set(m.task_id, m.to);
      if (m.to === 'running' || ENDED_TI.has(m.to)) g.reason = '';
      if ((m.to === 'failed' || m.to === 'up_for_retry') && g.failuresListed < MAP_FAILURES_LISTED) {
        g.failuresListed++;
        const more = g.failuresListed === MAP_FAILURES_LISTED ? ' (further failed tries are counted, not listed)' : '';
        this.line(at, m.task_id, m.to, moveDetail(m, this.maxTries.get(task)) + more);
      }
    }
    g.changed = true;
    if (at - g.printedAt >= MAP_PROGRESS_EVERY_MS) this.progress(task, at);
  }

  /** A mapped task's line: its instances counted by state, those without a move yet as `none`. */
  private progress(task: string, at: number): void {
    const g = this.maps.get(task);
    if (!g || !g.changed) return;
    g.changed = false;
    g.printedAt = at;
    const counts = [...g.counts].filter(([, n]) => n > 0);
    const moved = counts.reduce((sum, [, n]) => sum + n, 0);
    if (g.total > moved) counts.push(['none', g.total - moved]);
    const text = counts
      .sort((a, b) => b[1] - a[1])
      .map(([s, n]) => `${n} ${s}`)
      .join(', ');
    this.line(at, mappedRange(task, Math.max(g.total, moved)), 'mapped', text + (g.reason ? `; ${g.reason}` : ''));
  }

  private map(task: string): MapProgress {
    let g = this.maps.get(task);
    if (!g) {
      g = {
        total: 0,
        states: new Map(),
        counts: new Map(),
        printedAt: 0,
        changed: false,
        failuresListed: 0,
        reason: '',
      };
      this.maps.set(task, g);
    }
    return g;
  }

  private line(at: number, name: string, to: string, detail: string): void {
    const done = `[${this.ended}/${this.states.size} done]`;
    this.write(`  ${clock(new Date(at))}  ${name.padEnd(this.width)}  ${to.padEnd(15)} ${detail}  ${done}\n`);
  }
}

/** A move's try, exit, retry time, reason and error, as one line's detail. */
function moveDetail(m: TiMove, maxTries: number | undefined): string {
  const parts: string[] = [];
  if (m.try !== undefined && m.try > 0) parts.push(`try ${m.try}/${maxTries ?? '?'}`);
  if (m.exit_code !== undefined && m.exit_code !== null) parts.push(`exit ${m.exit_code}`);
  if (m.to === 'up_for_retry' && m.next_try_at) parts.push(`retry at ${clock(new Date(m.next_try_at))}`);
  if (m.reason) parts.push(m.reason);
  if (m.error && m.to !== 'success' && !/^exit code \d+$/.test(m.error)) parts.push(m.error);
  return parts.join(', ');
}
