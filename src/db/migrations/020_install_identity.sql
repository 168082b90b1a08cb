-- Which install this database is: an id made once, kept through restarts, failovers and dumps.
-- The Kubernetes executor labels every pod with it and selects only its own, so two installs
-- (staging and production, two teams) can share a namespace without touching each other's pods.
create table leoflow_install (
  only_row boolean primary key default true check (only_row),
  id text not null default replace(gen_random_uuid()::text, '-', '')
);
insert into leoflow_install default values;
