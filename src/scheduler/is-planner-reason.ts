import { WAITING_FOR_DISPATCH } from '../dispatch/dispatcher.js';

/**
 * Whether the planner itself sets this pending reason; those of a dispatcher (e.g.
 * NO_AGENT_WITH_LABELS) are its own and the planner leaves them alone.
 */
export function isPlannerReason(reason: string | null): boolean {
  return (
    reason !== null &&
    // DISPATCH_QUEUE_FULL: WAITING_FOR_DISPATCH's old name, still on rows written before it.
    (['DISPATCH_QUEUE_FULL', 'DAG_PAUSED', 'MAX_ACTIVE_RUNS', 'RUN_QUEUED', 'UPSTREAM_RUNNING'].includes(reason) ||
      reason.startsWith('NO_EXECUTOR:') ||
      reason.startsWith(`${WAITING_FOR_DISPATCH}:`))
  );
}
