-- DAG versions (issue 23): a run names the version of its DAG it was made from instead of holding
-- a copy of the spec (1–13 KB a run). A version is written by the statement that bumps the DAG's
-- version (dags.ts, upsertDag) and never changes, so applying a DAG still never changes a run in
-- flight. Versions go only with their DAG (the cascade below), never with retention, so every run
-- left finds its version. No foreign key from dag_runs: a run's insert would lock the version row.
-- `max_active_runs` is the spec's, kept beside it so the planner's check at the write
-- (plan/apply-plans.ts) reads an integer, not the spec.
create table dag_versions (
  dag_id          text not null references dags (dag_id) on delete cascade,
  version         integer not null,
  spec            jsonb not null,
  max_active_runs integer not null check (max_active_runs > 0),
  created_at      timestamptz not null default now(),
  primary key (dag_id, version)
);

-- Every version a run was made from, from the runs' copies (those of one version are the same
-- spec: a version's spec never changed), then each DAG's current version if no run has it yet.
insert into dag_versions (dag_id, version, spec, max_active_runs, created_at)
select distinct on (r.dag_id, r.dag_version) r.dag_id, r.dag_version, r.spec,
       coalesce((r.spec->>'maxActiveRuns')::int, d.max_active_runs), r.created_at
from dag_runs r join dags d on d.dag_id = r.dag_id
order by r.dag_id, r.dag_version, r.id;
insert into dag_versions (dag_id, version, spec, max_active_runs, created_at)
select dag_id, version, spec, max_active_runs, updated_at from dags
on conflict (dag_id, version) do nothing;

alter table dag_runs drop column spec;

-- The queued runs of a DAG, by the index of them alone (issue 23): the planner's read of queued
-- runs looks here every tick, and the index of active runs would walk past every running run.
create index dag_runs_queued on dag_runs (dag_id, id) where state = 'queued';
