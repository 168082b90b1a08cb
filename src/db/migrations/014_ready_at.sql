-- Since when a task instance's current try has been ready to run: set as it moves to scheduled,
-- and at a claim to its due time (a retry's next_try_at) when it was not scheduled first. The
-- wait a task had (ready → started) and the oldest wait now are read from it.
alter table task_instances add column ready_at timestamptz;
