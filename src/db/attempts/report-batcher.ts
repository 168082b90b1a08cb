import type { AttemptKey, AttemptResult } from '../../core/attempt.js';
import { isConnectionError } from '../is-connection-error.js';
import { isDataError } from '../is-data-error.js';
import { isolateFailures } from '../isolate-failures.js';
import { retryOnConnectionError } from '../retry-on-connection-error.js';
import type { LogWriter } from '../log-writer.js';
import type { Sql } from '../sql.js';
import type { EndsSentListener, EndsSentPort } from './ends-sent-port.js';
import {
  finishAttempt,
  finishAttempts,
  startAndFinishAttempts,
  type FinishedRow,
  type FinishVerdict,
  type StartedAndFinishedRow,
} from './finish-attempt.js';
import { startAttempts, type StartedRow } from './start-attempt.js';

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
  /**
   * Each batch of ends, as sent on its connection and before their answer: what the registrant
   * sends on that connection rides right behind them (in the same round trip), and the ends settle
   * once it has answered too.
   */
  readonly endsSent: EndsSentPort;
}

type Op =
  | {
      kind: 'start';
      a: AttemptKey;
      pid: number | null;
      agentId: string | null;
      /** When it was handed in (ms): the attempt's recorded start, however long its batch waits. */
      reportedAt: number;
      resolve(ok: boolean): void;
      reject(err: unknown): void;
    }
  | {
      kind: 'finish';
      a: AttemptKey;
      result: AttemptResult;
      resolve(r: FinishRecorded): void;
      reject(err: unknown): void;
    };

export interface ReportBatcherOptions {
  retryMs: number;
  /**
   * The task log lines: whatever is buffered when a batch with ends is written goes ahead of it,
   * on its connection, so an attempt's lines are stored no later than its end (one who sees the
   * run end and reads its logs gets every line) without a round trip of their own.
   */
  logs: Pick<LogWriter, 'busy' | 'flush' | 'sendOn'>;
  onRetry?(err: unknown): void;
  /** Aborted when retrying must stop (a stopping server out of time): each report is then tried once more at most. */
  giveUp?: AbortSignal;
  /** Told of each start and end written, with its DAG: how long it waited (ready → started) and ran (s). */
  observe?: {
    started(dagId: string, waitedS: number | null): void;
    ended(dagId: string, state: FinishedRow['state'], ranS: number | null): void;
  };
}

type StartOp = Extract<Op, { kind: 'start' }>;
type EndOp = Extract<Op, { kind: 'finish' }>;
/** An attempt's Started and Finished in the same batch: written as one. */
type BothOp = { start: StartOp; end: EndOp };

const startsQuery = (on: Sql, ops: StartOp[]) =>
  startAttempts(
    on,
    ops.map((o) => ({ ...o.a, pid: o.pid, agentId: o.agentId, reportedAt: o.reportedAt })),
  );
const endsQuery = (on: Sql, ops: EndOp[]) =>
  finishAttempts(
    on,
    ops.map((o) => ({ ...o.a, result: o.result })),
  );
const bothQuery = (on: Sql, ops: BothOp[]) =>
  startAndFinishAttempts(
    on,
    ops.map(({ start, end }) => ({
      ...end.a,
      result: end.result,
      pid: start.pid,
      agentId: start.agentId,
      reportedAt: start.reportedAt,
    })),
  );
const rejectOp = (o: StartOp | EndOp, err: unknown) => o.reject(err);
const rejectBoth = (o: BothOp, err: unknown) => {
  o.start.reject(err);
  o.end.reject(err);
};

/**
 * Group commit for the reports of every attempt on this replica, whichever executor or agent stream
 * they come from: the starts and ends waiting when a write begins go out as multi-row statements
 * on one connection, in one round trip. Every write is fenced by (ti, try number, attempt token) row
 * by row and retried through a database blip (`retryMs`): repeating a fenced write is harmless.
 */
