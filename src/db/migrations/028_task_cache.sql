-- The completion cache (issue 40): one row a (DAG, task, task spec hash, key hash). A cached task's
-- attempt inserts its row as 'running' before its process starts, so a second run with the same key
-- finds it and waits for that attempt instead of running the task again (the primary key is the
-- lock: it holds across replicas and leader changes). The attempt's successful end marks it 'done'
-- with its output, in the statement that records the end; a failed end deletes it. A row whose
-- attempt is no longer current is taken over by the next attempt that looks.
create table task_cache (
  dag_id        text not null,
  task_id       text not null,
  spec_hash     text not null,
  key_hash      text not null,
  state         text not null check (state in ('running', 'done')),
  -- The attempt that runs (or ran) the task for this key.
  ti_id         bigint not null,
  try_number    integer not null,
  attempt_token uuid not null,
  ttl_ms        bigint not null,
  value         jsonb,
  created_at    timestamptz not null default now(),
  done_at       timestamptz,
  expires_at    timestamptz,
  primary key (dag_id, task_id, spec_hash, key_hash)
);
create index task_cache_attempt on task_cache (attempt_token);
create index task_cache_expires on task_cache (expires_at) where state = 'done';

-- A task instance that ended from the cache: the try it ended, and where its result came from.
create table task_cache_hits (
  ti_id         bigint not null references task_instances (id) on delete cascade,
  try_number    integer not null,
  key_hash      text not null,
  source_ti_id  bigint not null,
  source_run_id bigint not null,
  source_try    integer not null,
  recorded_at   timestamptz not null default now(),
  primary key (ti_id, try_number)
);

-- `--no-cache`: a run triggered with it, or a task instance cleared with it, runs its cached tasks
-- (and refreshes their entries) instead of reusing a result.
alter table dag_runs add column no_cache boolean not null default false;
alter table task_instances add column no_cache boolean not null default false;
