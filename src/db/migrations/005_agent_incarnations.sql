-- Agent incarnations: each agent process sends a random id in its Hello. `agents.incarnation_id`
-- is the process that holds the agent id now; `task_instances.delivered_to` is the process the
-- current attempt's Assign was sent to (null until it is sent, reset by every claim), so an
-- attempt is never sent with the same token to two processes.
alter table agents add column incarnation_id uuid;
alter table task_instances add column delivered_to uuid;
