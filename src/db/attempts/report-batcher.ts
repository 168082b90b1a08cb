import type { AttemptKey, AttemptResult } from '../../core/attempt.js';
import { ATTEMPT_END_FROM, legalTiFrom } from '../../core/states.js';
import { isConnectionError } from '../is-connection-error.js';
import { retryOnConnectionError } from '../retry-on-connection-error.js';
import type { Sql } from '../sql.js';
import { finishAttempt, type FinishVerdict } from './finish-attempt.js';

const START_FROM = legalTiFrom('running') as string[];

/** One attempt, as every report names it. */
const key = (tiId: string, tryNumber: number, token: string) => `${tiId}/${tryNumber}/${token}`;

export interface FinishRecorded {
  verdict: FinishVerdict;
  /** The attempt's run when the end was recorded, for a targeted scheduler step. */
  runId: string | null;
}

export interface ReportBatcher {
  /** queued → running for the current attempt only; false when it is no longer current. */
  started(a: AttemptKey, info: { pid: number | null; agentId: string | null }): Promise<boolean>;
  /** Records the end of the current attempt; `rejected` when it is no longer current. */
  finished(a: AttemptKey, result: AttemptResult): Promise<FinishRecorded>;
  /** Resolves once every report handed in so far is written (or has failed). */
  drain(): Promise<void>;
}

type Op =
  | { kind: 'start'; a: AttemptKey; pid: number | null; agentId: string | null; resolve(ok: boolean): void; reject(err: unknown): void }
  | { kind: 'finish'; a: AttemptKey; result: AttemptResult; resolve(r: FinishRecorded): void; reject(err: unknown): void };

/**
 * Group commit for the reports of every attempt on this replica, whichever executor or agent
 * stream they come from: the starts waiting when a write begins go out as one multi-row
 * statement and the ends as another, sent back to back on one connection (one round trip). A
 * report arriving while a write is in flight waits for it and joins the next batch, so one report
 * alone costs what it did before (no timer, no added latency), and a thousand arriving together
 * cost two statements.
 *
 * Order is kept: a batch's starts are written before its ends, and a batch only after the one
 * before it, so an attempt's Started is never applied after its Finished. Every write is fenced
 * by (ti, try number, attempt token) row by row, exactly as the single-row writes were, and is
 * retried through a database blip (`retryMs`): repeating a fenced write is harmless.
 */
