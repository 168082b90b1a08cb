import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ClusterGauges } from '../../db/cluster-gauges.js';
import type { SchedulerCounters } from '../../scheduler/context.js';
import type { HistoryKeeperCounters } from '../../scheduler/history-round.js';
import { boundedLabel } from './bounded-label.js';

/** DAGs given a series of their own in the per-DAG metrics; any further one is `dag="other"`. */
const MAX_DAG_SERIES = 200;
/** The leader's read of the cluster gauges serves scrapes this long (several Prometheus servers, or a fast
 *  scrape interval, cost one read). */
const CLUSTER_READ_MS = 5_000;

/** Where the gauges read at a scrape come from: set by the wiring once the parts exist. */
export interface MetricSources {
  /** Agent streams open on this replica. */
  agentsConnected(): number;
  /** WatchRun and WatchRuns streams this replica feeds. */
  watchersConnected(): number;
  /** The cluster's active runs and waiting tasks, read by the leader only (null elsewhere, so one series set
   *  is reported). */
  cluster(): Promise<ClusterGauges> | null;
}

/**
 * The Prometheus metrics of one replica: the names DESIGN.md gives and ours beyond them, each
 * prefixed `leoflow_` so they never collide with another program's in a shared Prometheus. Served over plain
 * HTTP/1.1 on their own port (`serveMetrics`): Prometheus does not scrape h2c, which the API port speaks.
 * The fields are declared in the order they are registered, which is the order a scrape lists them.
 */
