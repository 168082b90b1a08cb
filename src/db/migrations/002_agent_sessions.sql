-- Agents: which stream (session) of which replica holds an agent now, so that a stream that
-- closes late never marks a newer stream of the same agent disconnected.
alter table agents add column session_id uuid;
alter table agents add column connected_at timestamptz;
alter table agents add column protocol_version integer;
create index agents_connected on agents (connected_replica) where connected_replica is not null;
create index task_instances_agent on task_instances (agent_id) where state in ('queued', 'running');
