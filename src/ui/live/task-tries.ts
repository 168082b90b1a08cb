import { timestampDate } from '@bufbuild/protobuf/wkt';
import type { RunEvent } from '../../gen/leoflow/v1/workflow_pb.js';
import { payloadOf } from './use-event-stream.js';

/** One try of a task, as the run's events tell it (started, ended, how). */
export interface TaskTry {
  tryNumber: number;
  state: string;
  startedAt: Date | null;
  endedAt: Date | null;
  exitCode: number | null;
  /** The signal that killed it (SIGKILL, SIGTERM, …), or '' when it exited with a code or runs. */
  signal: string;
  error: string;
  agentId: string;
  pid: number | null;
}

const ENDS = new Set(['success', 'failed', 'up_for_retry', 'cancelled', 'upstream_failed', 'skipped']);

/** `tries` with a batch of the run's events applied: each ti.state of `taskId` that starts or ends a try. */
export function applyTryEvents(tries: TaskTry[], taskId: string, events: RunEvent[]): TaskTry[] {
  let next = tries;
  for (const e of events) {
    if (e.kind !== 'ti.state') continue;
    const p = payloadOf(e);
    const n = Number(p.try ?? 0);
    if (p.task_id !== taskId || n < 1) continue;
    const to = String(p.to ?? '');
    const at = e.at ? timestampDate(e.at) : new Date();
    const old = next.find((t) => t.tryNumber === n);
    const base: TaskTry = old ?? {
      tryNumber: n,
      state: to,
      startedAt: null,
      endedAt: null,
      exitCode: null,
      signal: '',
      error: '',
      agentId: '',
      pid: null,
    };
    let t: TaskTry | null = null;
    if (to === 'running') {
      t = { ...base, state: to, startedAt: at, agentId: String(p.agent_id ?? ''), pid: numberOr(p.pid) };
    } else if (to === 'queued') {
      t = { ...base, state: to, agentId: String(p.agent_id ?? base.agentId) };
    } else if (ENDS.has(to) && old) {
      const signal = typeof p.signal === 'string' ? p.signal : '';
      t = { ...base, state: to, endedAt: at, exitCode: numberOr(p.exit_code), signal, error: String(p.error ?? '') };
    }
    if (t) next = [...next.filter((x) => x.tryNumber !== n), t].sort((a, b) => a.tryNumber - b.tryNumber);
  }
  return next;
}

function numberOr(v: unknown): number | null {
  return typeof v === 'number' ? v : null;
}
