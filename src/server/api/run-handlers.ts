import { currentOutputs } from '../../db/attempts/current-outputs.js';
import { INLINE_OUTPUT_BYTES, withOutputs } from './outputs-in-response.js';
import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type {
  CancelRunRequest,
  CancelTaskInstanceRequest,
  ClearTaskInstanceRequest,
  GetRunRequest,
  GetTaskOutputRequest,
  ListRunsRequest,
  ListTaskInstancesRequest,
  TriggerRunRequest,
  WorkflowService,
} from '../../gen/leoflow/v1/workflow_pb.js';
import type { TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import type { WorkflowDeps } from './workflow-deps.js';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { randomBytes } from 'node:crypto';
import { actorPayload } from '../../core/actor.js';
import { parseTraceparent, parseTracestate } from '../../core/trace-context.js';
import { cancelRun as writeRunCancel } from '../../db/cancel-run.js';
import { cancelTaskInstance as writeTiCancel } from '../../db/cancel-task-instance.js';
import { clearTaskInstance as writeTiClear } from '../../db/clear-task-instance.js';
import { dagExists } from '../../db/dags.js';
import { settledSeq } from '../../db/events/settled-seq.js';
import { triggeredBy } from '../../db/events/triggered-by.js';
import { createRunOfDag, getRunView, listRuns as readRuns } from '../../db/runs.js';
import { listTiViews } from '../../db/tis.js';
import { taskOutputs } from '../../db/attempts/task-output.js';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { callerOf } from '../auth/caller.js';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, parseId, required } from './errors.js';
import { parseConf } from './parse-conf.js';
import { pageOfRuns } from './runs-page.js';
import { mappedStateCounts, runTisPage } from '../../db/run-tis-page.js';
import { MAX_TI_PAGE_SIZE, parseTiPageToken, readTiPage } from './run-tis-page.js';
import { runStateOfWire, runToProto, tiToProto } from './to-proto.js';

/** The WorkflowService's run handlers: trigger, read, cancel, and clear or cancel one task instance. */
export function runHandlers(
  deps: WorkflowDeps,
): Pick<
  ServiceImpl<typeof WorkflowService>,
  | 'triggerRun'
  | 'getRun'
  | 'listRuns'
  | 'cancelRun'
  | 'listTaskInstances'
  | 'clearTaskInstance'
  | 'cancelTaskInstance'
  | 'getTaskOutput'
> {
  return {
    triggerRun: (req, ctx) => triggerRun(deps, req, ctx),
    getRun: (req) => getRun(deps, req),
    listRuns: (req) => listRuns(deps, req),
    cancelRun: (req, ctx) => cancelRun(deps, req, ctx),
    getTaskOutput: (req) => getTaskOutput(deps, req),
    listTaskInstances: (req) => listTaskInstances(deps, req),
    clearTaskInstance: (req, ctx) => clearTaskInstance(deps, req, ctx),
    cancelTaskInstance: (req, ctx) => cancelTaskInstance(deps, req, ctx),
  };
}

