import { Code, type ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { TokenStreams } from '../../src/server/auth/token-streams.js';

/** The count `leoflow token revoke` prints: the streams this replica ended, whichever path ended them. */
describe('TokenStreams', () => {
  const token = { id: 't1', expires_at: null };

  it("counts for the revoking call the streams its own notification ended first (the race CI's run hit: 'ended 0')", () => {
    const streams = new TokenStreams();
    const ended: ConnectError[] = [];
    streams.open(token, (e) => ended.push(e));
    streams.open(token, (e) => ended.push(e));
    // The revocation's NOTIFY came back to this replica before the RevokeToken handler counted.
    expect(streams.revoked('t1')).toBe(2);
    expect(streams.revokedHere('t1')).toBe(2);
    expect(ended.map((e) => e.code)).toEqual([Code.Unauthenticated, Code.Unauthenticated]);
    // Counted once: asked again, nothing is left.
    expect(streams.revokedHere('t1')).toBe(0);
  });

  it('counts the streams the revoking call ends itself, and the late notification finds none', () => {
    const streams = new TokenStreams();
    streams.open(token, () => {});
    expect(streams.revokedHere('t1')).toBe(1);
    expect(streams.revoked('t1')).toBe(0);
    expect(streams.revokedHere('t1')).toBe(0);
  });
});
