import { Code, type ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { TokenStreams } from '../../src/server/auth/token-streams.js';

/** The count `leoflow token revoke` prints: the streams this replica ended, whichever path ended them. */
describe('TokenStreams', () => {
  const token = { id: 't1', expires_at: null };

  it("counts for the revoking call the streams its own notification ended first (the race CI's run hit: 'ended 0')", () => {
    const streams = new TokenStreams();
    const ended: ConnectError[] = [];
    streams.open(token, 'watch', (e) => ended.push(e));
    streams.open(token, 'watch', (e) => ended.push(e));
    // The revocation's NOTIFY came back to this replica before the RevokeToken handler counted.
    expect(streams.revoked('t1')).toBe(2);
    expect(streams.revokedHere('t1')).toBe(2);
    expect(ended.map((e) => e.code)).toEqual([Code.Unauthenticated, Code.Unauthenticated]);
    // Counted once: asked again, nothing is left.
    expect(streams.revokedHere('t1')).toBe(0);
  });

  it('counts the streams the revoking call ends itself, and the late notification finds none', () => {
    const streams = new TokenStreams();
    streams.open(token, 'watch', () => {});
    expect(streams.revokedHere('t1')).toBe(1);
    expect(streams.revoked('t1')).toBe(0);
    expect(streams.revokedHere('t1')).toBe(0);
  });

  it('bounds each kind apart: a token at its watches still follows logs and connects agents', () => {
    const streams = new TokenStreams({ watch: 2, follow: 1, agent: 3 });
    const closes = [streams.open(token, 'watch', () => {}), streams.open(token, 'watch', () => {})];
    expect(() => streams.admit('t1', 'watch')).toThrow(
      'API token "t1" holds 2 open watch streams (WatchRun, WatchRuns, WatchCleanHistory), the limit ' +
        '(--max-token-watches 2): close some first',
    );
    expect(() => streams.admit('t1', 'follow')).not.toThrow();
    expect(() => streams.admit('t1', 'agent')).not.toThrow();
    streams.open(token, 'follow', () => {});
    expect(() => streams.admit('t1', 'follow')).toThrow(/holds 1 open log follows \(TailLogs\).*--max-token-follows 1/);
    // Another token is not this one.
    expect(() => streams.admit('t2', 'watch')).not.toThrow();
    // A closed stream frees its place, once however often its close is called.
    closes[0]!();
    closes[0]!();
    expect(() => streams.admit('t1', 'watch')).not.toThrow();
    streams.open(token, 'watch', () => {});
    expect(() => streams.admit('t1', 'watch')).toThrow(/holds 2 open watch streams/);
  });
});
