import { randomBytes } from 'node:crypto';
import type { ServiceImpl } from '@connectrpc/connect';
import type { Logger } from 'pino';
import type { DagSpec } from '../../core/dag-spec.js';
import { isTerminalRun, isTerminalTi } from '../../core/states.js';
import { parseTraceparent, parseTracestate } from '../../core/trace-context.js';
import { dagExists, getDagView, listDags, setDagPaused, upsertDag } from '../../db/dags.js';
import { readRunLogs } from '../../db/logs.js';
import { lastEventSeq } from '../../db/events/last-event-seq.js';
import { triggeredBy } from '../../db/events/triggered-by.js';
import { cancelRun } from '../../db/cancel-run.js';
import { cancelTaskInstance } from '../../db/cancel-task-instance.js';
import { clearTaskInstance } from '../../db/clear-task-instance.js';
import { createRunOfDag, getRunView, listRuns } from '../../db/runs.js';
import type { Sql } from '../../db/sql.js';
import { listTiViews, runAndTiStates } from '../../db/tis.js';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { WorkflowService, type CleanHistoryRequest } from '../../gen/leoflow/v1/workflow_pb.js';
import { NO_HISTORY } from '../../db/history/remove-runs.js';
import { DEFAULT_KEEP_LAST, MAX_KEEP_LAST } from '../../core/keep-last.js';
import { cleanBatches, cleanHistory, keptFor, type CleanQuery } from './clean-history.js';
import { deleteDagWithHistory } from './delete-dag.js';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, parseId, toConnectError } from './errors.js';
import type { RunRead } from '../../scheduler/planner-memory.js';
import {
  countsToProto,
  dagToProto,
  eventToProto,
  logToProto,
  runStateOfWire,
  runToProto,
  tiToProto,
} from './to-proto.js';
import { echo } from '../../core/check-text.js';
import { parseConf } from './parse-conf.js';
import { pageOfRuns } from './runs-page.js';
import { actorPayload } from '../../core/actor.js';
import { callerOf } from '../auth/caller.js';
import type { EventFeed } from '../../feed/event-feed.js';
import { watchBatches } from './watch-batches.js';
import type { ChangeSignal } from './change-signal.js';

export interface WorkflowDeps {
  sql: Sql;
  logger: Logger;
  parseDag(source: string, file: string): Promise<DagSpec>;
  /** Asks the leader to step, for these runs only when named. */
  nudge(runIds?: string[]): void;
  /** A run was triggered: asks the leader to step for it, with the run as the planner would read
   *  it (optional: without it, `nudge`). */
  runCreated?(read: RunRead): void;
  /** Stops the attempts of these task instances, wherever they run. */
  stopAttempts(tiIds: string[], reason: string): void;
  defaultExecutor: string;
  /** How long a stopped attempt may take to be recorded ended (`dag delete --force` waits for it). */
  attemptsEndWithinMs: number;
  /** Files among the server's start-up DAG paths that define this DAG (they would bring it back). */
  dagFilesDefining?(dagId: string): Promise<string[]>;
  /** This replica's feed of events to its watchers (WatchRun, WatchRuns). */
  events: EventFeed;
  /** How far a watcher may fall behind (events not yet taken by its stream) before it is cut off. */
  watchBufferEvents: number;
  /** Fired when log lines or events were written (a NOTIFY): a following TailLogs reads then. */
  changes: ChangeSignal;
}

/** A following TailLogs reads again at least this often, should a NOTIFY be lost. */
const LOG_BACKSTOP_MS = 2_000;

const MAX_SOURCE_BYTES = 1024 * 1024;

/** A name the request must give. Its length and characters were checked with every string of the
 *  request, before the handler (check-request-fields.ts). */
function required(field: string, value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError(field, 'is required');
  return value;
}

/** Wraps each handler so every error leaves through the one mapping, and unexpected ones are logged. */
function guarded<T extends object>(logger: Logger, impl: T): T {
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(impl) as [string, (...a: unknown[]) => unknown][]) {
    if (fn.constructor.name === 'AsyncGeneratorFunction') {
      out[name] = async function* (...args: unknown[]) {
        try {
          yield* fn(...args) as AsyncGenerator;
        } catch (err) {
          const ce = toConnectError(err);
          if (ce.code === 13) logger.error({ err, rpc: name }, 'rpc failed');
          throw ce;
        }
      };
    } else {
      out[name] = async (...args: unknown[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          const ce = toConnectError(err);
          if (ce.code === 13) logger.error({ err, rpc: name }, 'rpc failed');
          throw ce;
        }
      };
    }
  }
  return out as T;
}

