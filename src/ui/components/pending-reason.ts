/** Why a waiting task is not running yet, in words, from the server's reason code. */
export function pendingReasonText(reason: string): string {
  if (!reason) return '';
  const [code, ...rest] = reason.split(':');
  const detail = rest.join(':');
  switch (code) {
    case 'UPSTREAM_RUNNING':
      return 'waiting for its upstream tasks to finish';
    case 'RETRY_BACKOFF_UNTIL':
      return `waiting to retry, at ${new Date(detail).toLocaleTimeString()}`;
    case 'DAG_PAUSED':
      return 'the DAG is paused';
    case 'MAX_ACTIVE_RUNS':
      return 'the DAG has as many active runs as it may';
    case 'RUN_QUEUED':
      return 'its run is queued';
    case 'DISPATCH_QUEUE_FULL':
      return 'the dispatch queue is full; it goes at the next tick';
    case 'WAITING_FOR_DISPATCH':
      return 'waiting for a dispatch slot';
    case 'AGENT_SLOTS_FULL':
      return 'every matching agent has all its slots busy';
    case 'AGENT_MAX_PARALLEL':
      return 'the agents run as many tasks as they may';
    case 'NO_EXECUTOR':
      return `no executor to run it${detail ? `: ${detail}` : ''}`;
    case 'DISPATCH_REFUSED':
      return `the executor refused it${detail ? `: ${detail}` : ''}`;
    case 'WAITING_FOR_EVENT':
      return `waiting for the event ${detail}`;
    case 'WAITING_FOR_APPROVAL':
      return `waiting for an approval (role ${detail || 'operator'} or above)`;
    case 'POD_PENDING':
      return `its pod is pending${detail ? ` (${detail})` : ''}`;
    default:
      return reason.toLowerCase().replaceAll('_', ' ');
  }
}
