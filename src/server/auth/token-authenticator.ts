import type { ApiTokenMatch, ApiTokenRow } from '../../db/tokens/api-tokens.js';
import { findApiTokenByHash } from '../../db/tokens/api-tokens.js';
import type { Sql } from '../../db/sql.js';
import { hashTokenSecret, secretsEqual } from './token-secret.js';

export type Authenticated = { ok: true; token: ApiTokenRow } | { ok: false; reason: string };

/** Finds the live token a presented secret belongs to. */
export interface TokenAuthenticator {
  authenticate(secret: string): Promise<Authenticated>;
  /** This token was revoked (a notification from any replica, or this one's own revoke). */
  forget(tokenId: string): void;
}

/** A lookup is reused this long at most: a revocation whose notification was lost holds within it. */
export const TOKEN_LOOKUP_TTL_MS = 1000;
/** Lookups kept at most (found or not); the oldest go first. */
const MAX_KEPT = 10_000;

interface Kept {
  row: ApiTokenMatch | null;
  until: number;
}

/**
 * Looks a secret up by its SHA-256 in Postgres, and keeps the answer for a second: a client
 * that floods, with a good token or a bad one, costs the database one lookup a second, not one a
 * call. A revocation holds at once on every replica whose notification listener is up (the
 * `leoflow_token_revoked` notification drops the token here), and within the second otherwise.
 * Expiry is checked at each call. Looking up by the hash leaks nothing usable by timing (an
 * attacker cannot steer the hash of what they send); the found hash is compared again in
 * constant time all the same. Unknown, revoked and expired tokens get different reasons: the
 * holder of a token should learn why it stopped working, and telling them reveals nothing.
 */
export class CachingTokenAuthenticator implements TokenAuthenticator {
  readonly #find: (hash: Buffer) => Promise<ApiTokenMatch | null>;
  readonly #now: () => number;
  /** By the hex of the secret's hash, oldest first. */
  readonly #kept = new Map<string, Kept>();
  /** Lookups on their way, so a burst of calls with one secret makes one. */
  readonly #looking = new Map<string, Promise<ApiTokenMatch | null>>();
  /** Bumped at each revocation: a lookup sent before it is not kept. */
  #epoch = 0;

  /** @param find the store's lookup by hash (a fake in unit tests). */
  constructor(find: (hash: Buffer) => Promise<ApiTokenMatch | null>, now: () => number = Date.now) {
    this.#find = find;
    this.#now = now;
  }

  async authenticate(secret: string): Promise<Authenticated> {
    const hash = hashTokenSecret(secret);
    const row = await this.#lookup(hash);
    if (row === null || !secretsEqual(row.hash, hash)) return { ok: false, reason: 'unknown API token' };
    if (row.revoked_at !== null)
      return { ok: false, reason: `API token "${row.id}" was revoked at ${row.revoked_at.toISOString()}` };
    if (row.expires_at !== null && row.expires_at.getTime() <= this.#now())
      return { ok: false, reason: `API token "${row.id}" expired at ${row.expires_at.toISOString()}` };
    const { hash: _h, expired: _e, ...token } = row;
    return { ok: true, token };
  }

  forget(tokenId: string): void {
    this.#epoch++;
    for (const [key, kept] of this.#kept) if (kept.row?.id === tokenId) this.#kept.delete(key);
  }

  async #lookup(hash: Buffer): Promise<ApiTokenMatch | null> {
    const key = hash.toString('hex');
    const kept = this.#kept.get(key);
    if (kept && kept.until > this.#now()) return kept.row;
    const on = this.#looking.get(key);
    if (on) return on;
    const epoch = this.#epoch;
    const looking = this.#find(hash);
    this.#looking.set(key, looking);
    try {
      const row = await looking;
      if (epoch === this.#epoch) this.#keep(key, row);
      return row;
    } finally {
      this.#looking.delete(key);
    }
  }

  #keep(key: string, row: ApiTokenMatch | null): void {
    this.#kept.delete(key);
    this.#kept.set(key, { row, until: this.#now() + TOKEN_LOOKUP_TTL_MS });
    while (this.#kept.size > MAX_KEPT) this.#kept.delete(this.#kept.keys().next().value!);
  }
}

export function createTokenAuthenticator(sql: Sql): TokenAuthenticator {
  return new CachingTokenAuthenticator((hash) => findApiTokenByHash(sql, hash));
}