export function createWorkflowService(deps: WorkflowDeps): ServiceImpl<typeof WorkflowService> {
  const { sql } = deps;

  /** A clean's request checked (the same for CleanHistory and WatchCleanHistory), before anything is read. */
  async function cleanQueryOf(req: CleanHistoryRequest): Promise<CleanQuery> {
    if (!req.before)
      throw new InvalidArgumentError('before', 'is required: runs that ended before this time are removed');
    const before = timestampDate(req.before);
    if (Number.isNaN(before.getTime())) throw new InvalidArgumentError('before', 'is not a valid time');
    if (before.getTime() > Date.now()) {
      throw new InvalidArgumentError(
        'before',
        `${before.toISOString()} is in the future: only runs that have ended can be removed, so give a time that has passed`,
      );
    }
    const keepLast = req.keepLast ?? DEFAULT_KEEP_LAST;
    if (keepLast < 0 || keepLast > MAX_KEEP_LAST) {
      throw new InvalidArgumentError(
        'keep_last',
        `must be 0 to ${MAX_KEEP_LAST} (each DAG's latest finished runs to keep), got ${keepLast}: to keep more history, give an earlier before`,
      );
    }
    const dagId = req.dagId || undefined;
    if (dagId !== undefined && !(await dagExists(sql, dagId))) throw new NotFoundError(`DAG "${dagId}" not found`);
    return { endedBefore: before, dagId, keepLast, dryRun: req.dryRun };
  }

  const impl: ServiceImpl<typeof WorkflowService> = {
    async applyDag(req, ctx) {
      const by = callerOf(ctx);
      const file = req.filename || '<request>';
      // With a file name, an empty source is the parser's to report: it names the file.
      if (req.source.trim() === '' && req.filename === '')
        throw new InvalidArgumentError('source', 'is required (the DAG file text)');
      if (Buffer.byteLength(req.source) > MAX_SOURCE_BYTES)
        throw new InvalidArgumentError('source', `is larger than ${MAX_SOURCE_BYTES} bytes`);
      const spec = await deps.parseDag(req.source, file);
      const { dag, outcome } = await upsertDag(sql, spec, req.source, new Date(), by);
      deps.logger.info({ dagId: spec.dagId, version: dag.version, outcome, file, ...actorPayload(by) }, 'applied DAG');
      if (outcome !== 'unchanged') deps.nudge();
      return { dag: dagToProto(dag), outcome };
    },

    async getDag(req) {
      const dag = await getDagView(sql, required('dag_id', req.dagId));
      if (!dag) throw new NotFoundError(`DAG "${req.dagId}" not found`);
      return { dag: dagToProto(dag) };
    },

    async listDags() {
      return { dags: (await listDags(sql)).map(dagToProto) };
    },

    async pauseDag(req, ctx) {
      const dag = await setDagPaused(sql, required('dag_id', req.dagId), req.paused);
      if (!dag) throw new NotFoundError(`DAG "${req.dagId}" not found`);
      deps.logger.info(
        { dagId: dag.dag_id, paused: req.paused, ...actorPayload(callerOf(ctx)) },
        req.paused ? `paused DAG ${dag.dag_id}` : `unpaused DAG ${dag.dag_id}`,
      );
      deps.nudge();
      return { dag: dagToProto(dag) };
    },

    async triggerRun(req, ctx) {
      const by = callerOf(ctx);
      const dagId = required('dag_id', req.dagId);
      // W3C trace context from gRPC metadata or an HTTP header (both are headers here). One that
      // does not parse is ignored, as the spec asks: the run starts a trace of its own.
      const callerParent = parseTraceparent(ctx.requestHeader.get('traceparent'));
      const caller = callerParent
        ? { traceparent: callerParent, tracestate: parseTracestate(ctx.requestHeader.get('tracestate')) }
        : undefined;
      const conf = parseConf(req.confJson);
      if (req.runKey !== '' && !/^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$/.test(req.runKey)) {
        throw new InvalidArgumentError(
          'run_key',
          'must be 1-200 characters of letters, digits and _ . : + -, starting with a letter or digit',
        );
      }
      const now = new Date();
      const runKey = req.runKey || `manual__${now.toISOString()}__${randomBytes(3).toString('hex')}`;
      // One statement: the DAG's current version is read and the run made from it.
      const result = await createRunOfDag(sql, {
        dagId,
        runKey,
        runType: 'manual',
        logicalDate: now,
        conf,
        defaultExecutor: deps.defaultExecutor,
        by,
        ...(caller ? { caller } : {}),
      }).catch((err: unknown) => {
        // 23503: the DAG was deleted while the run was being made (its foreign key found no DAG).
        if ((err as { code?: string }).code === '23503') return null;
        throw err;
      });
      if (!result) throw new NotFoundError(`DAG "${dagId}" not found`);
      if (result.created) {
        deps.logger.info({ runId: result.run.id, dagId, runKey, ...actorPayload(by) }, 'run triggered');
        if (result.read && deps.runCreated) {
          deps.runCreated({
            run: {
              ...result.run,
              spec: result.read.spec,
              dag_paused: result.read.dagPaused,
              running_in_dag: result.read.runningInDag,
            },
            tis: result.read.tis,
          });
        } else deps.nudge([result.run.id]);
      }
      return { run: runToProto(result.run), created: result.created };
    },

    async getRun(req) {
      const runId = parseId('run_id', req.runId);
      const [run, tis, by] = await Promise.all([
        getRunView(sql, runId),
        listTiViews(sql, runId),
        triggeredBy(sql, runId),
      ]);
      if (!run) throw new NotFoundError(`run ${runId} not found`);
      return { run: runToProto(run, by), taskInstances: tis.map(tiToProto) };
    },

    async listRuns(req) {
      if (req.limit < 0 || req.limit > 1000)
        throw new InvalidArgumentError('limit', `must be between 0 and 1000, got ${req.limit}`);
      const states = req.states.map(runStateOfWire);
      const limit = req.limit || 50;
      const beforeId = req.pageToken ? parseId('page_token', req.pageToken) : undefined;
      // One more than asked for tells whether another page follows.
      const runs = await listRuns(sql, { dagId: req.dagId || undefined, states, limit: limit + 1, beforeId });
      // A DAG with runs exists (they are deleted with it): only an empty list needs the check.
      if (req.dagId && runs.length === 0 && !beforeId && !(await dagExists(sql, req.dagId)))
        throw new NotFoundError(`DAG "${req.dagId}" not found`);
      return pageOfRuns(runs, limit);
    },

    async cancelRun(req, ctx) {
      const by = callerOf(ctx);
      const runId = parseId('run_id', req.runId);
      const outcome = await cancelRun(sql, runId, by);
      if (outcome.kind === 'not_found') throw new NotFoundError(`run ${runId} not found`);
      if (outcome.kind === 'already_ended')
        throw new FailedPreconditionError(`run ${runId} has already ended (${outcome.run.state})`);
      deps.stopAttempts(outcome.stoppedTiIds, `run ${runId} cancelled`);
      deps.logger.info({ runId, stopped: outcome.stoppedTiIds.length, ...actorPayload(by) }, 'run cancelled');
      deps.nudge();
      return { run: runToProto(outcome.run) };
    },

    async listTaskInstances(req) {
      const runId = parseId('run_id', req.runId);
      const tis = await listTiViews(sql, runId);
      // Every run has task instances (a DAG has tasks): only none needs the run looked up.
      if (tis.length === 0 && !(await getRunView(sql, runId))) throw new NotFoundError(`run ${runId} not found`);
      return { taskInstances: tis.map(tiToProto) };
    },

    async clearTaskInstance(req, ctx) {
      const by = callerOf(ctx);
      const runId = parseId('run_id', req.runId);
      const taskId = required('task_id', req.taskId);
      const outcome = await clearTaskInstance(sql, { runId, taskId, downstream: req.downstream, by });
      if (outcome.kind === 'run_not_found') throw new NotFoundError(`run ${runId} not found`);
      if (outcome.kind === 'task_not_found') throw new NotFoundError(`run ${runId} has no task "${taskId}"`);
      if (outcome.kind === 'not_ended') {
        throw new FailedPreconditionError(
          `task "${taskId}" of run ${runId} is ${outcome.ti.state}: only a task instance that has ended (success, failed, upstream_failed, skipped, cancelled) can be cleared`,
        );
      }
      deps.logger.info(
        {
          runId,
          taskId,
          cleared: outcome.cleared.map((t) => t.task_id),
          reopenedFrom: outcome.reopenedFrom ?? undefined,
          ...actorPayload(by),
        },
        outcome.reopenedFrom ? `cleared ${taskId}; run re-opened` : `cleared ${taskId}`,
      );
      deps.nudge([runId]);
      return { run: runToProto(outcome.run), cleared: outcome.cleared.map(tiToProto) };
    },

    async cancelTaskInstance(req, ctx) {
      const by = callerOf(ctx);
      const runId = parseId('run_id', req.runId);
      const taskId = required('task_id', req.taskId);
      const outcome = await cancelTaskInstance(sql, runId, taskId, by);
      if (outcome.kind === 'run_not_found') throw new NotFoundError(`run ${runId} not found`);
      if (outcome.kind === 'task_not_found') throw new NotFoundError(`run ${runId} has no task "${taskId}"`);
      if (outcome.kind === 'already_ended') {
        throw new FailedPreconditionError(`task "${taskId}" of run ${runId} has already ended (${outcome.ti.state})`);
      }
      if (outcome.mayHoldProcess) deps.stopAttempts([outcome.ti.id], `task ${taskId} of run ${runId} cancelled`);
      deps.logger.info(
        { runId, taskId, tiId: outcome.ti.id, was: outcome.was, ...actorPayload(by) },
        `task ${taskId} cancelled`,
      );
      // The run goes on by its trigger rules: plan its downstream now.
      deps.nudge([runId]);
      return { taskInstance: tiToProto(outcome.ti) };
    },

    async deleteDag(req, ctx) {
      const by = callerOf(ctx);
      const dagId = required('dag_id', req.dagId);
      const { removed, cancelledRunIds } = await deleteDagWithHistory(deps, dagId, req.force, by);
      deps.logger.info(
        { dagId, ...removed, cancelledRunIds, ...actorPayload(by) },
        `deleted DAG ${dagId} and its history`,
      );
      if (cancelledRunIds.length > 0) deps.nudge(cancelledRunIds);
      const dagFiles =
        (await deps.dagFilesDefining?.(dagId).catch((err: unknown) => {
          deps.logger.warn({ err, dagId }, 'could not look for the DAG in the start-up DAG files');
          return [];
        })) ?? [];
      return { removed: countsToProto(removed), cancelledRunIds, dagFiles };
    },

    async cleanHistory(req, ctx) {
      const q = await cleanQueryOf(req);
      const counts = await cleanHistory(sql, q);
      if (!req.dryRun)
        deps.logger.info(
          {
            before: q.endedBefore?.toISOString(),
            dagId: q.dagId,
            keepLast: q.keepLast,
            ...counts,
            ...actorPayload(callerOf(ctx)),
          },
          'removed finished runs and their history (db clean)',
        );
      return { counts: countsToProto(counts), dryRun: req.dryRun };
    },

    async *watchCleanHistory(reqs, context) {
      const requests = reqs[Symbol.asyncIterator]();
      const first = await requests.next();
      if (first.done || first.value.action.case !== 'start')
        throw new InvalidArgumentError('start', 'the first message must name the clean (start)');
      const start = first.value.action.value;
      if (start.dryRun)
        throw new InvalidArgumentError(
          'start.dry_run',
          'a watched clean removes; count what it would remove with CleanHistory',
        );
      const q = await cleanQueryOf(start);
      let stop = false;
      // A stop asked for, or the caller gone: either ends the clean after the batch under way.
      void (async () => {
        for (let r = await requests.next(); !r.done; r = await requests.next()) {
          if (r.value.action.case === 'stop' && r.value.action.value) {
            stop = true;
            return;
          }
        }
      })().catch(() => undefined);
      const keptFrom = await keptFor(sql, q);
      let expected = NO_HISTORY;
      for await (expected of cleanBatches(sql, { ...q, dryRun: true }, keptFrom));
      yield { removed: countsToProto(NO_HISTORY), expected: countsToProto(expected) };
      let removed = NO_HISTORY;
      let stopped = false;
      const batches = cleanBatches(sql, q, keptFrom);
      for (;;) {
        if (stop || context.signal.aborted) {
          stopped = true;
          await batches.return();
          break;
        }
        const next = await batches.next();
        if (next.done) break;
        removed = next.value;
        yield { removed: countsToProto(removed), expected: countsToProto(expected) };
      }
      deps.logger.info(
        {
          before: q.endedBefore?.toISOString(),
          dagId: q.dagId,
          keepLast: q.keepLast,
          stopped,
          ...removed,
          ...actorPayload(callerOf(context)),
        },
        'removed finished runs and their history (db clean)',
      );
      yield { removed: countsToProto(removed), expected: countsToProto(expected), finished: true, stopped };
    },

    async *tailLogs(req, context) {
      const runId = parseId('run_id', req.runId);
      if (req.tryNumber < 0)
        throw new InvalidArgumentError('try_number', `must be 0 (all) or positive, got ${req.tryNumber}`);
      const taskId = req.taskId || undefined;
      const states = await runAndTiStates(sql, runId, taskId);
      if (!states) throw new NotFoundError(`run ${runId} not found`);
      // A run has a task instance for each task of its spec.
      if (taskId && states.tis.length === 0) throw new NotFoundError(`run ${runId} has no task "${taskId}"`);
      const after = new Map<string, number>();
      for (;;) {
        // Read whether everything has ended before reading lines, so no line written just
        // before the end is missed.
        const ended = req.follow ? await selectionEnded(sql, runId, taskId) : true;
        for (;;) {
          const rows = await readRunLogs(sql, {
            runId,
            taskId,
            tryNumber: req.tryNumber || undefined,
            after,
            limit: 1000,
          });
          if (rows.length === 0) break;
          for (const r of rows)
            after.set(`${r.ti_id}/${r.try_number}`, Math.max(after.get(`${r.ti_id}/${r.try_number}`) ?? 0, r.seq));
          yield { lines: rows.map(logToProto) };
          if (rows.length < 1000) break;
        }
        if (ended || context.signal.aborted) return;
        await deps.changes.wait(LOG_BACKSTOP_MS, context.signal);
      }
    },

    async *watchRun(req, context) {
      const runId = parseId('run_id', req.runId);
      const afterSeq = seqOf(req.afterSeq);
      const states = await runAndTiStates(sql, runId, undefined);
      if (!states) throw new NotFoundError(`run ${runId} not found`);
      // A run that has ended, asked for after its last event (a resume after the end): nothing is to come.
      if (!req.follow && isTerminalRun(states.run)) {
        const last = await lastEventSeq(sql, runId);
        if (last !== null && last <= afterSeq) return;
      }
      let ended = false;
      for await (const batch of watchBatches(
        deps.events,
        { runId, afterSeq, maxBehind: deps.watchBufferEvents },
        context,
        deps.logger,
      )) {
        yield { events: batch.map(eventToProto) };
        ended ||= batch.some((e) => e.kind === 'run.state' && isTerminalRun(String(e.payload.to) as never));
        if (!req.follow && ended) return;
      }
    },

    async *watchRuns(req, context) {
      const dagId = req.dagId || undefined;
      const afterSeq = seqOf(req.afterSeq);
      if (dagId !== undefined && !(await dagExists(sql, dagId))) throw new NotFoundError(`DAG "${dagId}" not found`);
      for await (const batch of watchBatches(
        deps.events,
        { dagId, afterSeq, maxBehind: deps.watchBufferEvents },
        context,
        deps.logger,
      )) {
        yield { events: batch.map(eventToProto) };
      }
    },
  };
  return guarded(deps.logger, impl);
}

/** A cursor given in a request: 0 or a seq. */
function seqOf(value: string): bigint {
  if (!/^\d{1,19}$/.test(value) || BigInt(value) > 9223372036854775807n)
    throw new InvalidArgumentError('after_seq', `must be 0 or a seq (a positive 64-bit integer), got ${echo(value)}`);
  return BigInt(value);
}

async function selectionEnded(sql: Sql, runId: string, taskId: string | undefined): Promise<boolean> {
  const states = await runAndTiStates(sql, runId, taskId);
  if (!states) return true;
  if (taskId) return states.tis.every(isTerminalTi) || isTerminalRun(states.run);
  return isTerminalRun(states.run) && states.tis.every((s) => isTerminalTi(s) || s === 'none');
}
