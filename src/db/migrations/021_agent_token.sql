-- The API token an agent's row was registered with (null: the shared token, a certificate, a pod's
-- attempt token, or auth off), so one agent token can hold only so many agent rows.
alter table agents add column token_id text;
create index agents_token on agents (token_id) where token_id is not null;
