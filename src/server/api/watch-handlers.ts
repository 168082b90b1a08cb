import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import type { WorkflowDeps } from './workflow-deps.js';
import { isTerminalRun, isTerminalTi } from '../../core/states.js';
import { echo } from '../../core/check-text.js';
import { dagExists } from '../../db/dags.js';
import { lastEventSeq } from '../../db/events/last-event-seq.js';
import { readRunLogs } from '../../db/logs.js';
import type { Sql } from '../../db/sql.js';
import { runAndTiStates } from '../../db/tis.js';
import { InvalidArgumentError, NotFoundError, parseId } from './errors.js';
import { eventToProto, logToProto } from './to-proto.js';
import { watchBatches } from './watch-batches.js';

/** A following TailLogs reads again at least this often, should a NOTIFY be lost. */
const LOG_BACKSTOP_MS = 2_000;

/** The WorkflowService's streams: a run's logs, a run's events, and every run's events. */
export function watchHandlers(
  deps: WorkflowDeps,
): Pick<ServiceImpl<typeof WorkflowService>, 'tailLogs' | 'watchRun' | 'watchRuns'> {
  const { sql } = deps;
  /** The feed's events of one run or DAG (or all), batch by batch, bounded by the server's buffer. */
  const eventBatches = (filter: { runId?: string; dagId?: string; afterSeq: bigint }, context: HandlerContext) =>
    watchBatches(deps.events, { ...filter, maxBehind: deps.watchBufferEvents }, context, deps.logger);
  return {
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
        await deps.changes.wait(runId, LOG_BACKSTOP_MS, context.signal);
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
      for await (const batch of eventBatches({ runId, afterSeq }, context)) {
        yield { events: batch.map(eventToProto) };
        ended ||= batch.some((e) => e.kind === 'run.state' && isTerminalRun(String(e.payload.to) as never));
        if (!req.follow && ended) return;
      }
    },

    async *watchRuns(req, context) {
      const dagId = req.dagId || undefined;
      const afterSeq = seqOf(req.afterSeq);
      if (dagId !== undefined && !(await dagExists(sql, dagId))) throw new NotFoundError(`DAG "${dagId}" not found`);
      for await (const batch of eventBatches({ dagId, afterSeq }, context)) yield { events: batch.map(eventToProto) };
    },
  };
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