export class ReplicaMetrics {
  // The process's own metrics keep the names every Node.js dashboard expects (process_*, nodejs_*):
  // the target's job and instance labels already tell one program's from another's. Ours are
  // prefixed leoflow_, so a shared Prometheus never mixes them with another program's.
  readonly registry = withDefaultMetrics(new Registry());
  /** Where the gauges read at a scrape come from: set by the wiring once the parts exist. */
  readonly sources: MetricSources = { agentsConnected: () => 0, watchersConnected: () => 0, cluster: () => null };
  readonly #dagLabel = boundedLabel(MAX_DAG_SERIES);
  #clusterRead: { at: number; value: Promise<ClusterGauges | null> } | null = null;
  // The role is a label of the leader gauge, so one query over every replica's series shows
  // which leads and what each was started as.
  readonly #leaderByRole = new Gauge({
    name: 'leoflow_leader',
    help: '1 while this replica holds the leader lock; role: what it was started as (auto, leader, worker, observer)',
    labelNames: ['role'],
    registers: [this.registry],
  });
  readonly tickDuration = new Histogram({
    name: 'leoflow_tick_duration_seconds',
    help: 'Duration of one scheduler step (plan, reap runs, reap heartbeats)',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly orphanReaped = this.#counter(
    'leoflow_orphan_reaped_total',
    'Runs (kind=run) and attempts (kind=ti) ended by a reaper',
    ['kind'],
  );
  readonly orphanReapErrors = this.#counter('leoflow_orphan_reap_errors_total', 'Errors while reaping, by reaper', [
    'kind',
  ]);
  readonly agentLost = this.#counter(
    'leoflow_agent_lost_tasks_total',
    'Attempts ended as lost because their holder stopped heartbeating, or its agent restarted without them',
  );
  readonly timedOut = this.#counter(
    'leoflow_timeouts_enforced_total',
    'Attempts the leader ended because they ran past their timeout and the kill grace (their holder did not ' +
      'stop them)',
  );
  readonly dispatchQueueDepth = new Gauge({
    name: 'leoflow_dispatch_queue_depth',
    help: 'Task instances waiting in the dispatch queue',
    registers: [this.registry],
  });
  readonly dispatchAtCapacity = this.#counter(
    'leoflow_dispatch_at_capacity_total',
    'Offers refused because the dispatch queue was full',
  );
  readonly dispatchLatency = new Histogram({
    name: 'leoflow_dispatch_latency_seconds',
    help: 'Time one dispatch took (claim and start of the attempt)',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  readonly podsCreated = this.#counter(
    'leoflow_kubernetes_pods_created_total',
    'Pods the kubernetes executor created (one per attempt; an AlreadyExists is not counted)',
  );
  readonly podCreateErrors = this.#counter(
    'leoflow_kubernetes_pod_create_errors_total',
    'Pod creates the API server did not take, by reason (Forbidden, NotFound, Invalid, QuotaExceeded, ' +
      'TooManyRequests, …)',
    ['reason'],
  );
  readonly podStartLatency = new Histogram({
    name: 'leoflow_kubernetes_pod_start_latency_seconds',
    help: 'Time from a pod create to the pod running',
    buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [this.registry],
  });
  readonly schedulerPanics = this.#counter(
    'leoflow_scheduler_panics_total',
    'Errors caught while stepping (the step went on), by phase',
    ['phase'],
  );
  readonly leader: Gauge.Internal<'role'>;
  readonly staleReportsRejected = this.#counter(
    'leoflow_stale_reports_rejected_total',
    'Reports for a superseded attempt, refused and not applied',
    ['report'],
  );
  readonly staleOutputsRejected = this.#counter(
    'leoflow_stale_outputs_rejected_total',
    "Task outputs that came with a superseded attempt's end (a zombie's), refused and not stored, by executor",
    ['executor'],
  );
  readonly invalidAgentMessages = this.#counter(
    'leoflow_agent_messages_invalid_total',
    "Agents' messages that broke the protocol's rules (a token that is not a UUID, …): refused, and the " +
      "sender's stream ended",
    ['report'],
  );
  readonly taskStarts = this.#counter(
    'leoflow_task_starts_total',
    "Attempts' processes started by this replica's subprocess executor: how=spawn (a fork of the server), " +
      'how=ready_shell (a shell kept ready, for a lone start) or how=spawn_helper (forked by a small shell kept ' +
      'for busy starts)',
    ['how'],
  );
  readonly historyRunsRemoved = this.#counter(
    'leoflow_history_runs_removed_total',
    'Finished runs removed by retention (with their task instances)',
  );
  readonly historyPartitions = this.#counter(
    'leoflow_history_partitions_total',
    'Partitions of the history tables (events, task_logs) added ahead of need (op=added) or dropped once no ' +
      'owner of their range was left (op=dropped)',
    ['table', 'op'],
  );
  readonly historyRowsSwept = this.#counter(
    'leoflow_history_rows_swept_total',
    'Rows of removed runs deleted one by one from a partition that a run still going kept from being dropped',
    ['table'],
  );
  readonly apiConnectionsClosed = this.#counter(
    'leoflow_api_connections_closed_total',
    'API connections closed for a bound: reason host_connections (--max-host-connections) or idle ' +
      '(--idle-connection-timeout)',
    ['reason'],
  );
  readonly apiLimited = this.#counter(
    'leoflow_api_limited_total',
    "API calls refused for a client's bound: limit writes (--max-token-writes), concurrent_writes " +
      '(--max-token-concurrent-writes), streams (--max-token-watches, --max-token-follows, --max-token-streams) ' +
      'or agents (--max-token-agents), by RPC',
    ['limit', 'rpc'],
  );
  readonly hookRefused = this.#counter(
    'leoflow_hook_refusals_total',
    'Webhook deliveries refused (POST /hooks/NAME), by hook and HTTP status: 401 a bad signature or token, ' +
      '404 no such hook, 413 too big, 429 too many',
    ['hook', 'status'],
  );
  readonly notifications = this.#counter(
    'leoflow_notifications_total',
    'Notification deliveries (--notify): outcome delivered, retry (the receiver failed; tried again later) or ' +
      'failed (given up after the last try)',
    ['outcome'],
  );
  readonly authDenied = this.#counter(
    'leoflow_api_auth_denied_total',
    'API calls refused by the token guard: code unauthenticated (no, unknown, revoked or expired token) or ' +
      'permission_denied (role too weak), by RPC',
    ['code', 'rpc'],
  );
  readonly agentsForgotten = this.#counter(
    'leoflow_agents_forgotten_total',
    'Agents forgotten (their rows deleted): how=retention (gone longer than the agent retention, by the leader) ' +
      'or how=by_hand (ForgetAgent)',
    ['how'],
  );
  readonly historyErrors = this.#counter(
    'leoflow_history_errors_total',
    'Errors caught while keeping the history (the keeper went on)',
  );
  /** The cluster's gauges, reported by the leader only. */
  readonly cluster = {
    runs: this.#clusterGauge(
      'leoflow_runs',
      'Active runs by state (queued, running); reported by the leader only',
      ['state'],
      (g, c) => {
        g.set({ state: 'queued' }, c.runs.queued);
        g.set({ state: 'running' }, c.runs.running);
      },
    ),
    waiting: this.#clusterGauge(
      'leoflow_task_instances_waiting',
      'Task instances ready to run and not running yet (scheduled, claimed and not started, or a retry that is due), ' +
        'by executor; reported by the leader only',
      ['executor'],
      fillByExecutor('count'),
    ),
    oldestWait: this.#clusterGauge(
      'leoflow_task_oldest_wait_seconds',
      'How long the longest-waiting task instance of each executor has been ready without running; ' +
        'reported by the leader only',
      ['executor'],
      fillByExecutor('oldestS'),
    ),
  };
  readonly agentsConnected = this.#sourceGauge('leoflow_agents_connected', 'Agent streams open on this replica', () =>
    this.sources.agentsConnected(),
  );
  readonly watchersConnected = this.#sourceGauge(
    'leoflow_watchers_connected',
    'WatchRun and WatchRuns streams open on this replica',
    () => this.sources.watchersConnected(),
  );
  readonly dispatchQueueCapacity = new Gauge({
    name: 'leoflow_dispatch_queue_capacity',
    help: 'Task instances the dispatch queue holds at most (leoflow_dispatch_queue_depth against it is how full it is)',
    registers: [this.registry],
  });
  readonly taskDuration = new Histogram({
    name: 'leoflow_task_duration_seconds',
    help:
      'How long attempts ran (started → ended), by DAG (at most 200 DAGs, then dag="other") and how the attempt ' +
      'ended (success, failed, up_for_retry)',
    labelNames: ['dag', 'outcome'],
    buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400],
    registers: [this.registry],
  });
  readonly taskQueueWait = new Histogram({
    name: 'leoflow_task_queue_wait_seconds',
    help:
      'How long attempts waited to start once ready (scheduled, or a retry due → started), by DAG (at most 200 ' +
      'DAGs, then dag="other")',
    labelNames: ['dag'],
    buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
    registers: [this.registry],
  });

  constructor(opts: { role?: string } = {}) {
    this.leader = this.#leaderByRole.labels({ role: opts.role ?? 'auto' });
    this.leader.set(0);
  }

  /** A start written, as the report batcher tells it. */
  attemptStarted(dagId: string, waitedS: number | null): void {
    if (waitedS !== null) this.taskQueueWait.observe({ dag: this.#dagLabel(dagId) }, Math.max(0, waitedS));
  }

  /** An end written, as the report batcher tells it. */
  attemptEnded(dagId: string, outcome: string, ranS: number | null): void {
    if (ranS !== null) this.taskDuration.observe({ dag: this.#dagLabel(dagId), outcome }, Math.max(0, ranS));
  }

  /** The leader's read of the cluster gauges, shared by the scrapes within CLUSTER_READ_MS. */
  #readCluster(): Promise<ClusterGauges | null> {
    const now = Date.now();
    if (!this.#clusterRead || now - this.#clusterRead.at >= CLUSTER_READ_MS)
      this.#clusterRead = { at: now, value: this.sources.cluster() ?? Promise.resolve(null) };
    return this.#clusterRead.value.catch(() => null);
  }

  #clusterGauge(name: string, help: string, labelNames: string[], fill: (g: Gauge, c: ClusterGauges) => void): Gauge {
    const read = () => this.#readCluster();
    return new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        const c = await read();
        this.reset();
        if (c) fill(this, c);
      },
    });
  }

  /** A counter of this replica's registry. */
  #counter(name: string, help: string, labelNames: string[] = []): Counter {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }

  /** A gauge set from one of the sources at each scrape. */
  #sourceGauge(name: string, help: string, read: () => number): Gauge {
    return new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }
}

