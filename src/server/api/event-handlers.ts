import type { ServiceImpl } from '@connectrpc/connect';
import { randomBytes } from 'node:crypto';
import { EVENT_KEY, EVENT_NAME, EVENT_NAME_RULE } from '../../core/event-match.js';
import { takeEvent } from '../../db/external-events/take-event.js';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { callerOf } from '../auth/caller.js';
import { announceTakenEvent } from './announce-taken-event.js';
import { InvalidArgumentError, required } from './errors.js';
import { parseConf } from './parse-conf.js';
import { runToProto } from './to-proto.js';
import type { WorkflowDeps } from './workflow-deps.js';

/** The WorkflowService's events in: SendEvent starts the runs of the DAGs its event triggers. */
export function eventHandlers(deps: WorkflowDeps): Pick<ServiceImpl<typeof WorkflowService>, 'sendEvent'> {
  return {
    async sendEvent(req, ctx) {
      const by = callerOf(ctx);
      const name = required('name', req.name);
      if (!EVENT_NAME.test(name)) throw new InvalidArgumentError('name', `must be ${EVENT_NAME_RULE}`);
      if (req.eventKey !== '' && !EVENT_KEY.test(req.eventKey)) {
        throw new InvalidArgumentError(
          'event_key',
          'must be 1-200 characters of letters, digits and _ . : + -, starting with a letter or digit',
        );
      }
      const payload = parseConf(req.payloadJson, 'payload_json');
      const key = req.eventKey || `made__${new Date().toISOString()}__${randomBytes(6).toString('hex')}`;
      const taken = await takeEvent(deps.sql, { name, key, payload, by, defaultExecutor: deps.defaultExecutor });
      announceTakenEvent(taken, by, deps, { fields: { event: name }, message: 'event received' });
      return {
        eventId: taken.id,
        duplicate: taken.duplicate,
        runs: taken.runs.map((r) => runToProto(r, taken.duplicate ? null : by)),
        waitsEnded: taken.endedWaits.length,
      };
    },
  };
}
