-- API tokens (issue 25): who may call the API and as what. Only the SHA-256 of a token's secret is
-- kept (`hash`, unique: a presented token is found by its hash). Rows are never deleted: a revoked
-- or expired token stays listed, so an audit can tell which one was used.
create table api_tokens (
  id            text primary key,
  name          text not null default '',
  role          text not null check (role in ('viewer', 'operator', 'admin', 'agent')),
  -- The agent ids an agent token may say Hello as (a glob); only for role agent.
  agent_pattern text check ((role = 'agent') = (agent_pattern is not null)),
  hash          bytea not null unique check (octet_length(hash) = 32),
  created_at    timestamptz not null default now(),
  expires_at    timestamptz,
  revoked_at    timestamptz
);
