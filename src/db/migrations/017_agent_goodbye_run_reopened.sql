-- Every state tells the truth (issue 33).
-- An agent that ended its stream itself (its goodbye: a clean stop) is shown as stopped, not stale
-- and then dead: when it said goodbye, cleared by its next Hello.
alter table agents add column stopped_at timestamptz;
-- A run's started_at is its first start, so its duration is the wall time from that start to its
-- last end, also after a clear re-opened it. When it was last re-opened is kept apart: the
-- orphan-run reaper measures a re-opened run from then.
alter table dag_runs add column reopened_at timestamptz;
