import { Code, ConnectError } from '@connectrpc/connect';
import { agentPatternMatches } from '../../core/api-role.js';
import type { TokenAuthenticator } from './token-authenticator.js';
import { secretsEqual } from './token-secret.js';
import type { TokenStreams } from './token-streams.js';

/** What an agent's Hello is checked against. */
export interface AgentCredentials {
  /** True when every agent must present a credential (auth is on: Pro, or Lite off loopback). */
  required: boolean;
  authenticator: TokenAuthenticator;
  /** The deprecated shared `--agent-token`, good for any agent id; null when none is set. */
  sharedToken: string | null;
  /**
   * The pod name of the live kubernetes attempt holding this token, or null. A pod's agent
   * (Hello.only_attempt_token) needs no other credential: it may be that pod, for that attempt only.
   */
  podOfAttempt(tiId: string, attemptToken: string): Promise<string | null>;
  /** Where an agent stream let in by an API token registers, to end when the token does. */
  streams?: TokenStreams;
  /** The agent rows one API token may hold (`--max-token-agents`); a new agent id past it is refused. */
  maxTokenAgents?: number;
  /** Told of each Hello refused for a bound. */
  limited?(limit: 'agents'): void;
}

/** The API token a Hello was let in with: the stream lives only as long as it (token-streams.ts). */
export interface AgentTokenUsed {
  id: string;
  expires_at: Date | null;
}

/** The Hello fields a credential is checked with. */
export interface HelloCredential {
  agentId: string;
  token: string;
  onlyTiId: string;
  onlyAttemptToken: string;
}

/**
 * Checks the credential in a Hello before anything is written for the agent id it claims. A token
 * of role agent is accepted only for the ids its pattern matches (PERMISSION_DENIED naming the id
 * otherwise), so holding one agent's token never lets a process take another's id and, with it,
 * that agent's attempts. A pod's agent may prove itself with its attempt's token instead. The
 * deprecated shared `--agent-token` is still accepted, compared in constant time.
 *
 * `certified`: a client certificate verified against --tls-client-ca names this agent id
 * (tls-identity.ts), a per-agent credential of its own. `podWithoutCertificate`: mTLS is on and
 * this agent presented no certificate, which only a pod's agent may do (it has no certificate of
 * its pod's name): its attempt's token is then the only proof accepted, whatever else it sends.
 */
export async function checkAgentCredential(
  h: HelloCredential,
  c: AgentCredentials,
  opts: { certified?: boolean; podWithoutCertificate?: boolean } = {},
): Promise<AgentTokenUsed | null> {
  const { agentId, token: presented } = h;
  if (opts.podWithoutCertificate) return checkPodAttempt(h, c).then(() => null);
  if (opts.certified && presented === '') return null;
  if ((c.required || c.sharedToken !== null) && presented === '' && h.onlyAttemptToken !== '')
    return checkPodAttempt(h, c).then(() => null);
  if (presented !== '') {
    const who = await c.authenticator.authenticate(presented);
    if (who.ok) {
      const t = who.token;
      if (t.role !== 'agent')
        throw new ConnectError(
          `hello.token: token "${t.id}" has role ${t.role}, not agent: ` +
            `create one with \`leoflow token create --role agent --agent-pattern ID\``,
          Code.PermissionDenied,
        );
      if (!agentPatternMatches(t.agent_pattern!, agentId)) {
        throw new ConnectError(
          `hello.token: token "${t.id}" is bound to agent ids matching "${t.agent_pattern}", ` +
            `not to agent id "${agentId}"`,
          Code.PermissionDenied,
        );
      }
      return { id: t.id, expires_at: t.expires_at };
    }
    if (c.sharedToken !== null && secretsEqual(presented, c.sharedToken)) return null;
    if (c.required || c.sharedToken !== null)
      throw new ConnectError(`hello.token: ${who.reason}`, Code.Unauthenticated);
    return null;
  }
  if (c.required || c.sharedToken !== null) {
    throw new ConnectError(
      'hello.token: this control plane needs an agent credential: ' +
        'set LEOFLOW_AGENT_TOKEN to a token of role agent bound to this agent id',
      Code.Unauthenticated,
    );
  }
  return null;
}

/** The attempt's own token, from the pod the kubernetes executor made for it (its name is the agent id). */
async function checkPodAttempt(h: HelloCredential, c: AgentCredentials): Promise<void> {
  const pod =
    /^[1-9]\d{0,18}$/.test(h.onlyTiId) && h.onlyAttemptToken !== ''
      ? await c.podOfAttempt(h.onlyTiId, h.onlyAttemptToken)
      : null;
  if (pod !== null && secretsEqual(pod, h.agentId)) return;
  throw new ConnectError(
    `hello.only_attempt_token: ` +
      `no live kubernetes attempt of task instance ${h.onlyTiId} with this token runs in a pod named "${h.agentId}"`,
    Code.Unauthenticated,
  );
}
