-- Waits and approvals (issue 41): a task instance in state 'waiting' holds no slot, process or
-- agent; its row in task_waits says what ends it. A row stays after its wait ends, with the event
-- that ended it (the payload is kept with the event until task outputs land).
alter table task_instances drop constraint task_instances_state_check;
alter table task_instances add constraint task_instances_state_check
  check (state in ('none', 'scheduled', 'queued', 'running', 'success', 'failed',
                   'up_for_retry', 'upstream_failed', 'skipped', 'cancelled', 'waiting'));

-- A waiting task moves on without the planner (an event, an approval, its deadline): its run is
-- not settled, and the run reaper must not take it for an orphan.
drop index task_instances_live;
create index task_instances_live on task_instances (state, id)
  where state in ('scheduled', 'queued', 'running', 'up_for_retry', 'waiting');

create table task_waits (
  ti_id       bigint primary key references task_instances (id) on delete cascade,
  run_id      bigint not null,
  task_id     text not null,
  kind        text not null check (kind in ('event', 'approval')),
  -- kind 'event': the event's name and the match on its payload (the run's conf already read in).
  event       text,
  match       jsonb,
  -- kind 'approval': the weakest token role that may approve or reject.
  role        text check (role in ('viewer', 'operator', 'admin')),
  deadline    timestamptz not null,
  on_timeout  text not null check (on_timeout in ('failed', 'skipped', 'success')),
  started_at  timestamptz not null default now(),
  ended_at    timestamptz,
  -- How it ended: 'event', 'approved', 'rejected', 'timeout', or 'gone' (its task instance had
  -- already left 'waiting', e.g. cancelled).
  outcome     text,
  event_id    bigint references external_events (id) on delete set null
);
-- An event finds the open waits on its name by this index, never by reading every wait.
create index task_waits_open_event on task_waits (event, ti_id) where ended_at is null and kind = 'event';
-- The leader's one query a step for waits past their deadline reads only those, by this index.
create index task_waits_open_deadline on task_waits (deadline, ti_id) where ended_at is null;
-- A wait's look back reads the events of one name received in a window.
create index external_events_name_received on external_events (name, received_at);
-- Forgetting old events (retention) sets event_id null on the waits they ended: found by this index.
create index task_waits_event_id on task_waits (event_id) where event_id is not null;
