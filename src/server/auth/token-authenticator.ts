import type { ApiTokenRow } from '../../db/tokens/api-tokens.js';
import { findApiTokenByHash } from '../../db/tokens/api-tokens.js';
import type { Sql } from '../../db/sql.js';
import { hashTokenSecret, secretsEqual } from './token-secret.js';

export type Authenticated = { ok: true; token: ApiTokenRow } | { ok: false; reason: string };

/** Finds the live token a presented secret belongs to. */
export interface TokenAuthenticator {
  authenticate(secret: string): Promise<Authenticated>;
}

/**
 * Looks a secret up by its SHA-256 in Postgres at every call, so a revocation holds from the next
 * call on every replica. Looking up by the hash leaks nothing usable by timing (an attacker cannot
 * steer the hash of what they send); the found hash is compared again in constant time all the same.
 * Unknown, revoked and expired tokens get different reasons: the holder of a token should learn
 * why it stopped working, and telling them reveals nothing to someone without one.
 */
export function createTokenAuthenticator(sql: Sql): TokenAuthenticator {
  return {
    async authenticate(secret) {
      const hash = hashTokenSecret(secret);
      const row = await findApiTokenByHash(sql, hash);
      if (row === null || !secretsEqual(row.hash, hash)) return { ok: false, reason: 'unknown API token' };
      if (row.revoked_at !== null)
        return { ok: false, reason: `API token "${row.id}" was revoked at ${row.revoked_at.toISOString()}` };
      if (row.expired)
        return { ok: false, reason: `API token "${row.id}" expired at ${row.expires_at!.toISOString()}` };
      const { hash: _h, expired: _e, ...token } = row;
      return { ok: true, token };
    },
  };
}
