-- The planner counts the running runs of a DAG (for max_active_runs) whenever it reads a queued
-- run. Without this index that count scanned every queued and running run of the DAG (through
-- dag_runs_active) or, with enough history, the whole table: O(history) on the trigger path.
create index dag_runs_running on dag_runs (dag_id) where state = 'running';
