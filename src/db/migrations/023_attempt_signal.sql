-- The signal that killed a task instance's latest try (SIGKILL, SIGTERM, …), beside its exit code:
-- a process ends with one or the other, and an operator needs to tell a kill from a crash.
alter table task_instances add column signal text;
