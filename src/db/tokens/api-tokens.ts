import type { TokenRole } from '../../core/api-role.js';
import { CHANNELS } from '../notifications.js';
import type { Sql } from '../sql.js';

/** A stored token, as lists show it: never its secret, nor its hash. */
export interface ApiTokenRow {
  id: string;
  name: string;
  role: TokenRole;
  agent_pattern: string | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
}

/** Stores a token by the hash of its secret. */
export async function insertApiToken(
  sql: Sql,
  t: { id: string; name: string; role: TokenRole; agentPattern: string | null; hash: Buffer; expiresAt: Date | null },
): Promise<ApiTokenRow> {
  const [row] = await sql<ApiTokenRow[]>`
    insert into api_tokens (id, name, role, agent_pattern, hash, expires_at)
    values (${t.id}, ${t.name}, ${t.role}, ${t.agentPattern}, ${t.hash}, ${t.expiresAt})
    returning id, name, role, agent_pattern, created_at, expires_at, revoked_at`;
  return row!;
}

/**
 * Stores a token whose secret the operator chose (the bootstrap admin token from a Secret) under
 * a fixed id. A changed secret replaces the old one; a revoked one stays revoked.
 */
export async function upsertApiToken(
  sql: Sql,
  t: { id: string; name: string; role: TokenRole; hash: Buffer },
): Promise<void> {
  await sql`
    insert into api_tokens (id, name, role, hash) values (${t.id}, ${t.name}, ${t.role}, ${t.hash})
    on conflict (id) do update set hash = excluded.hash where api_tokens.revoked_at is null`;
}

export async function listApiTokens(sql: Sql): Promise<ApiTokenRow[]> {
  return sql<
    ApiTokenRow[]
  >`select id, name, role, agent_pattern, created_at, expires_at, revoked_at from api_tokens order by created_at, id`;
}

/** Revokes a token; false when it was revoked already, null when there is none of that id. */
export async function revokeApiToken(sql: Sql, id: string): Promise<boolean | null> {
  // The notification goes with the revocation, however it is made (the API, or the CLI straight
  // into the database): every replica ends the token's open streams on it (token-streams.ts).
  const [row] = await sql<{ revoked: boolean }[]>`
    with r as (
      update api_tokens set revoked_at = coalesce(revoked_at, now()) where id = ${id}
      returning id, (revoked_at = now()) as revoked)
    select revoked, pg_notify(${CHANNELS.tokenRevoked}, id) from r`;
  return row ? row.revoked : null;
}

/** A token found by its hash, with what decides whether it is usable now. */
export interface ApiTokenMatch extends ApiTokenRow {
  hash: Buffer;
  expired: boolean;
}

export async function findApiTokenByHash(sql: Sql, hash: Buffer): Promise<ApiTokenMatch | null> {
  const [row] = await sql<ApiTokenMatch[]>`
    select id, name, role, agent_pattern, hash, created_at, expires_at, revoked_at,
           coalesce(expires_at <= now(), false) as expired
      from api_tokens where hash = ${hash}`;
  return row ?? null;
}

/** True when some admin token is usable: without one, nobody could manage an authenticated API. */
export async function hasUsableAdminToken(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from api_tokens
     where role = 'admin' and revoked_at is null and (expires_at is null or expires_at > now())`;
  return row!.n > 0;
}