/** A run of the DAG's current version, by the caller, with its conf, key and trace context. */
async function triggerRun(deps: WorkflowDeps, req: TriggerRunRequest, ctx: HandlerContext) {
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
  const result = await createRunOfDag(deps.sql, {
    dagId,
    runKey,
    runType: 'manual',
    logicalDate: now,
    conf,
    defaultExecutor: deps.defaultExecutor,
    by,
    ...(caller ? { caller } : {}),
    ...(req.noCache ? { noCache: true } : {}),
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
}

/** A run with its task instances (and their outputs, when asked). */
async function getRun(deps: WorkflowDeps, req: GetRunRequest) {
  const runId = parseId('run_id', req.runId);
  // Settled before the reads begin, so they reflect every event up to it (proto: watch_seq).
  const watchSeq = req.withWatchSeq ? await settledSeq(deps.sql) : 0n;
  const [run, page, by] = await Promise.all([
    getRunView(deps.sql, runId),
    tiPage(deps, runId, req),
    triggeredBy(deps.sql, runId),
  ]);
  if (!run) throw new NotFoundError(`run ${runId} not found`);
  return {
    run: runToProto(run, by),
    taskInstances: page.taskInstances,
    nextPageToken: page.nextPageToken,
    watchSeq: (watchSeq ?? 0n).toString(),
  };
}

/**
 * A page of a run's task instances, as GetRun and ListTaskInstances give it: its own first, then
 * each mapped task's in item order, a mapped task's own instance counting its mapped instances by
 * state (on whatever page they are), and the page's outputs when asked.
 */
async function tiPage(
  deps: WorkflowDeps,
  runId: string,
  req: { pageSize?: number; pageToken?: string; withOutputs: boolean },
): Promise<{ taskInstances: TaskInstance[]; nextPageToken: string }> {
  // Unset (a caller in this process may leave them out) is the default, as on the wire.
  const pageSize = req.pageSize ?? 0;
  if (pageSize < 0 || pageSize > MAX_TI_PAGE_SIZE)
    throw new InvalidArgumentError('page_size', `must be between 0 and ${MAX_TI_PAGE_SIZE}, got ${pageSize}`);
  const start = parseTiPageToken(req.pageToken ?? '');
  const page = await readTiPage((from, limit) => runTisPage(deps.sql, runId, from, limit), start, pageSize);
  const parents = page.tis.filter((t) => t.map_count !== null && t.map_count !== undefined).map((t) => t.id);
  const counts = await mappedStateCounts(deps.sql, parents);
  for (const ti of page.protos) Object.assign(ti.mapStateCounts, counts.get(ti.tiId));
  const ids = page.tis.map((t) => t.id);
  const taskInstances = req.withOutputs
    ? withOutputs(page.protos, await currentOutputs(deps.sql, runId, INLINE_OUTPUT_BYTES, ids))
    : page.protos;
  return { taskInstances, nextPageToken: page.nextPageToken };
}

/** A page of runs, newest first, by DAG, states and creation time. */
async function listRuns(deps: WorkflowDeps, req: ListRunsRequest) {
  if (req.limit < 0 || req.limit > 1000)
    throw new InvalidArgumentError('limit', `must be between 0 and 1000, got ${req.limit}`);
  const states = req.states.map(runStateOfWire);
  const limit = req.limit || 50;
  const beforeId = req.pageToken ? parseId('page_token', req.pageToken) : undefined;
  const createdFrom = req.createdFrom ? timestampDate(req.createdFrom) : undefined;
  const createdTo = req.createdTo ? timestampDate(req.createdTo) : undefined;
  // Settled before the runs are read, so a change made between the two is replayed, not missed.
  const watchSeq = req.withWatchSeq ? await settledSeq(deps.sql) : 0n;
  // One more than asked for tells whether another page follows.
  const runs = await readRuns(deps.sql, {
    dagId: req.dagId || undefined,
    states,
    limit: limit + 1,
    beforeId,
    createdFrom,
    createdTo,
  });
  // A DAG with runs exists (they are deleted with it): only an empty list needs the check.
  if (req.dagId && runs.length === 0 && !beforeId && !(await dagExists(deps.sql, req.dagId)))
    throw new NotFoundError(`DAG "${req.dagId}" not found`);
  return { ...pageOfRuns(runs, limit), watchSeq: (watchSeq ?? 0n).toString() };
}

/** Cancels a run that has not ended; its running attempts are stopped. */
async function cancelRun(deps: WorkflowDeps, req: CancelRunRequest, ctx: HandlerContext) {
  const by = callerOf(ctx);
  const runId = parseId('run_id', req.runId);
  const outcome = await writeRunCancel(deps.sql, runId, by);
  if (outcome.kind === 'not_found') throw new NotFoundError(`run ${runId} not found`);
  if (outcome.kind === 'already_ended')
    throw new FailedPreconditionError(`run ${runId} has already ended (${outcome.run.state})`);
  deps.stopAttempts(outcome.stoppedTiIds, `run ${runId} cancelled`);
  deps.logger.info({ runId, stopped: outcome.stoppedTiIds.length, ...actorPayload(by) }, 'run cancelled');
  deps.nudge();
  return { run: runToProto(outcome.run) };
}

/** The outputs a task recorded, of one try or of each. */
async function getTaskOutput(deps: WorkflowDeps, req: GetTaskOutputRequest) {
  const runId = parseId('run_id', req.runId);
  const taskId = required('task_id', req.taskId);
  if (req.tryNumber < 0)
    throw new InvalidArgumentError('try_number', `must be 0 (every try) or more, got ${req.tryNumber}`);
  const outputs = await taskOutputs(deps.sql, runId, taskId, req.tryNumber || undefined);
  if (outputs.length === 0 && !(await listTiViews(deps.sql, runId)).some((t) => t.task_id === taskId)) {
    throw new NotFoundError(`task "${taskId}" of run ${runId} not found`);
  }
  return {
    outputs: outputs.map((o) => ({
      tryNumber: o.tryNumber,
      json: o.json,
      sizeBytes: o.sizeBytes,
      recordedAt: timestampFromDate(o.recordedAt),
    })),
  };
}

/** A page of a run's task instances (and their outputs, when asked), as GetRun's. */
async function listTaskInstances(deps: WorkflowDeps, req: ListTaskInstancesRequest) {
  const runId = parseId('run_id', req.runId);
  const page = await tiPage(deps, runId, req);
  // Every run has task instances (a DAG has tasks): only none needs the run looked up.
  if (page.taskInstances.length === 0 && !(await getRunView(deps.sql, runId)))
    throw new NotFoundError(`run ${runId} not found`);
  return page;
}

/** Runs an ended task instance again (and its downstream, when asked), re-opening its run. */
async function clearTaskInstance(deps: WorkflowDeps, req: ClearTaskInstanceRequest, ctx: HandlerContext) {
  const by = callerOf(ctx);
  const runId = parseId('run_id', req.runId);
  const taskId = required('task_id', req.taskId);
  const outcome = await writeTiClear(deps.sql, {
    runId,
    taskId,
    downstream: req.downstream,
    noCache: req.noCache,
    by,
  });
  if (outcome.kind === 'run_not_found') throw new NotFoundError(`run ${runId} not found`);
  if (outcome.kind === 'task_not_found') throw new NotFoundError(`run ${runId} has no task "${taskId}"`);
  if (outcome.kind === 'not_ended') {
    throw new FailedPreconditionError(
      `task "${taskId}" of run ${runId} is ${outcome.ti.state}: ` +
        `only a task instance that has ended (success, failed, upstream_failed, skipped, cancelled) can be cleared`,
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
}

/** Cancels one task instance that has not ended; the run goes on by its trigger rules. */
async function cancelTaskInstance(deps: WorkflowDeps, req: CancelTaskInstanceRequest, ctx: HandlerContext) {
  const by = callerOf(ctx);
  const runId = parseId('run_id', req.runId);
  const taskId = required('task_id', req.taskId);
  const outcome = await writeTiCancel(deps.sql, runId, taskId, by);
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
}