/** The metrics of one replica (`role`: what it was started as, a label of `leoflow_leader`). */
export function createMetrics(opts: { role?: string } = {}): ReplicaMetrics {
  return new ReplicaMetrics(opts);
}

export type Metrics = ReplicaMetrics;

function withDefaultMetrics(registry: Registry): Registry {
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Fills a gauge with one figure of each executor's waiting work. */
function fillByExecutor(figure: 'count' | 'oldestS') {
  return (g: Gauge, c: ClusterGauges): void => {
    for (const w of c.waiting) g.set({ executor: w.executor }, w[figure]);
  };
}

/** The scheduler's counters, backed by the metrics and the log. */
export function schedulerCounters(
  m: Metrics,
  log: (phase: string, err: unknown, ids?: Record<string, unknown>) => void,
): SchedulerCounters {
  return {
    error(phase, err, ids) {
      m.schedulerPanics.inc({ phase });
      if (phase.startsWith('reap-runs')) m.orphanReapErrors.inc({ kind: 'run' });
      if (phase.startsWith('reap-heartbeats') || phase.startsWith('reap-timeouts'))
        m.orphanReapErrors.inc({ kind: 'ti' });
      log(phase, err, ids);
    },
    reaped(kind, count) {
      m.orphanReaped.inc({ kind }, count);
    },
    agentLost(count) {
      m.agentLost.inc(count);
    },
    timedOut(count) {
      m.timedOut.inc(count);
    },
  };
}

/** The history keeper's counters, backed by the metrics and the log. */
export function historyCounters(
  m: Metrics,
  log: (err: unknown, ids: Record<string, unknown>) => void,
): HistoryKeeperCounters {
  return {
    runsRemoved: (runs) => m.historyRunsRemoved.inc(runs),
    partitionAdded: (table) => m.historyPartitions.inc({ table, op: 'added' }),
    partitionDropped: (table) => m.historyPartitions.inc({ table, op: 'dropped' }),
    rowsSwept: (table, rows) => m.historyRowsSwept.inc({ table }, rows),
    agentsForgotten: (agents) => m.agentsForgotten.inc({ how: 'retention' }, agents),
    error(err, ids) {
      m.historyErrors.inc();
      log(err, ids);
    },
  };
}
