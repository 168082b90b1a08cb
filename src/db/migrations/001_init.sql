-- Leoflow schema, version 1. States are checked here as well as in src/core/states.ts so that
-- no writer, however buggy, can store a state the state machine does not know.

create table dags (
  dag_id          text primary key,
  spec            jsonb not null,
  source          text not null,
  spec_hash       text not null,
  schedule        text,
  timezone        text not null default 'UTC',
  catchup         boolean not null default false,
  start_date      timestamptz,
  max_active_runs integer not null check (max_active_runs > 0),
  paused          boolean not null default false,
  version         integer not null default 1,
  -- Logical date of the next scheduled run; null for manual-only DAGs.
  next_run_at     timestamptz,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now()
);

create table dag_runs (
  id            bigint generated always as identity primary key,
  dag_id        text not null references dags (dag_id) on delete cascade,
  run_key       text not null,
  run_type      text not null check (run_type in ('manual', 'scheduled')),
  dag_version   integer not null,
  -- The DAG spec as it was when the run was created: applying a DAG never changes a run in flight.
  spec          jsonb not null,
  logical_date  timestamptz not null,
  state         text not null default 'queued'
                check (state in ('queued', 'running', 'success', 'failed', 'cancelled')),
  conf          jsonb not null default '{}'::jsonb,
  -- Set when advancing the run threw: the planner skips a poisoned run instead of dying on it.
  poison_error  text,
  created_at    timestamptz not null default now(),
  started_at    timestamptz,
  ended_at      timestamptz,
  -- When every task instance of the run last became terminal (the run reaper's clock).
  settled_at    timestamptz,
  unique (dag_id, run_key)
);
create index dag_runs_active on dag_runs (dag_id, id) where state in ('queued', 'running');
create index dag_runs_dag_created on dag_runs (dag_id, id desc);

create table task_instances (
  id             bigint generated always as identity primary key,
  run_id         bigint not null references dag_runs (id) on delete cascade,
  task_id        text not null,
  try_number     integer not null default 0,
  max_tries      integer not null check (max_tries > 0),
  state          text not null default 'none'
                 check (state in ('none', 'scheduled', 'queued', 'running', 'success', 'failed',
                                  'up_for_retry', 'upstream_failed', 'skipped', 'cancelled')),
  attempt_token  uuid,
  executor       text not null,
  agent_id       text,
  dispatch_key   text,
  retry_delay_ms     bigint not null default 0,
  max_retry_delay_ms bigint not null default 0,
  pid            integer,
  pending_reason text,
  next_try_at    timestamptz,
  queued_at      timestamptz,
  started_at     timestamptz,
  heartbeat_at   timestamptz,
  ended_at       timestamptz,
  exit_code      integer,
  error          text,
  unique (run_id, task_id)
);
create index task_instances_live on task_instances (state, id)
  where state in ('scheduled', 'queued', 'running', 'up_for_retry');

create table agents (
  agent_id          text primary key,
  labels            jsonb not null default '{}'::jsonb,
  capabilities      jsonb not null default '[]'::jsonb,
  slots             integer not null default 1,
  draining          boolean not null default false,
  connected_replica text,
  last_seen_at      timestamptz
);

-- Append-only audit log: every state transition, with the attempt it belongs to.
create table events (
  seq     bigint generated always as identity primary key,
  run_id  bigint,
  ti_id   bigint,
  kind    text not null,
  payload jsonb not null default '{}'::jsonb,
  at      timestamptz not null default now()
);
create index events_run on events (run_id, seq);

create table task_logs (
  ti_id      bigint not null references task_instances (id) on delete cascade,
  try_number integer not null,
  seq        integer not null,
  stream     text not null check (stream in ('stdout', 'stderr', 'system')),
  line       text not null,
  at         timestamptz not null default now(),
  primary key (ti_id, try_number, seq)
);
