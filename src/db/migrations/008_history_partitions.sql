-- History partitioned by the id of what it belongs to (issue 23): `events` by run_id, `task_logs`
-- by ti_id, each partition a range of ids (about a day's worth; the leader's history keeper,
-- src/scheduler/history-keeper.ts, adds the next range ahead of need). Retention then drops a
-- whole partition once no run (task instance) of its range is left, instead of deleting its rows
-- one by one: that emptiness is one index probe on the owner's primary key, where a partition by
-- time could hold rows of a run still active and would have to be scanned to tell. A default
-- partition takes the rows no range covers (events of no run, such as a DAG applied; ids beyond
-- the newest range), so an insert never fails for want of a partition. The rows stored so far
-- become the first partition of each table, as they are: attaching them only reads them.
--
-- `task_logs` no longer has a foreign key to task_instances: its cascade would delete a removed
-- task instance's lines row by row, the cost partitions are here to avoid. Lines are written only
-- for a task instance the insert finds (log-writer.ts joins it), and whatever outlives its task
-- instance goes with its partition or is swept by the keeper.

-- events --------------------------------------------------------------------------------------
alter table events rename to events_p0;
alter table events_p0 drop constraint events_pkey;
alter table events_p0 alter column seq drop identity;
alter index events_run rename to events_p0_run_id_seq_idx;

create table events (
  seq     bigint generated always as identity,
  run_id  bigint,
  ti_id   bigint,
  kind    text not null,
  payload jsonb not null default '{}'::jsonb,
  at      timestamptz not null default now()
) partition by range (run_id);
create table events_default partition of events default;
-- Events of no run cannot go in a range: they move to the default partition, seq kept.
insert into events overriding system value select * from events_p0 where run_id is null;
delete from events_p0 where run_id is null;

-- task_logs -----------------------------------------------------------------------------------
alter table task_logs rename to task_logs_p0;
alter table task_logs_p0 drop constraint task_logs_ti_id_fkey;
alter index task_logs_pkey rename to task_logs_p0_pkey;

create table task_logs (
  ti_id      bigint not null,
  try_number integer not null,
  seq        integer not null,
  -- Named as the first partition's own check, which attaching it requires.
  stream     text not null constraint task_logs_stream_check check (stream in ('stdout', 'stderr', 'system')),
  line       text not null,
  at         timestamptz not null default now(),
  primary key (ti_id, try_number, seq)
) partition by range (ti_id);
create table task_logs_default partition of task_logs default;

-- The stored rows as the first partitions, and one empty range above them for what comes next.
do $$
declare
  next_run bigint := greatest((select max(id) from dag_runs), (select max(run_id) from events_p0), 0) + 1;
  next_ti bigint := greatest((select max(id) from task_instances), (select max(ti_id) from task_logs_p0), 0) + 1;
begin
  -- Events were numbered by the old table's identity: the new one goes on after them.
  perform setval(pg_get_serial_sequence('events', 'seq'), greatest((select max(seq) from events_p0), (select max(seq) from events_default), 0) + 1, false);
  execute format('alter table events attach partition events_p0 for values from (minvalue) to (%s)', next_run);
  -- Wide enough that a burst right after the upgrade (or in a new installation) does not outrun
  -- it before the keeper has measured a rate and added ranges sized by it.
  execute format('create table events_p%s partition of events for values from (%s) to (%s)', next_run, next_run, next_run + 100000);
  execute format('alter table task_logs attach partition task_logs_p0 for values from (minvalue) to (%s)', next_ti);
  execute format('create table task_logs_p%s partition of task_logs for values from (%s) to (%s)', next_ti, next_ti, next_ti + 1000000);
end $$;

-- Built on the new partitions; the first partitions' own indexes are attached, not rebuilt.
create index events_run on events (run_id, seq);
