import type { CoreV1Api } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { AttemptReporter } from '../executor.js';
import type { KubernetesStore } from './kubernetes-executor-options.js';
import type { PodAttempt, PodAttempts } from './pod-attempts.js';
import { answerWithin } from './answer-within.js';
import { joinTail, podLogTail } from './pod-log-tail.js';

/**
 * How an attempt followed as a pod is ended from this side: failed here (its pod refused or never
 * going to start) or lost (its pod gone, failed or on a lost node), and a pod's delete. Shared by
 * the pod's changes, the sweep, a retry's wait for earlier tries and the adoption at a new lead.
 */

/** The attempt's end waits for its log tail this long at most: a slow API server must not hold its retry. */
const LOG_TAIL_WAIT_MS = 5000;

export interface PodAttemptEndsOptions {
  api: CoreV1Api;
  reporter: AttemptReporter;
  store: KubernetesStore;
  live: PodAttempts;
  log: Logger;
  /** A request to the API server unanswered this long is given up. */
  requestTimeoutMs: number;
}

/** The ids a warning about an attempt's pod carries. */
function logFields(p: PodAttempt, error: string) {
  const a = p.attempt;
  return { tiId: a.tiId, runId: a.runId, taskId: a.taskId, try: a.tryNumber, pod: p.name, error };
}

export class PodAttemptEnds {
  readonly #o: PodAttemptEndsOptions;

  constructor(o: PodAttemptEndsOptions) {
    this.#o = o;
  }

  /** The attempt failed here (its pod refused or never going to start): reported, its retries apply. */
  async fail(p: PodAttempt, error: string, deleteGraceS?: number): Promise<void> {
    if (p.over) return;
    p.over = true;
    this.#o.log.warn(logFields(p, error), `task ${p.attempt.taskId}: ${error}`);
    if (deleteGraceS !== undefined) await this.deletePod(p.namespace, p.name, deleteGraceS);
    this.#o.live.untrack(p);
    try {
      await this.#o.reporter.finished(p.attempt, { outcome: 'spawn_failed', exitCode: null, signal: null, error });
    } catch (err) {
      this.#o.log.error({ err, tiId: p.attempt.tiId }, 'could not record the end of an attempt whose pod failed');
    }
  }

  /**
   * The attempt is lost (its pod gone, failed or on a lost node): its retries apply. With `free`
   * (a lost node, an eviction: nothing the task did) the loss spends none of them.
   */
  async lose(p: PodAttempt, error: string, o: { withLogTail?: boolean; free?: boolean } = {}): Promise<void> {
    if (o.withLogTail) error = await this.#withLogTail(p, error);
    try {
      if (await this.#o.store.lost(p.attempt, error, o.free === true)) {
        this.#o.log.warn(logFields(p, error), `task ${p.attempt.taskId} lost: ${error}`);
      }
    } catch (err) {
      this.#o.log.error({ err, tiId: p.attempt.tiId }, 'could not end a lost attempt (the heartbeat reaper will)');
    }
  }

  /** `fail`, its error ending with the pod's last lines (read before the pod is deleted). */
  async failWithLogTail(p: PodAttempt, error: string, deleteGraceS: number): Promise<void> {
    if (p.over) return;
    await this.fail(p, await this.#withLogTail(p, error), deleteGraceS);
  }

  /**
   * The task's own last lines, as its agent delivered them; else (it never ran, or said nothing)
   * the pod's log, the agent's JSON records cut to their messages (pod-log-tail.ts).
   */
  async #withLogTail(p: PodAttempt, error: string): Promise<string> {
    const own = await answerWithin(this.#o.store.lastLines(p.attempt), LOG_TAIL_WAIT_MS).catch((err: unknown) => {
      this.#o.log.debug({ err, tiId: p.attempt.tiId }, 'could not read the last lines of a failed attempt');
      return [];
    });
    if (own.length > 0) return `${error}; last lines: ${joinTail(own)}`;
    const tail = await podLogTail(
      this.#o.api,
      p.namespace,
      p.name,
      Math.min(LOG_TAIL_WAIT_MS, this.#o.requestTimeoutMs),
      this.#o.log,
    );
    return tail === '' ? error : `${error}; last lines: ${tail}`;
  }

  async deletePod(namespace: string, name: string, gracePeriodSeconds: number): Promise<void> {
    try {
      await this.#o.api.deleteNamespacedPod({ namespace, name, gracePeriodSeconds });
    } catch (err) {
      if ((err as { code?: number }).code === 404) return;
      this.#o.log.warn(
        { namespace, pod: name, err: (err as Error).message.split('\n')[0] },
        'could not delete a pod (the next sweep or leader tries again)',
      );
    }
  }
}
