import { Code, ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import type { TokenRole } from '../../src/core/api-role.js';
import { checkAgentCredential, type AgentCredentials } from '../../src/server/auth/agent-credential.js';
import type { TokenAuthenticator } from '../../src/server/auth/token-authenticator.js';

/** Tokens "role:pattern" (a fake at the database's edge; the e2e tests use Postgres). */
const authenticator: TokenAuthenticator = {
  forget: () => {},
  async authenticate(secret) {
    const [role, pattern] = secret.split(':');
    if (!['viewer', 'operator', 'admin', 'agent'].includes(role!)) return { ok: false, reason: 'unknown API token' };
    return {
      ok: true,
      token: {
        id: 'tok1',
        name: '',
        role: role as TokenRole,
        agent_pattern: pattern ?? null,
        created_at: new Date(),
        expires_at: null,
        revoked_at: null,
      },
    };
  },
};
const ATTEMPT = '6f1c1d2e-9a0b-4c3d-8e7f-0123456789ab';
const creds = (o: Partial<AgentCredentials> = {}): AgentCredentials => ({
  required: true,
  authenticator,
  sharedToken: null,
  podOfAttempt: async (tiId, token) => (tiId === '7' && token === ATTEMPT ? 'lf-pod-7' : null),
  ...o,
});
const hello = (agentId: string, token = '', onlyAttemptToken = '', onlyTiId = '') => ({
  agentId,
  token,
  onlyAttemptToken,
  onlyTiId,
});
const refusal = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'accepted';
  } catch (err) {
    return `${Code[(err as ConnectError).code]}: ${(err as ConnectError).rawMessage}`;
  }
};

describe('agent credential at Hello', () => {
  it('accepts an agent token for the ids its pattern matches, refuses others naming the id', async () => {
    expect(await refusal(checkAgentCredential(hello('gpu-3', 'agent:gpu-*'), creds()))).toBe('accepted');
    expect(await refusal(checkAgentCredential(hello('cpu-1', 'agent:gpu-*'), creds()))).toBe(
      'PermissionDenied: hello.token: token "tok1" is bound to agent ids matching "gpu-*", not to agent id "cpu-1"',
    );
  });
  it('refuses an API token of another role at Hello', async () => {
    expect(await refusal(checkAgentCredential(hello('a', 'admin'), creds()))).toMatch(
      /^PermissionDenied: hello.token: token "tok1" has role admin, not agent/,
    );
  });
  it('with auth required, refuses no token and an unknown one', async () => {
    expect(await refusal(checkAgentCredential(hello('a'), creds()))).toMatch(
      /^Unauthenticated: hello.token: this control plane needs an agent credential/,
    );
    expect(await refusal(checkAgentCredential(hello('a', 'nope'), creds()))).toBe(
      'Unauthenticated: hello.token: unknown API token',
    );
  });
  it('accepts the deprecated shared token for any id, and refuses a wrong one', async () => {
    const c = creds({ required: false, sharedToken: 's3cret' });
    expect(await refusal(checkAgentCredential(hello('any', 's3cret'), c))).toBe('accepted');
    expect(await refusal(checkAgentCredential(hello('any', 's3cres'), c))).toBe(
      'Unauthenticated: hello.token: unknown API token',
    );
    expect(await refusal(checkAgentCredential(hello('any'), c))).toMatch(/^Unauthenticated/);
  });
  it("lets a pod say Hello with its live attempt's token, as that pod only", async () => {
    expect(await refusal(checkAgentCredential(hello('lf-pod-7', '', ATTEMPT, '7'), creds()))).toBe('accepted');
    expect(await refusal(checkAgentCredential(hello('lf-pod-8', '', ATTEMPT, '7'), creds()))).toMatch(
      /^Unauthenticated: hello.only_attempt_token: no live kubernetes attempt of task instance 7/,
    );
    expect(await refusal(checkAgentCredential(hello('lf-pod-7', '', ATTEMPT, 'x'), creds()))).toMatch(
      /^Unauthenticated/,
    );
  });
  it("under mTLS, takes a pod's agent without a certificate on its attempt's token alone, for that pod's id only, even with auth off", async () => {
    const mtlsPod = { podWithoutCertificate: true };
    for (const c of [creds(), creds({ required: false })]) {
      expect(await refusal(checkAgentCredential(hello('lf-pod-7', '', ATTEMPT, '7'), c, mtlsPod))).toBe('accepted');
      expect(await refusal(checkAgentCredential(hello('lf-pod-8', '', ATTEMPT, '7'), c, mtlsPod))).toMatch(
        /^Unauthenticated: hello.only_attempt_token: no live kubernetes attempt of task instance 7 with this token runs in a pod named "lf-pod-8"/,
      );
      expect(
        await refusal(
          checkAgentCredential(hello('lf-pod-7', '', '00000000-0000-4000-8000-000000000000', '7'), c, mtlsPod),
        ),
      ).toMatch(/^Unauthenticated: hello.only_attempt_token/);
      // A good agent token does not stand in for the missing certificate.
      expect(await refusal(checkAgentCredential(hello('lf-pod-8', 'agent:*', ATTEMPT, '7'), c, mtlsPod))).toMatch(
        /^Unauthenticated: hello.only_attempt_token/,
      );
    }
  });
  it('stays open where auth is not required and no shared token is set (Lite on loopback)', async () => {
    const c = creds({ required: false });
    expect(await refusal(checkAgentCredential(hello('a'), c))).toBe('accepted');
    expect(await refusal(checkAgentCredential(hello('a', 'whatever'), c))).toBe('accepted');
  });
});
