-- Watching events as they happen (issue 26). A watcher's cursor is `seq`, which is taken at
-- insert, not at commit: a transaction can commit seq 11 while another still holds seq 10. The
-- replica's event feed (src/server/event-feed.ts) therefore delivers only up to a horizon: the
-- last seq taken, read before a snapshot whose open transactions have all ended by then. That is
-- sound only if a writer has its transaction id before it takes a seq, which an identity cannot
-- promise (its nextval runs before anything in the statement writes): `seq` is numbered by a
-- function that takes the transaction id first, on a sequence of our own that goes on where the
-- identity's stopped.
create sequence events_seq as bigint;
select setval('events_seq', coalesce((select max(seq) from events), 0) + 1, false);
alter table events alter column seq drop identity;
create function leoflow_next_event_seq() returns bigint language plpgsql volatile as $$
begin
  perform pg_current_xact_id();
  return nextval('events_seq');
end $$;
alter table events alter column seq set default leoflow_next_event_seq();
alter table events alter column seq set not null;
alter sequence events_seq owned by events.seq;

-- Each replica's one LISTEN learns that new events may be visible: delivered at commit, one per
-- transaction however many statements wrote events.
create function leoflow_events_written() returns trigger language plpgsql as $$
begin
  perform pg_notify('leoflow_events', '');
  return null;
end $$;
create trigger events_written after insert on events
  for each statement execute function leoflow_events_written();

-- A following TailLogs wakes on this instead of polling (one NOTIFY per transaction of lines).
create function leoflow_logs_written() returns trigger language plpgsql as $$
begin
  perform pg_notify('leoflow_logs', '');
  return null;
end $$;
create trigger task_logs_written after insert on task_logs
  for each statement execute function leoflow_logs_written();
