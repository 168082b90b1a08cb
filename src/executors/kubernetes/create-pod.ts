import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { answerWithin } from './answer-within.js';
import { apiVerdict } from './api-error.js';

/**
 * One pod's create, sent until the API server answers for good. AlreadyExists is success (a
 * leader overlap, or a create whose first answer was lost, made the same pod by its name). A
 * refusal (RBAC, a missing namespace, an invalid spec, a quota) is final at once: a retry would
 * be refused the same way, in a hot loop. 429, 5xx and no answer are sent again after the
 * server's Retry-After or a jittered backoff, until `retryMs` has passed.
 */

export type CreateOutcome =
  /** The pod as the API server stored it. */
  | { kind: 'created'; pod: V1Pod }
  | { kind: 'exists' }
  /** The attempt fails with this error (its retries apply). */
  | { kind: 'failed'; error: string }
  /** No longer ours to create (shutdown, lead lost, the attempt ended meanwhile): the next leader does it. */
  | { kind: 'abandoned' };

export interface CreatePodOptions {
  api: CoreV1Api;
  namespace: string;
  body: V1Pod;
  log: Logger;
  /** How long a create the server may accept later is tried. */
  retryMs: number;
  /** A create unanswered this long is sent again. */
  requestTimeoutMs: number;
  /** Asked before each new try: false stops the create. */
  stillWanted(): boolean;
  /** Each try's send time, for the start latency. */
  onSend?(): void;
  onError?(reason: string): void;
}

const BACKOFF_MIN_MS = 200;
const BACKOFF_MAX_MS = 10_000;
/** Retry-After beyond this is capped: the drainer comes back to look. */
const RETRY_AFTER_MAX_MS = 60_000;

export async function createPod(o: CreatePodOptions): Promise<CreateOutcome> {
  const deadline = performance.now() + o.retryMs;
  const name = o.body.metadata?.name;
  let backoff = BACKOFF_MIN_MS;
  for (;;) {
    o.onSend?.();
    let verdict;
    try {
      const pod = await answerWithin(
        o.api.createNamespacedPod({ namespace: o.namespace, body: o.body }),
        o.requestTimeoutMs,
      );
      return { kind: 'created', pod };
    } catch (err) {
      verdict = apiVerdict(err);
    }
    if (verdict.kind === 'exists') return { kind: 'exists' };
    o.onError?.(verdict.reason);
    const message = verdict.message ? `: ${verdict.message}` : '';
    if (verdict.kind === 'refused')
      return { kind: 'failed', error: `POD_CREATE_REFUSED:${verdict.code} ${verdict.reason}${message}` };
    const wait = Math.min(RETRY_AFTER_MAX_MS, verdict.afterMs ?? backoff / 2 + Math.random() * (backoff / 2));
    backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
    if (performance.now() + wait > deadline) {
      return {
        kind: 'failed',
        error:
          `POD_CREATE_FAILED:${verdict.reason}: ` +
          `the API server did not take the pod within ${Math.round(o.retryMs / 1000)}s${message}`,
      };
    }
    o.log.warn(
      { pod: name, namespace: o.namespace, reason: verdict.reason, retryInMs: Math.round(wait) },
      'pod create not taken: retrying',
    );
    await new Promise((r) => setTimeout(r, wait));
    if (!o.stillWanted()) return { kind: 'abandoned' };
  }
}
