import type { Attempt } from './attempt.js';
import { taskSpecHash } from './cache-key.js';
import { idempotencyKey } from './idempotency-key.js';
import { parseMappedTaskId } from './map-spec.js';
import { attemptTraceContext, type TraceContext } from './trace-context.js';
import type { Claim, WorkItem } from './work-item.js';

/** What the environment of an attempt's process is built from. */
export interface AttemptEnvInput {
  dagId: string;
  runId: string;
  taskId: string;
  tiId: string;
  tryNumber: number;
  maxTries: number;
  /** This install's id (`installIdentity`), which makes the idempotency key unique across installs. */
  install: string;
  logicalDate: Date;
  conf: Record<string, unknown>;
  /** The task's own env, which wins over ours. */
  taskEnv: Record<string, string>;
  /** The attempt's trace context, for user code to continue (W3C's TRACEPARENT and TRACESTATE). */
  trace?: TraceContext | null;
}

/** The environment every attempt's process sees, whoever runs it, on top of its own. */
export function attemptEnv(i: AttemptEnvInput): Record<string, string> {
  return {
    LEOFLOW_DAG_ID: i.dagId,
    LEOFLOW_RUN_ID: i.runId,
    LEOFLOW_TASK_ID: i.taskId,
    LEOFLOW_TI_ID: i.tiId,
    LEOFLOW_TRY_NUMBER: String(i.tryNumber),
    LEOFLOW_MAX_TRIES: String(i.maxTries),
    LEOFLOW_IDEMPOTENCY_KEY: idempotencyKey(i.install, i.runId, i.taskId),
    LEOFLOW_LOGICAL_DATE: i.logicalDate.toISOString(),
    LEOFLOW_RUN_CONF: JSON.stringify(i.conf),
    ...(i.trace
      ? { TRACEPARENT: i.trace.traceparent, ...(i.trace.tracestate ? { TRACESTATE: i.trace.tracestate } : {}) }
      : {}),
    ...i.taskEnv,
  };
}

/** The attempt a claim made of a scheduled task instance, with its process's environment. */
export function attemptOf(
  w: Omit<WorkItem, 'executor' | 'pendingReason' | 'claim'>,
  claim: Omit<Claim, 'agentId'>,
  install: string,
  agentId?: string,
): Attempt {
  const trace = w.runTrace && attemptTraceContext(w.runTrace, w.tiId, claim.tryNumber);
  return {
    tiId: w.tiId,
    runId: w.runId,
    dagId: w.dagId,
    taskId: w.taskId,
    tryNumber: claim.tryNumber,
    maxTries: claim.maxTries,
    attemptToken: claim.attemptToken,
    dispatchKey: claim.dispatchKey,
    command: w.task.command,
    env: attemptEnv({
      dagId: w.dagId,
      runId: w.runId,
      taskId: w.taskId,
      tiId: w.tiId,
      tryNumber: claim.tryNumber,
      maxTries: claim.maxTries,
      install,
      logicalDate: w.logicalDate,
      conf: w.conf,
      taskEnv: w.task.env,
      trace,
    }),
    ...(trace ? { trace } : {}),
    ...(w.task.secretEnv ? { secretEnv: w.task.secretEnv } : {}),
    cwd: w.task.cwd,
    timeoutMs: w.task.timeoutMs,
    ...(agentId ? { agentId } : {}),
    ...(w.task.image !== null || w.task.kubernetes
      ? { pod: { image: w.task.image, ...(w.task.kubernetes ? { kubernetes: w.task.kubernetes } : {}) } }
      : {}),
    ...(w.task.dependsOn.length > 0 ? { upstreams: w.task.dependsOn } : {}),
    ...(w.task.inputs ? { inputEnv: w.task.inputs } : {}),
    ...(w.task.map && parseMappedTaskId(w.taskId) !== null
      ? { mapOver: { upstream: w.task.map.upstream, path: w.task.map.path } }
      : {}),
    ...(w.task.triggerRule === 'one_failed' ? { failureSummary: true } : {}),
    ...(w.task.output === 'required' ? { outputRequired: true } : {}),
    ...(w.task.cache ? { cache: { ...w.task.cache, specHash: taskSpecHash(w.task) } } : {}),
  };
}
