import { describe, expect, it } from 'vitest';
import type { ApiTokenMatch } from '../../src/db/tokens/api-tokens.js';
import { CachingTokenAuthenticator, TOKEN_LOOKUP_TTL_MS } from '../../src/server/auth/token-authenticator.js';
import { hashTokenSecret } from '../../src/server/auth/token-secret.js';

/** One stored token, `good`, and a count of the store's lookups. */
function store() {
  const row: ApiTokenMatch = {
    id: 'tok-1',
    name: 'ci',
    role: 'operator',
    agent_pattern: null,
    created_at: new Date(0),
    expires_at: null,
    revoked_at: null,
    hash: hashTokenSecret('good'),
    expired: false,
  };
  const s = {
    row,
    lookups: 0,
    find: async (hash: Buffer) => {
      s.lookups++;
      return hash.equals(s.row.hash) ? { ...s.row } : null;
    },
  };
  return s;
}

describe('the token authenticator', () => {
  it('looks a flooding secret up once a second, good or unknown, and one lookup serves a burst', async () => {
    const s = store();
    let now = 0;
    const auth = new CachingTokenAuthenticator(s.find, () => now);
    const burst = await Promise.all(Array.from({ length: 50 }, () => auth.authenticate('good')));
    expect(burst.every((a) => a.ok)).toBe(true);
    for (let i = 0; i < 100; i++) expect((await auth.authenticate('nope')).ok).toBe(false);
    expect(s.lookups).toBe(2);
    now += TOKEN_LOOKUP_TTL_MS;
    await auth.authenticate('good');
    await auth.authenticate('nope');
    expect(s.lookups).toBe(4);
  });

  it('refuses a revoked token at its next call once told, and within the second when not told', async () => {
    const s = store();
    let now = 0;
    const auth = new CachingTokenAuthenticator(s.find, () => now);
    expect((await auth.authenticate('good')).ok).toBe(true);
    s.row.revoked_at = new Date(5);
    auth.forget('tok-1');
    expect(await auth.authenticate('good')).toEqual({
      ok: false,
      reason: 'API token "tok-1" was revoked at 1970-01-01T00:00:00.005Z',
    });

    const untold = store();
    const auth2 = new CachingTokenAuthenticator(untold.find, () => now);
    expect((await auth2.authenticate('good')).ok).toBe(true);
    untold.row.revoked_at = new Date(5);
    now += TOKEN_LOOKUP_TTL_MS - 1;
    expect((await auth2.authenticate('good')).ok).toBe(true);
    now += 1;
    expect((await auth2.authenticate('good')).ok).toBe(false);
  });

  it('does not keep a lookup that was on its way when the token was revoked', async () => {
    const s = store();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const auth = new CachingTokenAuthenticator(async (h) => {
      await gate;
      return s.find(h);
    });
    const first = auth.authenticate('good');
    auth.forget('tok-1');
    release();
    expect((await first).ok).toBe(true);
    s.row.revoked_at = new Date(5);
    expect((await auth.authenticate('good')).ok).toBe(false);
  });

  it('checks expiry at each call, not at the lookup', async () => {
    const s = store();
    s.row.expires_at = new Date(500);
    let now = 0;
    const auth = new CachingTokenAuthenticator(s.find, () => now);
    expect((await auth.authenticate('good')).ok).toBe(true);
    now = 500;
    expect(await auth.authenticate('good')).toEqual({
      ok: false,
      reason: 'API token "tok-1" expired at 1970-01-01T00:00:00.500Z',
    });
    expect(s.lookups).toBe(1);
  });
});
