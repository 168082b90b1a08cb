-- Bumped by the one write that moves a run's task instances backwards (a clear, with the run row
-- locked). The planner decides from a read and writes in one later statement, for many runs at
-- once; each run's part of that statement applies only if its epoch is still the one it read, so
-- a decision made before a clear (say "upstream failed") never lands after it.
alter table dag_runs add column plan_epoch bigint not null default 0;
