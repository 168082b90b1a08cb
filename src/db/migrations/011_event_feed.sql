-- Watching events as they happen (issue 26). A watcher's cursor is `seq`, which is taken at
-- insert, not at commit: a transaction can commit seq 11 while another still holds seq 10. The
-- replica's event feed (src/server/event-feed.ts) therefore delivers only up to a horizon: the
-- sequence's last value read before a snapshot whose in-progress transactions have all ended.
-- That is sound only if a writer holds its transaction id before it takes a seq, which this
-- statement-level trigger makes so (it runs before the statement's first row is built, and with
-- it the row defaults, nextval among them). It also NOTIFYs, delivered at commit and folded into
-- one per transaction, so each replica's one LISTEN learns that new events may be visible.
create function leoflow_events_written() returns trigger language plpgsql as $$
begin
  perform pg_current_xact_id();
  perform pg_notify('leoflow_events', '');
  return null;
end $$;

create trigger events_written before insert on events
  for each statement execute function leoflow_events_written();

-- A following TailLogs wakes on this instead of polling (one NOTIFY per transaction of lines).
create function leoflow_logs_written() returns trigger language plpgsql as $$
begin
  perform pg_notify('leoflow_logs', '');
  return null;
end $$;

create trigger task_logs_written after insert on task_logs
  for each statement execute function leoflow_logs_written();
