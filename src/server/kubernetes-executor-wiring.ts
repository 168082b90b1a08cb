import type { Logger } from 'pino';
import type { AttemptReporter } from '../core/attempt.js';
import { activeAttemptsOf } from '../db/attempts/active-attempts-of.js';
import { attemptStandings } from '../db/attempts/attempt-standings.js';
import { endLostAttempt } from '../db/attempts/end-lost-attempt.js';
import { lastLogLines } from '../db/attempts/last-log-lines.js';
import { notePendingReason } from '../db/attempts/note-pending-reason.js';
import { forgetAgent } from '../db/forget-agent.js';
import type { Sql } from '../db/sql.js';
import type { KubernetesExecutor } from '../executors/kubernetes/kubernetes-executor.js';
import type { ReplicaTracing } from '../tracing/replica-tracing.js';
import type { Config } from './config/config.js';
import type { Metrics } from './observability/metrics.js';

/** How many of a task's last lines a failed pod's error quotes. */
const LAST_LINES = 20;

/**
 * The kubernetes executor of a replica whose config has one, on the store operations it needs.
 * Loaded only then: the Kubernetes client alone takes longer to load than the rest of a warm start.
 */
export async function startKubernetesExecutor(
  config: Config,
  d: {
    install: string;
    sql: Sql;
    reporter: AttemptReporter;
    logger: Logger;
    metrics: Metrics;
    tracing: ReplicaTracing | null;
    nudge(runIds: string[]): void;
  },
): Promise<KubernetesExecutor> {
  const k = config.kubernetes!;
  const [{ createKubernetesExecutor }, { loadKubeConfig }] = await Promise.all([
    import('../executors/kubernetes/kubernetes-executor.js'),
    import('../executors/kubernetes/load-kube-config.js'),
  ]);
  return createKubernetesExecutor({
    kubeConfig: loadKubeConfig(k.kubeconfig),
    pods: { ...k, install: d.install, killGraceMs: config.killGraceMs },
    reporter: d.reporter,
    store: {
      lost: async (a, error, free) => {
        const runId = await endLostAttempt(
          d.sql,
          a,
          error,
          free ? 'pod_disrupted' : 'pod_lost',
          free ? k.maxFreeRetries : null,
        );
        if (runId === null) return false;
        d.metrics.agentLost.inc();
        d.nudge([runId]);
        return true;
      },
      pending: (a, reason) => notePendingReason(d.sql, a, reason),
      lastLines: (a) => lastLogLines(d.sql, a, LAST_LINES),
      podGone: async (name) => void (await forgetAgent(d.sql, name, 3 * config.heartbeatIntervalMs)),
      active: () => activeAttemptsOf(d.sql, 'kubernetes', d.install),
      // An attempt over for less than 10 s: its agent, which reported the end, is still exiting.
      standings: (attempts) => attemptStandings(d.sql, attempts, 10_000),
    },
    logger: d.logger.child({ executor: 'kubernetes' }),
    ...(d.tracing ? { podCreated: (c: Parameters<ReplicaTracing['podCreated']>[0]) => d.tracing!.podCreated(c) } : {}),
    metrics: {
      podCreated: () => d.metrics.podsCreated.inc(),
      podCreateError: (reason) => d.metrics.podCreateErrors.inc({ reason }),
      podStarted: (seconds) => d.metrics.podStartLatency.observe(seconds),
    },
  });
}