export class GroupCommitReportBatcher implements ReportBatcher {
  readonly #sql: Sql;
  readonly #opts: ReportBatcherOptions;
  #queue: Op[] = [];
  #flushing: Promise<void> | null = null;
  /** Ends written whose settling waits for what was sent behind them. */
  readonly #settlingEnds = new Set<Promise<void>>();
  /** Told of each batch of ends as sent (`endsSent`). */
  #behindEnds: EndsSentListener | null = null;
  /** Made once: the flush scheduled for each batch. */
  readonly #flushNow = () => this.#flush();
  readonly endsSent: EndsSentPort = {
    register: (listener) => {
      if (this.#behindEnds) throw new Error('a listener is already registered for the ends sent');
      this.#behindEnds = listener;
      return () => {
        if (this.#behindEnds === listener) this.#behindEnds = null;
      };
    },
  };

  constructor(sql: Sql, opts: ReportBatcherOptions) {
    this.#sql = sql;
    this.#opts = opts;
  }

  started(a: AttemptKey, info: { pid: number | null; agentId: string | null }): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) =>
      this.#enqueue({
        kind: 'start',
        a,
        pid: info.pid,
        agentId: info.agentId,
        reportedAt: Date.now(),
        resolve,
        reject,
      }),
    );
  }

  finished(a: AttemptKey, result: AttemptResult): Promise<FinishRecorded> {
    return new Promise<FinishRecorded>((resolve, reject) =>
      this.#enqueue({ kind: 'finish', a, result, resolve, reject }),
    );
  }

  async drain(): Promise<void> {
    while (this.#flushing || this.#settlingEnds.size > 0) {
      await this.#flushing;
      await Promise.all(this.#settlingEnds);
    }
  }

  /**
   * A report arriving while a write is in flight waits for it and joins the next batch, so one
   * report alone costs what it did before (no timer, no added latency), and a thousand arriving
   * together cost a few statements.
   */
  #enqueue(op: Op): void {
    this.#queue.push(op);
    // Reports that arrive in the same turn of the event loop (one read from a socket can carry
    // many) go out together; a report that finds a write in flight joins the next batch.
    this.#flushing ??= new Promise<void>((resolve) => setImmediate(resolve)).then(this.#flushNow);
  }

  #retry<T>(op: () => Promise<T>): Promise<T> {
    return retryOnConnectionError(op, {
      maxMs: this.#opts.retryMs,
      giveUp: this.#opts.giveUp,
      onRetry: (err, n) => n === 1 && this.#opts.onRetry?.(err),
    });
  }

  /**
   * Writes the queue batch by batch. An attempt whose Started and Finished are in the same batch (a
   * short task, or any task under load) is written once, by a third statement: one new row version
   * of its TI instead of two, both moves still in the events log. Order is kept: a batch's starts
   * are written before its ends, and a batch only after the one before it, so an attempt's Started
   * is never applied after its Finished.
   */
  async #flush(): Promise<void> {
    const opts = this.#opts;
    while (this.#queue.length > 0) {
      const batch = this.#queue;
      this.#queue = [];
      const ends = batch.filter((o): o is EndOp => o.kind === 'finish');
      // Superseded and cancelled ends have their own rules (finish-attempt.ts); they are rare.
      const plain = (o: EndOp) => o.result.outcome !== 'cancelled' && o.result.outcome !== 'superseded';
      // An attempt that started and ended within the batch is written once (an end sent twice
      // pairs once; the other goes with the ends, where the fence settles it like the first).
      const unpaired = new Map<string, EndOp[]>();
      for (const o of ends.filter(plain)) {
        const k = key(o.a.tiId, o.a.tryNumber, o.a.attemptToken);
        (unpaired.get(k) ?? unpaired.set(k, []).get(k)!).push(o);
      }
      const both: BothOp[] = [];
      const starts: StartOp[] = [];
      for (const o of batch) {
        if (o.kind !== 'start') continue;
        const end = unpaired.get(key(o.a.tiId, o.a.tryNumber, o.a.attemptToken))?.shift();
        if (end) both.push({ start: o, end });
        else starts.push(o);
      }
      const plainEnds = [...unpaired.values()].flat();
      if (both.length > 0 || plainEnds.length > 0) await this.#writeTogether(starts, both, plainEnds);
      else await this.#writeStarts(starts);
      if (ends.some((o) => !plain(o))) await opts.logs.flush();
      for (const o of ends) {
        if (plain(o)) continue;
        try {
          const verdict = await this.#retry(() => finishAttempt(this.#sql, o.a, o.result));
          o.resolve({ verdict, runId: null });
        } catch (err) {
          o.reject(err);
        }
      }
    }
    this.#flushing = null;
  }

  #settleStarts(ops: StartOp[], rows: StartedRow[]): void {
    for (const r of rows) this.#opts.observe?.started(r.dag_id, r.waited_s);
    const done = new Set(rows.map((r) => key(r.id, r.try_number, r.token)));
    for (const o of ops) o.resolve(done.has(key(o.a.tiId, o.a.tryNumber, o.a.attemptToken)));
  }

  #settleEnds(ops: EndOp[], rows: FinishedRow[]): void {
    for (const r of rows) this.#opts.observe?.ended(r.dag_id, r.state, r.ran_s);
    const done = new Map(rows.map((r) => [key(r.id, r.try_number, r.token), r]));
    for (const o of ops) {
      const row = done.get(key(o.a.tiId, o.a.tryNumber, o.a.attemptToken));
      o.resolve(row ? { verdict: row.state, runId: row.run_id } : { verdict: 'rejected', runId: null });
    }
  }

  /** A row back: the attempt was current, so its Started applies too (it is running, or was). */
  #settleBoth(ops: BothOp[], rows: StartedAndFinishedRow[]): void {
    // A row whose attempt was running already (its Started sent again) has no wait.
    for (const r of rows) if (r.waited_s !== null) this.#opts.observe?.started(r.dag_id, r.waited_s);
    const done = new Set(rows.map((r) => key(r.id, r.try_number, r.token)));
    for (const o of ops) o.start.resolve(done.has(key(o.start.a.tiId, o.start.a.tryNumber, o.start.a.attemptToken)));
    this.#settleEnds(
      ops.map((o) => o.end),
      rows,
    );
  }

  /**
   * Through the pool, retried through a database blip. A batch the database refuses for one
   * report's values is split until only that report fails (its sender's stream is closed), so the
   * other agents' reports in it are written.
   */
  async #writeThroughPool<O>(ops: O[], write: (part: O[]) => Promise<void>, fail: (o: O, err: unknown) => void) {
    try {
      await isolateFailures(ops, write, fail);
    } catch (err) {
      for (const o of ops) fail(o, err);
    }
  }

  #writeStarts(ops: StartOp[]): Promise<void> {
    const write = async (part: StartOp[]) =>
      this.#settleStarts(part, await this.#retry(() => startsQuery(this.#sql, part)));
    return this.#writeThroughPool(ops, write, rejectOp);
  }

  #writeEnds(ops: EndOp[]): Promise<void> {
    const write = async (part: EndOp[]) => this.#settleEnds(part, await this.#retry(() => endsQuery(this.#sql, part)));
    return this.#writeThroughPool(ops, write, rejectOp);
  }

  #writeBoth(ops: BothOp[]): Promise<void> {
    const write = async (part: BothOp[]) => this.#settleBoth(part, await this.#retry(() => bothQuery(this.#sql, part)));
    return this.#writeThroughPool(ops, write, rejectBoth);
  }

  /**
   * The buffered log lines, the starts, the attempts started and ended together, and the ends (any
   * of the three may be empty, not all) on one reserved connection, sent back to back, then what
   * the registrant of `endsSent` sends: one round trip, and Postgres runs them in that order. The
   * lines go first so an attempt's lines are never stored after its end (one who sees the run end
   * and reads its logs gets every line). Once the lines and the reports have answered, the next
   * batch may go (a Started that came meanwhile is not held up by what rides behind these ends). A
   * part lost to a connection error is written again through the pool, lines before starts before
   * ends, so the order holds on the retry too.
   */
  async #writeTogether(starts: StartOp[], both: BothOp[], ends: EndOp[]): Promise<void> {
    const opts = this.#opts;
    let conn: Awaited<ReturnType<Sql['reserve']>>;
    try {
      conn = await this.#sql.reserve();
    } catch {
      await opts.logs.flush();
      await this.#writeStarts(starts);
      await this.#writeBoth(both);
      return this.#writeEnds(ends);
    }
    const on = conn as unknown as Sql;
    // Log lines already on their way through the pool must land first (rare: a timed flush).
    while (opts.logs.busy) await opts.logs.flush();
    // The order on the wire is the order of the execute() calls (a postgres.js query is sent only
    // when executed or awaited, and Promise.allSettled would await them a microtask later).
    const none = Promise.resolve([]);
    const lines = opts.logs.sendOn(on);
    const sent = [
      starts.length > 0 ? startsQuery(on, starts).execute() : none,
      both.length > 0 ? bothQuery(on, both).execute() : none,
      ends.length > 0 ? endsQuery(on, ends).execute() : none,
    ] as const;
    const allEnds = [...both.map((o) => o.end), ...ends];
    const after = this.#behindEnds?.(
      on,
      allEnds.map((o) => ({ tiId: o.a.tiId, outcome: o.result.outcome })),
    );
    // The lines settle first: retried through the pool after a lost connection, before the ends are.
    const [s, b, e] = await Promise.allSettled([...sent, lines]);
    if (s.status === 'fulfilled' && b.status === 'fulfilled' && e.status === 'fulfilled') {
      this.#settleStarts(starts, s.value);
      this.#settleStarts(
        both.map((o) => o.start),
        b.value,
      );
      // Written: the next batch need not wait. The ends are settled once what was sent behind them
      // has answered too (what an end wakes may count on what rode behind it).
      const settling = Promise.allSettled([after]).then(() => {
        conn.release();
        this.#settleEnds(allEnds, [...b.value, ...e.value]);
      });
      this.#settlingEnds.add(settling);
      void settling.finally(() => this.#settlingEnds.delete(settling));
      return;
    }
    await Promise.allSettled([after]);
    conn.release();
    // A part lost to a connection, or refused for one report's values, is written again through
    // the pool (split, in the second case, until only the guilty report fails).
    const again = (err: unknown) => isConnectionError(err) || isDataError(err);
    if (s.status === 'fulfilled') this.#settleStarts(starts, s.value);
    else if (again(s.reason)) await this.#writeStarts(starts);
    else for (const o of starts) o.reject(s.reason);
    if (b.status === 'fulfilled') this.#settleBoth(both, b.value);
    else if (again(b.reason)) await this.#writeBoth(both);
    else for (const o of both) rejectBoth(o, b.reason);
    if (e.status === 'fulfilled') this.#settleEnds(ends, e.value);
    else if (again(e.reason)) await this.#writeEnds(ends);
    else for (const o of ends) o.reject(e.reason);
  }
}

/** The report batcher of this replica (see GroupCommitReportBatcher). */
export function createReportBatcher(sql: Sql, opts: ReportBatcherOptions): ReportBatcher {
  return new GroupCommitReportBatcher(sql, opts);
}
