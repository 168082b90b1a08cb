import type { ServiceImpl } from '@connectrpc/connect';
import { randomBytes } from 'node:crypto';
import { actorPayload } from '../../core/actor.js';
import { EVENT_NAME, EVENT_NAME_RULE } from '../../core/event-match.js';
import { takeEvent } from '../../db/external-events/take-event.js';
import type { WorkflowService } from '../../gen/leoflow/v1/workflow_pb.js';
import { callerOf } from '../auth/caller.js';
import { InvalidArgumentError, required } from './errors.js';
import { parseConf } from './parse-conf.js';
import { runToProto } from './to-proto.js';
import type { WorkflowDeps } from './workflow-deps.js';

/** A sender's key: as a run key is spelled, so it can stand in logs and commands unquoted. */
const EVENT_KEY = /^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$/;

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
      if (!taken.duplicate) {
        deps.logger.info(
          {
            event: name,
            eventId: taken.id,
            runs: taken.runs.map((r) => r.id),
            waitsEnded: taken.endedWaits.map((w) => w.ti_id),
            ...actorPayload(by),
          },
          'event received',
        );
        const toPlan = [...taken.runs.map((r) => r.id), ...taken.endedWaits.map((w) => w.run_id)];
        if (toPlan.length > 0) deps.nudge([...new Set(toPlan)]);
      }
      return {
        eventId: taken.id,
        duplicate: taken.duplicate,
        runs: taken.runs.map((r) => runToProto(r, taken.duplicate ? null : by)),
        waitsEnded: taken.endedWaits.length,
      };
    },
  };
}
