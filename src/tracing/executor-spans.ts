import { SpanKind } from '@opentelemetry/api';
import type { Attempt } from '../core/attempt.js';
import { attemptTraceContext } from '../core/trace-context.js';
import type { WorkItem } from '../core/work-item.js';
import type { SpanRecord } from './tracing.js';

/**
 * The spans made where the work happens, in the process that did it: handing an attempt to its
 * executor (dispatch), and creating its pod (Pro). Both are children of the attempt's span.
 */

/** From the pool taking the TI up to its executor holding the attempt; null for a run made before tracing. */
export function dispatchSpan(d: { item: WorkItem; tryNumber: number; start: Date }): SpanRecord | null {
  const parent = d.item.runTrace && attemptTraceContext(d.item.runTrace, d.item.tiId, d.tryNumber);
  if (!parent) return null;
  return {
    name: 'dispatch',
    parent,
    kind: SpanKind.INTERNAL,
    start: d.start,
    end: new Date(),
    attributes: {
      'leoflow.dag_id': d.item.dagId,
      'leoflow.run_id': d.item.runId,
      'leoflow.task_id': d.item.taskId,
      'leoflow.try_number': d.tryNumber,
      'leoflow.executor': d.item.executor,
    },
  };
}

/** One pod's create, retries included, until the API server answered for good. */
export function podCreateSpan(c: {
  attempt: Attempt;
  pod: string;
  namespace: string;
  start: Date;
  outcome: string;
  error: string | null;
}): SpanRecord | null {
  if (!c.attempt.trace) return null;
  return {
    name: 'create pod',
    parent: c.attempt.trace,
    kind: SpanKind.CLIENT,
    start: c.start,
    end: new Date(),
    attributes: {
      'leoflow.dag_id': c.attempt.dagId,
      'leoflow.run_id': c.attempt.runId,
      'leoflow.task_id': c.attempt.taskId,
      'leoflow.try_number': c.attempt.tryNumber,
      'k8s.pod.name': c.pod,
      'k8s.namespace.name': c.namespace,
      'leoflow.outcome': c.outcome,
    },
    error: c.error,
  };
}
