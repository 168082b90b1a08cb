-- Where each replica takes agent streams (issue 34): a replica that stops gracefully sends its
-- agents to the others' addresses, and every Welcome lists them, so an agent given one address
-- still finds a new home. Whether a replica is alive is read from Postgres (its named session,
-- see db/replicas.ts), so a row left by a replica that died is ignored, then overwritten.
create table replica_addresses (
  replica_id text primary key,
  agent_url text not null,
  advertised_at timestamptz not null default now()
);
