-- Tracing (issue 26): each run carries its own W3C traceparent, the run span's context, from which
-- every attempt's span is derived (src/core/trace-context.ts). A run triggered with a caller's
-- traceparent continues that trace: the caller's span is its parent. Any other run starts its own
-- (db/runs.ts gives every new run its ids; runs made before this migration have none and are not
-- traced).
alter table dag_runs add column traceparent text;
alter table dag_runs add column trace_parent_span text;
alter table dag_runs add column tracestate text;

-- How far the leader's span recorder has read the events log: the next leader goes on from here,
-- so an attempt that ended during a change of leader still gets its span.
create table trace_export (
  one       boolean primary key default true check (one),
  after_seq bigint not null,
  saved_at  timestamptz not null
);
