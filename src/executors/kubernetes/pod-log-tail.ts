import type { CoreV1Api } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { answerWithin } from './answer-within.js';
import { TASK_CONTAINER } from './pod-condition.js';

/** At most these lines, bytes read, and characters kept. */
const LOG_TAIL_LINES = 20;
const LOG_TAIL_BYTES = 8192;
const LOG_TAIL_CHARS = 2000;

/** The last lines on one line, bounded: what an attempt's error ends with. */
export function joinTail(lines: string[]): string {
  const joined = lines.slice(-LOG_TAIL_LINES).join(' | ');
  return joined.length > LOG_TAIL_CHARS ? `…${joined.slice(-LOG_TAIL_CHARS)}` : joined;
}

/**
 * A line of the pod's log as a person needs it: the agent's own JSON log records (pino: `level`,
 * `time`, `msg`) cut to their message and error, anything else (the shell's `leoflow: not found`,
 * a crash's stack) as it is.
 */
export function agentRecordText(line: string): string {
  if (!line.startsWith('{')) return line;
  let r: unknown;
  try {
    r = JSON.parse(line);
  } catch {
    return line;
  }
  if (typeof r !== 'object' || r === null || typeof (r as { msg?: unknown }).msg !== 'string') return line;
  const { msg, err } = r as { msg: string; err?: { message?: unknown } };
  return typeof err?.message === 'string' ? `${msg}: ${err.message}` : msg;
}

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
    return joinTail(
      String(text)
        .split('\n')
        .map((l) => agentRecordText(l.trimEnd()))
        .filter((l) => l !== ''),
    );
  } catch (err) {
    log.debug(
      { pod: name, namespace, err: (err as Error).message.split('\n')[0] },
      'could not read the log of a failed pod',
    );
    return '';
  }
}
