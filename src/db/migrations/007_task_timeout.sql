-- A task instance carries its task's execution timeout (from the run's spec snapshot, like its
-- retries), so the leader can end an attempt its holder let run past the timeout without reading
-- the spec of every running run each step.
alter table task_instances add column timeout_ms integer;
-- Task instances that may still run keep the timeout their run was created with.
update task_instances t set timeout_ms = (x.task->>'timeoutMs')::int
from dag_runs r, jsonb_array_elements(r.spec->'tasks') as x(task)
where r.id = t.run_id and x.task->>'id' = t.task_id and x.task->>'timeoutMs' is not null
  and t.state in ('none', 'scheduled', 'queued', 'running', 'up_for_retry');
