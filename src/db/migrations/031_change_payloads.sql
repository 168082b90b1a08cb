-- Whom a change concerns (issue 38). The NOTIFYs of migration 011 said only "something changed",
-- so every log follower of a replica read its run again on every write anywhere: one client's
-- hundred follows times another's writes made thousands of reads a second. Each now names the
-- runs its rows belong to, and a follower wakes only for its own. Past RUNS_NAMED runs (a NOTIFY
-- carries at most 8000 bytes) the payload is empty, which still means "any run".
create or replace function leoflow_events_written() returns trigger language plpgsql as $$
declare
  runs text;
begin
  select case when count(distinct run_id) <= 200 then coalesce(string_agg(distinct run_id::text, ','), '-') else '' end
    into runs from new_rows;
  perform pg_notify('leoflow_events', runs);
  return null;
end $$;
drop trigger events_written on events;
create trigger events_written after insert on events
  referencing new table as new_rows
  for each statement execute function leoflow_events_written();

create or replace function leoflow_logs_written() returns trigger language plpgsql as $$
declare
  runs text;
begin
  select case when count(distinct ti.run_id) <= 200 then coalesce(string_agg(distinct ti.run_id::text, ','), '-')
              else '' end
    into runs from (select distinct ti_id from new_rows) l join task_instances ti on ti.id = l.ti_id;
  perform pg_notify('leoflow_logs', runs);
  return null;
end $$;
drop trigger task_logs_written on task_logs;
create trigger task_logs_written after insert on task_logs
  referencing new table as new_rows
  for each statement execute function leoflow_logs_written();
