-- Task deadlines: a task with `deadline:` is due to end that long after its first scheduling (its
-- first move out of 'none', to scheduled, queued or waiting), deadline_ms copied from its DAG
-- version when the run is made. As for runs (migration 027), once the time has passed the leader
-- marks it once, met or missed; a miss is recorded (task.deadline_missed) by the marking statement
-- and told by the trigger below.
alter table task_instances add column deadline_ms bigint,
  add column deadline_at timestamptz,
  add column deadline_state text check (deadline_state in ('met', 'missed'));
-- The one read of the check: only tasks due and not yet marked; tasks without a deadline are not in it.
create index task_instances_deadline_due on task_instances (deadline_at)
  where deadline_at is not null and deadline_state is null;

create function leoflow_task_deadline_missed_notify() returns trigger language plpgsql as $$
declare
  run record;
begin
  select r.id, r.dag_id, r.dag_version into run from dag_runs r where r.id = new.run_id;
  perform leoflow_notify_of_run(run.id, run.dag_id, run.dag_version, 'deadline_missed', new.task_id);
  return null;
end $$;

-- Fires only for an update that sets deadline_state (the marking statement's), never the planner's.
create trigger task_instances_deadline_missed_notify after update of deadline_state on task_instances
  for each row when (new.deadline_state = 'missed' and old.deadline_state is null)
  execute function leoflow_task_deadline_missed_notify();

-- A run's end told cheaply when there is no one to tell: whether its DAG version has notify rules
-- is kept with the run (null for runs made before this migration: looked up as before), so a run
-- of a DAG without rules, when the server has no defaults for that end, reads no dag_versions row.
alter table dag_runs add column notifies boolean;

create or replace function leoflow_run_ended_notify() returns trigger language plpgsql as $$
begin
  if new.notifies is false and not exists (select 1 from notify_defaults d where d.kind = new.state) then
    return null;
  end if;
  perform leoflow_notify_of_run(new.id, new.dag_id, new.dag_version, new.state);
  return null;
end $$;