export function createReportBatcher(sql: Sql, opts: { retryMs: number; onRetry?(err: unknown): void }): ReportBatcher {
  let queue: Op[] = [];
  let flushing: Promise<void> | null = null;

  const retry = <T>(op: () => Promise<T>) => retryOnConnectionError(op, { maxMs: opts.retryMs, onRetry: (err, n) => n === 1 && opts.onRetry?.(err) });

  type StartOp = Extract<Op, { kind: 'start' }>;
  type EndOp = Extract<Op, { kind: 'finish' }>;
  type StartRow = { id: string; try_number: number; token: string };
  type EndRow = { id: string; try_number: number; token: string; run_id: string; state: FinishVerdict };

  const startsQuery = (on: Sql, ops: StartOp[]) => on<StartRow[]>`
        with r as (
          select * from unnest(${ops.map((o) => o.a.tiId)}::bigint[], ${ops.map((o) => o.a.tryNumber)}::int[],
                               ${ops.map((o) => o.a.attemptToken)}::uuid[], ${ops.map((o) => o.pid) as number[]}::int[],
                               ${ops.map((o) => o.agentId) as string[]}::text[])
            as r(id, try, token, pid, agent_id)),
        moved as (
          update task_instances t set state = 'running', started_at = now(), heartbeat_at = now(), pid = r.pid, agent_id = r.agent_id
          from r
          where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token and t.state = any(${START_FROM}::text[])
          returning t.id, t.run_id, t.task_id, t.try_number, t.pid, t.agent_id, t.attempt_token),
        ev as (
          insert into events (run_id, ti_id, kind, payload)
          select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', 'running', 'try', try_number, 'pid', pid, 'agent_id', agent_id)
          from moved)
        select id, try_number, attempt_token as token from moved`;

  const endsQuery = (on: Sql, ops: EndOp[]) => on<EndRow[]>`
        with r as (
          select * from unnest(${ops.map((o) => o.a.tiId)}::bigint[], ${ops.map((o) => o.a.tryNumber)}::int[],
                               ${ops.map((o) => o.a.attemptToken)}::uuid[], ${ops.map((o) => (o.result.outcome === 'success' ? 'true' : 'false'))}::text[]::bool[],
                               ${ops.map((o) => o.result.exitCode) as number[]}::int[], ${ops.map((o) => o.result.error) as string[]}::text[])
            as r(id, try, token, ok, exit_code, error)),
        moved as (
          update task_instances t set
            state = case when r.ok then 'success' when t.try_number < t.max_tries then 'up_for_retry' else 'failed' end,
            next_try_at = case when not r.ok and t.try_number < t.max_tries
              then now() + least(t.retry_delay_ms * power(2, least(t.try_number - 1, 30)), t.max_retry_delay_ms) * interval '1 millisecond'
              end,
            ended_at = now(), exit_code = r.exit_code, error = r.error, pid = null
          from r
          where t.id = r.id and t.try_number = r.try and t.attempt_token = r.token and t.state = any(${ATTEMPT_END_FROM as string[]}::text[])
          returning t.id, t.run_id, t.task_id, t.try_number, t.state, t.exit_code, t.error, t.next_try_at, t.attempt_token),
        ev as (
          insert into events (run_id, ti_id, kind, payload)
          select run_id, id, 'ti.state', jsonb_build_object('task_id', task_id, 'to', state, 'try', try_number,
                 'exit_code', exit_code, 'error', error, 'next_try_at', next_try_at) from moved)
        select id, try_number, attempt_token as token, run_id, state from moved`;

  const settleStarts = (ops: StartOp[], rows: StartRow[]) => {
    const done = new Set(rows.map((r) => key(r.id, r.try_number, r.token)));
    for (const o of ops) o.resolve(done.has(key(o.a.tiId, o.a.tryNumber, o.a.attemptToken)));
  };

  const settleEnds = (ops: EndOp[], rows: EndRow[]) => {
    const done = new Map(rows.map((r) => [key(r.id, r.try_number, r.token), r]));
    for (const o of ops) {
      const row = done.get(key(o.a.tiId, o.a.tryNumber, o.a.attemptToken));
      o.resolve(row ? { verdict: row.state, runId: row.run_id } : { verdict: 'rejected', runId: null });
    }
  };

  /** Through the pool, retried through a database blip. */
  const writeStarts = async (ops: StartOp[]) => {
    if (ops.length === 0) return;
    try {
      settleStarts(ops, await retry(() => startsQuery(sql, ops)));
    } catch (err) {
      for (const o of ops) o.reject(err);
    }
  };

  const writeEnds = async (ops: EndOp[]) => {
    if (ops.length === 0) return;
    try {
      settleEnds(ops, await retry(() => endsQuery(sql, ops)));
    } catch (err) {
      for (const o of ops) o.reject(err);
    }
  };

  /**
   * Starts and ends on one reserved connection, sent back to back: one round trip, and Postgres
   * runs them in that order. A part lost to a connection error is written again through the
   * pool, starts before ends, so the order holds on the retry too.
   */
  const writeBoth = async (starts: StartOp[], ends: EndOp[]) => {
    let conn: Awaited<ReturnType<Sql['reserve']>>;
    try {
      conn = await sql.reserve();
    } catch {
      await writeStarts(starts);
      return writeEnds(ends);
    }
    const on = conn as unknown as Sql;
    const [s, e] = await Promise.allSettled([startsQuery(on, starts), endsQuery(on, ends)]);
    conn.release();
    if (s.status === 'fulfilled') settleStarts(starts, s.value);
    else if (isConnectionError(s.reason)) await writeStarts(starts);
    else for (const o of starts) o.reject(s.reason);
    if (e.status === 'fulfilled') settleEnds(ends, e.value);
    else if (isConnectionError(e.reason)) await writeEnds(ends);
    else for (const o of ends) o.reject(e.reason);
  };

  const flush = async () => {
    while (queue.length > 0) {
      const batch = queue;
      queue = [];
      const starts = batch.filter((o): o is StartOp => o.kind === 'start');
      const ends = batch.filter((o): o is EndOp => o.kind === 'finish');
      // Superseded and cancelled ends have their own rules (finish-attempt.ts); they are rare.
      const plainEnds = ends.filter((o) => o.result.outcome !== 'cancelled' && o.result.outcome !== 'superseded');
      if (starts.length > 0 && plainEnds.length > 0) await writeBoth(starts, plainEnds);
      else {
        await writeStarts(starts);
        await writeEnds(plainEnds);
      }
      for (const o of ends) {
        if (o.result.outcome !== 'cancelled' && o.result.outcome !== 'superseded') continue;
        try {
          const verdict = await retry(() => finishAttempt(sql, o.a, o.result));
          o.resolve({ verdict, runId: null });
        } catch (err) {
          o.reject(err);
        }
      }
    }
    flushing = null;
  };

  const enqueue = (op: Op) => {
    queue.push(op);
    // Reports that arrive in the same turn of the event loop (one read from a socket can carry
    // many) go out together; a report that finds a write in flight joins the next batch.
    flushing ??= new Promise<void>((resolve) => setImmediate(resolve)).then(flush);
  };

  return {
    started: (a, info) => new Promise<boolean>((resolve, reject) => enqueue({ kind: 'start', a, pid: info.pid, agentId: info.agentId, resolve, reject })),
    finished: (a, result) => new Promise<FinishRecorded>((resolve, reject) => enqueue({ kind: 'finish', a, result, resolve, reject })),
    async drain() {
      while (flushing) await flushing;
    },
  };
}
