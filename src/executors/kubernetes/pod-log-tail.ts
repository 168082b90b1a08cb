import type { CoreV1Api } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { answerWithin } from './answer-within.js';
import { TASK_CONTAINER } from './pod-condition.js';

/** At most these lines, bytes read, and characters kept. */
const LOG_TAIL_LINES = 20;
const LOG_TAIL_BYTES = 8192;
const LOG_TAIL_CHARS = 2000;

/**
 * The last lines a pod's task container wrote, on one line, for the error of a pod that failed
 * without its agent reporting the end (an image without `leoflow`, an agent that could not reach
 * the server): bounded, and '' when they cannot be read in `waitMs` (RBAC without pods/log, the
 * pod gone, a slow API server that must not hold the attempt's retry).
 */
export async function podLogTail(
  api: CoreV1Api,
  namespace: string,
  name: string,
  waitMs: number,
  log: Logger,
): Promise<string> {
  try {
    const text = await answerWithin(
      api.readNamespacedPodLog({
        namespace,
        name,
        container: TASK_CONTAINER,
        tailLines: LOG_TAIL_LINES,
        limitBytes: LOG_TAIL_BYTES,
      }),
      waitMs,
    );
    const lines = String(text)
      .split('\n')
      .map((l) => l.trimEnd())
      .filter((l) => l !== '')
      .slice(-LOG_TAIL_LINES);
    const joined = lines.join(' | ');
    return joined.length > LOG_TAIL_CHARS ? `…${joined.slice(-LOG_TAIL_CHARS)}` : joined;
  } catch (err) {
    log.debug(
      { pod: name, namespace, err: (err as Error).message.split('\n')[0] },
      'could not read the log of a failed pod',
    );
    return '';
  }
}
