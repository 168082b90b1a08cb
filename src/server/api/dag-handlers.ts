import type { ServiceImpl } from '@connectrpc/connect';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import type { WorkflowDeps } from './workflow-deps.js';
import { actorPayload } from '../../core/actor.js';
import { getDagView, listDags, setDagPaused, upsertDag } from '../../db/dags.js';
import { callerOf } from '../auth/caller.js';
import { deleteDagWithHistory } from './delete-dag.js';
import { InvalidArgumentError, NotFoundError, required } from './errors.js';
import { countsToProto, dagToProto } from './to-proto.js';

const MAX_SOURCE_BYTES = 1024 * 1024;

/** The WorkflowService's DAG handlers: apply, read, pause and delete. */
export function dagHandlers(
  deps: WorkflowDeps,
): Pick<ServiceImpl<typeof WorkflowService>, 'applyDag' | 'getDag' | 'listDags' | 'pauseDag' | 'deleteDag'> {
  const { sql } = deps;
  return {
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
  };
}
