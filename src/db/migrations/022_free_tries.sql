-- How many losses of a task instance spent no try (its node lost, its pod evicted), so that such
-- free retries are bounded (--max-free-retries): past the bound a loss spends a try as any other.
alter table task_instances add column free_tries integer not null default 0;
