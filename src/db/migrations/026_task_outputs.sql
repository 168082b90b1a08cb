-- A task's output (issue 40): the JSON its attempt wrote to LEOFLOW_OUTPUT, one row per attempt,
-- written by the statement that records the attempt's end and only while its token is current,
-- so a zombie's output never lands. Every try keeps its own row; a clear keeps the earlier ones
-- (try numbers go on after a clear). Removed with its task instance.
create table task_outputs (
  ti_id         bigint not null references task_instances (id) on delete cascade,
  try_number    integer not null,
  attempt_token uuid not null,
  value         jsonb not null,
  size_bytes    integer not null,
  recorded_at   timestamptz not null default now(),
  primary key (ti_id, try_number, attempt_token)
);
