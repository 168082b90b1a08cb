-- Notifications out: one row per (run, kind, receiver), written by a trigger in the very transaction
-- that ends the run, whichever path ends it (the planner, a reaper, a cancel), so none is lost to a
-- crash between the two and none is made twice. A deliverer on any replica takes due rows with a
-- lease (next_at moved ahead), posts them, and records each attempt.
create table notifications (
  id           bigserial primary key,
  run_id       bigint not null references dag_runs (id) on delete cascade,
  dag_id       text not null,
  kind         text not null,
  receiver     text not null,
  -- The task it is about ('approval_requested'); '' for the run's own kinds.
  task_id      text not null default '',
  state        text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
  attempts     integer not null default 0,
  next_at      timestamptz not null default now(),
  last_error   text,
  created_at   timestamptz not null default now(),
  delivered_at timestamptz,
  unique (run_id, kind, receiver, task_id)
);
-- The deliverer's one query: the due pending rows, oldest first.
create index notifications_due on notifications (next_at) where state = 'pending';

create table notification_attempts (
  id              bigserial primary key,
  notification_id bigint not null references notifications (id) on delete cascade,
  at              timestamptz not null default now(),
  -- The receiver's HTTP status; null when no answer came (refused, timed out).
  status          integer,
  error           text,
  ms              integer not null
);
create index notification_attempts_of on notification_attempts (notification_id);

-- The server-wide rules (--notify FILE's `defaults`), for runs of DAGs that name none of their own.
-- Each replica writes its file's rules at start: give every replica the same file.
create table notify_defaults (
  kind     text not null,
  receiver text not null,
  primary key (kind, receiver)
);

-- Tells of `kind` for a run: to the receivers its DAG version's rules name
-- (`notify: [{on: [kind], to: receiver}]`), or, for a DAG without rules, the defaults'.
create function leoflow_notify_of_run(p_run_id bigint, p_dag_id text, p_version integer, p_kind text,
                                      p_task_id text default '')
returns void language plpgsql as $$
declare
  spec jsonb;
begin
  select v.spec into spec from dag_versions v where v.dag_id = p_dag_id and v.version = p_version;
  insert into notifications (run_id, dag_id, kind, receiver, task_id)
  select p_run_id, p_dag_id, p_kind, r.receiver, p_task_id
    from (select distinct rule ->> 'to' as receiver
            from jsonb_array_elements(coalesce(spec -> 'notify', '[]'::jsonb)) rule
           where rule -> 'on' ? p_kind
          union
          select d.receiver from notify_defaults d
           where d.kind = p_kind and not coalesce(spec ? 'notify', false)) r
  on conflict do nothing;
end $$;

create function leoflow_run_ended_notify() returns trigger language plpgsql as $$
begin
  perform leoflow_notify_of_run(new.id, new.dag_id, new.dag_version, new.state);
  return null;
end $$;

create trigger dag_runs_ended_notify after update of state on dag_runs
  for each row when (new.state in ('success', 'failed') and old.state is distinct from new.state)
  execute function leoflow_run_ended_notify();

-- Deadlines: a run of a DAG with `deadline:` is due to end by deadline_at. Once that time has
-- passed, the leader marks it, once: 'met' (it ended before) or 'missed' (it had not), and a miss
-- is recorded (a run.deadline_missed event) and told (below) by the statement that marks it.
alter table dag_runs add column deadline_at timestamptz,
  add column deadline_state text check (deadline_state in ('met', 'missed'));
create index dag_runs_deadline_due on dag_runs (deadline_at)
  where deadline_at is not null and deadline_state is null;

create function leoflow_deadline_missed_notify() returns trigger language plpgsql as $$
begin
  perform leoflow_notify_of_run(new.id, new.dag_id, new.dag_version, 'deadline_missed');
  return null;
end $$;

create trigger dag_runs_deadline_missed_notify after update of deadline_state on dag_runs
  for each row when (new.deadline_state = 'missed' and old.deadline_state is null)
  execute function leoflow_deadline_missed_notify();

-- An approval task that starts waiting asks for its approval (migration 025's task_waits).
create function leoflow_approval_requested_notify() returns trigger language plpgsql as $$
declare
  run record;
begin
  select r.id, r.dag_id, r.dag_version into run from dag_runs r where r.id = new.run_id;
  perform leoflow_notify_of_run(run.id, run.dag_id, run.dag_version, 'approval_requested', new.task_id);
  return null;
end $$;

create trigger task_waits_approval_requested_notify after insert on task_waits
  for each row when (new.kind = 'approval')
  execute function leoflow_approval_requested_notify();
