import type { ServiceImpl } from '@connectrpc/connect';
import { actorPayload } from '../../core/actor.js';
import { roleAllows } from '../../core/api-role.js';
import { MAX_APPROVAL_MESSAGE_CHARS } from '../../core/dag/read-wait.js';
import { endWaits, waitEnds } from '../../db/waits/end-waits.js';
import { approvalOf } from '../../db/waits/approval-of.js';
import { listTiViews } from '../../db/tis.js';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { callerOf, callerTokenKey } from '../auth/caller.js';
import {
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  parseId,
  required,
} from './errors.js';
import { tiToProto } from './to-proto.js';
import type { WorkflowDeps } from './workflow-deps.js';

/**
 * ApproveTask: a waiting approval task approved (success) or rejected (failed) by a caller whose
 * token has the approval's role or above (any caller when the API runs open on loopback). Who,
 * when (the event's time) and the note go into the run's events with the move.
 */
export function approvalHandlers(deps: WorkflowDeps): Pick<ServiceImpl<typeof WorkflowService>, 'approveTask'> {
  return {
    async approveTask(req, ctx) {
      const by = callerOf(ctx);
      const runId = parseId('run_id', req.runId);
      const taskId = required('task_id', req.taskId);
      if (req.note.length > MAX_APPROVAL_MESSAGE_CHARS)
        throw new InvalidArgumentError(
          'note',
          `must be at most ${MAX_APPROVAL_MESSAGE_CHARS} characters, got ${req.note.length}`,
        );
      if (req.note.includes('\0')) throw new InvalidArgumentError('note', 'must not contain a NUL character');
      const { target, runFound } = await approvalOf(deps.sql, runId, taskId);
      if (!runFound) throw new NotFoundError(`run ${runId} not found`);
      if (!target) throw new NotFoundError(`run ${runId} has no task "${taskId}"`);
      if (target.state !== 'waiting' || target.kind !== 'approval') {
        throw new FailedPreconditionError(
          target.kind === 'event'
            ? `task "${taskId}" of run ${runId} waits for an event, not an approval`
            : `task "${taskId}" of run ${runId} is not waiting for an approval (it is ${target.state})`,
        );
      }
      const token = ctx.values.get(callerTokenKey);
      if (token && target.role && !roleAllows(token.role, target.role)) {
        throw new PermissionDeniedError(
          `task "${taskId}" of run ${runId} needs role ${target.role} or above to approve; ` +
            `token "${token.id}" has role ${token.role}`,
        );
      }
      const verdict = req.reject ? 'rejected' : 'approved';
      const ended = await endWaits(
        deps.sql,
        waitEnds(deps.sql, [
          {
            tiId: target.ti_id,
            to: req.reject ? 'failed' : 'success',
            how: verdict,
            eventId: null,
            detail: { ...actorPayload(by), ...(req.note !== '' ? { note: req.note } : {}) },
          },
        ]),
      );
      if (ended.length === 0) {
        throw new FailedPreconditionError(`task "${taskId}" of run ${runId} is no longer waiting for an approval`);
      }
      deps.logger.info(
        { runId, taskId, tiId: target.ti_id, verdict, ...actorPayload(by) },
        `task ${taskId} ${verdict}`,
      );
      deps.nudge([runId]);
      const ti = (await listTiViews(deps.sql, runId)).find((t) => t.id === target.ti_id);
      return { taskInstance: ti ? tiToProto(ti) : undefined };
    },
  };
}
