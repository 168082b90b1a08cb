import { create } from '@bufbuild/protobuf';
import { durationFromMs, timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { TaskDefinition } from '../../core/dag-spec.js';
import { secretEnvToWire } from '../../core/secret-ref.js';
import type { RunStateName, TiState } from '../../core/states.js';
import type { DagView } from '../../db/dags.js';
import type { HistoryRowCounts } from '../../db/history/remove-runs.js';
import type { LogRow } from '../../db/logs.js';
import type { EventRow } from '../../db/events/read-events.js';
import type { RunView } from '../../db/runs.js';
import type { TiView } from '../../db/tis.js';
import type { WriteActor } from '../../core/actor.js';
import {
  ActorSchema,
  DagSchema,
  LogLineSchema,
  RunSchema,
  RunState as PbRunState,
  TaskInstanceSchema,
  TaskSpecSchema,
  TaskState as PbTaskState,
  type Dag,
  type LogLine,
  type Run,
  type TaskInstance,
} from '../../gen/leoflow/v1/types_pb.js';
import {
  HistoryCountsSchema,
  RunEventSchema,
  type HistoryCounts as PbHistoryCounts,
  type RunEvent,
} from '../../gen/leoflow/v1/workflow_pb.js';

import { InvalidArgumentError } from './errors.js';

/** Row → message conversions, kept apart from the handlers so each handler reads as its logic. */

const ts = (d: Date | null) => (d ? timestampFromDate(d) : undefined);

const RUN_STATE: Record<RunStateName, PbRunState> = {
  queued: PbRunState.QUEUED,
  running: PbRunState.RUNNING,
  success: PbRunState.SUCCESS,
  failed: PbRunState.FAILED,
  cancelled: PbRunState.CANCELLED,
};

/**
 * A run state a request names (ListRuns' filter), checked: UNSPECIFIED or a number this server
 * does not know is INVALID_ARGUMENT naming the states there are.
 */
export function runStateOfWire(s: PbRunState): RunStateName {
  const found = (Object.keys(RUN_STATE) as RunStateName[]).find((k) => RUN_STATE[k] === s);
  if (found === undefined) {
    const known = Object.entries(RUN_STATE)
      .map(([k, v]) => `${v} (${k})`)
      .join(', ');
    throw new InvalidArgumentError('states', `holds ${s}, which is no run state: give ${known}`);
  }
  return found;
}

const TI_STATE: Record<TiState, PbTaskState> = {
  none: PbTaskState.NONE,
  scheduled: PbTaskState.SCHEDULED,
  queued: PbTaskState.QUEUED,
  running: PbTaskState.RUNNING,
  success: PbTaskState.SUCCESS,
  failed: PbTaskState.FAILED,
  up_for_retry: PbTaskState.UP_FOR_RETRY,
  upstream_failed: PbTaskState.UPSTREAM_FAILED,
  skipped: PbTaskState.SKIPPED,
  cancelled: PbTaskState.CANCELLED,
  waiting: PbTaskState.WAITING,
};

function taskToProto(t: TaskDefinition) {
  return create(TaskSpecSchema, {
    id: t.id,
    command: t.command,
    dependsOn: t.dependsOn,
    triggerRule: t.triggerRule,
    retries: t.retries,
    retryDelay: durationFromMs(t.retryDelayMs),
    maxRetryDelay: durationFromMs(t.maxRetryDelayMs),
    timeout: t.timeoutMs === null ? undefined : durationFromMs(t.timeoutMs),
    env: t.env,
    secretEnv: secretEnvToWire(t.secretEnv),
    executor: t.executor,
    image: t.image ?? '',
    waitEvent: t.wait?.event ?? '',
    waitMatchJson: t.wait?.match ? JSON.stringify(t.wait.match) : '',
    approvalRole: t.approval?.role ?? '',
    approvalMessage: t.approval?.message ?? '',
  });
}

export function dagToProto(d: DagView): Dag {
  return create(DagSchema, {
    dagId: d.dag_id,
    description: d.spec.description,
    schedule: d.schedule ?? '',
    catchup: d.catchup,
    maxActiveRuns: d.max_active_runs,
    paused: d.paused,
    version: d.version,
    tasks: d.spec.tasks.map(taskToProto),
    updatedAt: ts(d.updated_at),
    nextRunAt: ts(d.next_run_at),
  });
}

/** A run as a message; with `triggeredBy`, who triggered it (GetRun reads that, the lists do not). */
export function runToProto(r: RunView, triggeredBy: WriteActor | null = null): Run {
  return create(RunSchema, {
    runId: r.id,
    dagId: r.dag_id,
    runKey: r.run_key,
    state: RUN_STATE[r.state],
    logicalDate: ts(r.logical_date),
    confJson: JSON.stringify(r.conf),
    dagVersion: r.dag_version,
    createdAt: ts(r.created_at),
    startedAt: ts(r.started_at),
    endedAt: ts(r.ended_at),
    runType: r.run_type,
    traceparent: r.traceparent ?? '',
    deadlineAt: r.deadline_at ? ts(r.deadline_at) : undefined,
    deadlineState: r.deadline_state ?? '',
    triggeredBy: triggeredBy ? create(ActorSchema, { id: triggeredBy.id, peer: triggeredBy.peer }) : undefined,
  });
}

export function tiToProto(t: TiView): TaskInstance {
  return create(TaskInstanceSchema, {
    tiId: t.id,
    runId: t.run_id,
    taskId: t.task_id,
    state: TI_STATE[t.state],
    tryNumber: t.try_number,
    maxTries: t.max_tries,
    executor: t.executor,
    agentId: t.agent_id ?? '',
    queuedAt: ts(t.queued_at),
    startedAt: ts(t.started_at),
    heartbeatAt: ts(t.heartbeat_at),
    endedAt: ts(t.ended_at),
    exitCode: t.exit_code ?? undefined,
    signal: t.signal ?? '',
    error: t.error ?? '',
    pendingReason: t.pending_reason ?? '',
    nextTryAt: ts(t.next_try_at),
    deadlineAt: t.deadline_at ? ts(t.deadline_at) : undefined,
    deadlineState: t.deadline_state ?? '',
    mapCount: t.map_count ?? 0,
  });
}

export function eventToProto(e: EventRow): RunEvent {
  return create(RunEventSchema, {
    seq: e.seq,
    runId: e.run_id ?? '0',
    tiId: e.ti_id ?? '0',
    dagId: e.dag_id ?? '',
    kind: e.kind,
    payloadJson: JSON.stringify(e.payload),
    at: ts(e.at),
  });
}

export function logToProto(l: LogRow): LogLine {
  return create(LogLineSchema, {
    tiId: l.ti_id,
    taskId: l.task_id,
    tryNumber: l.try_number,
    seq: l.seq,
    stream: l.stream,
    line: l.line,
    at: ts(l.at),
  });
}

export function countsToProto(c: HistoryRowCounts): PbHistoryCounts {
  return create(HistoryCountsSchema, {
    runs: BigInt(c.runs),
    taskInstances: BigInt(c.taskInstances),
    events: BigInt(c.events),
    taskLogs: BigInt(c.taskLogs),
  });
}
