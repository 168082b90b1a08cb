import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { AttemptStanding } from '../../core/attempt.js';
import type { Attempt, AttemptReporter } from '../executor.js';
import type { CreateOutcome } from './create-pod.js';
import type { PodSettings } from './pod-manifest.js';

/**
 * What the kubernetes executor is given, in a file of its own so that the parts it hands the
 * store and metrics to need not import the executor itself.
 */

/** The store operations the executor needs beyond the reporter (passed in: executors never import db). */
export interface KubernetesStore {
  /**
   * Ends an attempt as lost (its retries apply), guarded by its try and token and by being still
   * queued or running: false when it was over already (its agent reported, or it was cancelled).
   * `free`: the loss was not the task's doing (its node lost, its pod evicted), so it spends no
   * try: the TI is retried at once and its tries allowed grow by one.
   */
  lost(attempt: Attempt, error: string, free: boolean): Promise<boolean>;
  /** The pending reason of an attempt still queued (null clears it). */
  pending(attempt: Attempt, reason: string | null): Promise<void>;
  /**
   * The last lines the attempt's task wrote that its agent delivered (oldest first; none when it
   * never ran): a failed pod's error quotes them rather than the agent's own log.
   */
  lastLines(attempt: Attempt): Promise<string[]>;
  /** A pod is gone: its agent (named after it) is forgotten. */
  podGone(podName: string): Promise<void>;
  /**
   * Where each of these attempts stands, by TI id; one over only a moment ago is left out (its
   * agent is on its way out). What ends the pods of attempts the store has ended.
   */
  standings(attempts: Attempt[]): Promise<Map<string, AttemptStanding>>;
  /** Every attempt of this executor still queued or running (at a change of leader). */
  active(): Promise<{ attempt: Attempt; running: boolean }[]>;
}

export interface KubernetesMetrics {
  podCreated(): void;
  podCreateError(reason: string): void;
  podStarted(seconds: number): void;
}

export interface KubernetesExecutorOptions {
  kubeConfig: KubeConfig;
  pods: PodSettings & {
    /** A pod unschedulable this long fails its attempt. */
    podPendingTimeoutMs: number;
    keepSucceededMs: number;
    keepFailedMs: number;
  };
  reporter: AttemptReporter;
  store: KubernetesStore;
  logger: Logger;
  metrics?: KubernetesMetrics;
  /** Told of each pod create once the server has answered for good (for its span). */
  podCreated?: (c: {
    attempt: Attempt;
    pod: string;
    namespace: string;
    start: Date;
    outcome: CreateOutcome['kind'];
    error: string | null;
  }) => void;
  /** How long a create the server may accept later (429, 5xx, no answer) is retried. Default 5 min. */
  createRetryMs?: number;
  /** A create unanswered this long is sent again. Default 30 s. */
  requestTimeoutMs?: number;
  /**
   * A pod running this long whose agent has not reported its attempt started fails it
   * (POD_AGENT_NEVER_CONNECTED, with the pod's last lines). Default 60 s.
   */
  agentConnectMs?: number;
  /** How often the attempts of live pods are read from the store. Default 5 s. */
  standingsMs?: number;
  /** How often pending timeouts and finished pods' retention are looked at. Default 1 s. */
  sweepMs?: number;
  /**
   * A pod pending this long with no reason in its status has its events listed for one, and again
   * at most this often. Default 5 s.
   */
  pendingEventsMs?: number;
}
