import type { Sql } from '../sql.js';

/** A run as its spans are made from it. */
export interface TracedRun {
  id: string;
  dag_id: string;
  run_key: string;
  run_type: string;
  created_at: Date;
  traceparent: string | null;
  trace_parent_span: string | null;
  tracestate: string | null;
}

/** A state change of a task instance or a run, from the events log. */
export interface StateEvent {
  seq: string;
  run_id: string;
  ti_id: string | null;
  kind: string;
  payload: Record<string, unknown>;
  at: Date;
}

/**
 * What the span recorder needs to make the spans of attempts and runs that ended: the runs, and
 * the whole state history (up to `upTo`) of these task instances and of these runs, in seq order.
 * An attempt's start may lie far behind its end in the log, so it is read, not remembered.
 */
export async function traceSources(
  sql: Sql,
  o: { runIds: string[]; tiIds: string[]; endedRunIds: string[]; upTo: string },
): Promise<{ runs: TracedRun[]; events: StateEvent[] }> {
  const [runs, events] = await Promise.all([
    sql<TracedRun[]>`
      select id::text as id, dag_id, run_key, run_type, created_at, traceparent, trace_parent_span, tracestate
      from dag_runs where id = any(${o.runIds}::bigint[])`,
    sql<StateEvent[]>`
      select seq::text as seq, run_id::text as run_id, ti_id::text as ti_id, kind, payload, at
      from events
      where run_id = any(${o.runIds}::bigint[]) and seq <= ${o.upTo}::bigint
        and ((kind = 'ti.state' and ti_id = any(${o.tiIds}::bigint[])) or (kind = 'run.state' and ti_id is null
          and run_id = any(${o.endedRunIds}::bigint[])))
      order by seq`,
  ]);
  return { runs, events };
}
