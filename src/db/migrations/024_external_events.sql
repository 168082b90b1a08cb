-- Events sent in from outside (SendEvent): each kept once per (name, sender's id), so a sender that
-- retries after a lost answer starts nothing twice. A run an event starts is of type 'event', keyed
-- by the event's id, and made in the event's own transaction.
create table external_events (
  id          bigserial primary key,
  name        text not null,
  event_key   text not null,
  payload     jsonb not null,
  actor       jsonb,
  received_at timestamptz not null default now(),
  unique (name, event_key)
);
create index external_events_received_at on external_events (received_at);

alter table dag_runs drop constraint dag_runs_run_type_check;
alter table dag_runs add constraint dag_runs_run_type_check check (run_type in ('manual', 'scheduled', 'event'));

-- The DAGs an event names, found without reading every DAG's spec.
create index dags_triggers on dags using gin ((spec -> 'triggers') jsonb_path_ops);
