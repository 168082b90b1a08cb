import type { Run, TaskInstance } from '../gen/leoflow/v1/types_pb.js';
import { isoTime, runStateName, taskStateName } from './format.js';

/**
 * A run and its task instances as `run show -o json` prints them: snake_case keys, times in ISO
 * 8601 UTC (null when unset), empty strings as null, so a script can test a field for null alone.
 */
export function runJson(r: Run, tis: TaskInstance[]) {
  return {
    run_id: r.runId,
    dag_id: r.dagId,
    run_key: r.runKey,
    run_type: r.runType,
    state: runStateName(r.state),
    dag_version: r.dagVersion,
    logical_date: isoTime(r.logicalDate),
    created_at: isoTime(r.createdAt),
    started_at: isoTime(r.startedAt),
    ended_at: isoTime(r.endedAt),
    traceparent: r.traceparent || null,
    deadline_at: isoTime(r.deadlineAt),
    deadline_state: r.deadlineState || null,
    triggered_by: r.triggeredBy ? { actor: r.triggeredBy.id, peer: r.triggeredBy.peer } : null,
    conf: r.confJson === '' ? null : (JSON.parse(r.confJson) as unknown),
    task_instances: tis.map(tiJson),
  };
}

/** One task instance of `run show -o json`: its latest attempt, where it ran, and when. */
export function tiJson(t: TaskInstance) {
  return {
    ti_id: t.tiId,
    task_id: t.taskId,
    state: taskStateName(t.state),
    try_number: t.tryNumber,
    max_tries: t.maxTries,
    executor: t.executor,
    agent_id: t.agentId || null,
    queued_at: isoTime(t.queuedAt),
    started_at: isoTime(t.startedAt),
    ended_at: isoTime(t.endedAt),
    exit_code: t.exitCode ?? null,
    error: t.error || null,
    pending_reason: t.pendingReason || null,
    next_try_at: isoTime(t.nextTryAt),
    deadline_at: isoTime(t.deadlineAt),
    deadline_state: t.deadlineState || null,
  };
}
