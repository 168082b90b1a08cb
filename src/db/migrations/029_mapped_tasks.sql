-- Fan-out at run time (issue 40): a task with `map:` gets one task instance per item of a list in
-- its upstream's output, named `task[index]`, inserted in one statement with the move that waits
-- its task on them. Each is an ordinary task instance (own tries, output, log) that also knows its
-- task's instance (map_parent), its place in the list (map_index) and its item. The task's own
-- instance counts them (map_count), so a downstream knows to read a list of outputs.
alter table task_instances
  add column map_parent bigint references task_instances (id) on delete cascade,
  add column map_index  integer,
  add column map_item   jsonb,
  add column map_count  integer;

-- The mapped instances of a task in item order: the next ones to schedule, the outputs in order,
-- the counts by state when they are all done.
create index task_instances_map on task_instances (map_parent, map_index) where map_parent is not null;

-- The planner reads a run's own task instances without its (perhaps 100,000) mapped ones, and of
-- those only the ones in flight.
create index task_instances_run_unmapped on task_instances (run_id) where map_parent is null;
create index task_instances_map_live on task_instances (run_id)
  where map_parent is not null and state in ('scheduled', 'queued', 'running', 'up_for_retry');
-- The next mapped instances of a task to schedule, found without walking the ones already done.
create index task_instances_map_next on task_instances (map_parent, map_index)
  where map_parent is not null and state = 'none';
