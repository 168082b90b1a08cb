import type { ServiceImpl } from '@connectrpc/connect';
import type { CleanHistoryRequest, WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import type { WorkflowDeps } from './workflow-deps.js';
import { timestampDate } from '@bufbuild/protobuf/wkt';
import { actorPayload } from '../../core/actor.js';
import { DEFAULT_KEEP_LAST, MAX_KEEP_LAST } from '../../core/keep-last.js';
import { dagExists } from '../../db/dags.js';
import { NO_HISTORY } from '../../db/history/remove-runs.js';
import type { Sql } from '../../db/sql.js';
import { callerOf } from '../auth/caller.js';
import { cleanBatches, cleanHistory, keptFor, type CleanQuery } from './clean-history.js';
import { InvalidArgumentError, NotFoundError } from './errors.js';
import { countsToProto } from './to-proto.js';

/** The WorkflowService's history handlers: remove finished runs at once, or in watched batches. */
export function historyHandlers(
  deps: WorkflowDeps,
): Pick<ServiceImpl<typeof WorkflowService>, 'cleanHistory' | 'watchCleanHistory'> {
  const { sql } = deps;
  return {
    async cleanHistory(req, ctx) {
      const q = await cleanQueryOf(sql, req);
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
      const q = await cleanQueryOf(sql, start);
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
  };
}

/** A clean's request checked (the same for CleanHistory and WatchCleanHistory), before anything is read. */
async function cleanQueryOf(sql: Sql, req: CleanHistoryRequest): Promise<CleanQuery> {
  if (!req.before)
    throw new InvalidArgumentError('before', 'is required: runs that ended before this time are removed');
  const before = timestampDate(req.before);
  if (Number.isNaN(before.getTime())) throw new InvalidArgumentError('before', 'is not a valid time');
  if (before.getTime() > Date.now()) {
    throw new InvalidArgumentError(
      'before',
      `${before.toISOString()} is in the future: only runs that have ended can be removed, ` +
        `so give a time that has passed`,
    );
  }
  const keepLast = req.keepLast ?? DEFAULT_KEEP_LAST;
  if (keepLast < 0 || keepLast > MAX_KEEP_LAST) {
    throw new InvalidArgumentError(
      'keep_last',
      `must be 0 to ${MAX_KEEP_LAST} (each DAG's latest finished runs to keep), got ${keepLast}: ` +
        `to keep more history, give an earlier before`,
    );
  }
  const dagId = req.dagId || undefined;
  if (dagId !== undefined && !(await dagExists(sql, dagId))) throw new NotFoundError(`DAG "${dagId}" not found`);
  return { endedBefore: before, dagId, keepLast, dryRun: req.dryRun };
}
