import type { Logger } from 'pino';
import { findPodAttempt } from '../../db/attempts/find-pod-attempt.js';
import type { Sql } from '../../db/sql.js';
import { podName } from '../../core/pod-identity.js';
import { hasUsableAdminToken, upsertApiToken } from '../../db/tokens/api-tokens.js';
import type { AgentCredentials } from './agent-credential.js';
import type { Config } from '../config/config.js';
import { isLoopback } from '../config/is-loopback.js';
import { createTokenAuthenticator, type TokenAuthenticator } from './token-authenticator.js';
import { hashTokenSecret } from './token-secret.js';
import { TokenStreams } from './token-streams.js';

/** The id the operator's own admin token (`--bootstrap-admin-token`) is stored under. */
export const BOOTSTRAP_ADMIN_ID = 'bootstrap-admin';

/** Thrown when auth is required and nobody could ever pass it: the replica does not start. */
export class NoAdminTokenError extends Error {
  override readonly name = 'NoAdminTokenError';
}

/**
 * Readies the replica's auth at start: stores the operator's bootstrap admin token, refuses to
 * start an authenticated API that no token could manage, and says in the log, at every start,
 * that a replica runs without auth where it would need it.
 */
export async function prepareAuth(
  config: Config,
  sql: Sql,
  logger: Logger,
  /** Told of each agent Hello refused for a bound (`--max-token-agents`). */
  agentsLimited?: () => void,
): Promise<{
  required: boolean;
  authenticator: TokenAuthenticator;
  agentCredentials: AgentCredentials;
  streams: TokenStreams;
}> {
  const authenticator = createTokenAuthenticator(sql);
  if (config.insecure && (config.edition === 'pro' || !isLoopback(config.listenHost))) {
    logger.warn(
      { apiAddress: `${config.listenHost}:${config.listenPort}`, edition: config.edition },
      'INSECURE: --insecure given: anyone who reaches the API port may do anything, ' +
        'and any process may say Hello as any agent',
    );
  }
  if (config.agentToken !== null) {
    logger.warn(
      '--agent-token is deprecated: it lets any agent take any agent id; ' +
        'create a token per agent with `leoflow token create --role agent --agent-pattern ID`',
    );
  }
  if (config.authRequired) {
    if (config.bootstrapAdminToken !== null && config.role !== 'observer') {
      await upsertApiToken(sql, {
        id: BOOTSTRAP_ADMIN_ID,
        name: 'from --bootstrap-admin-token',
        role: 'admin',
        hash: hashTokenSecret(config.bootstrapAdminToken),
      });
    }
    if (!(await hasUsableAdminToken(sql))) {
      const why =
        config.edition === 'pro'
          ? 'the pro edition requires API tokens'
          : `API tokens are required on ${config.listenHost}, which is not a loopback address`;
      throw new NoAdminTokenError(
        `${why}, and no usable admin token exists: ` +
          `create one with \`leoflow token create --role admin --database-url URL\`, ` +
          `or set LEOFLOW_BOOTSTRAP_ADMIN_TOKEN (--bootstrap-admin-token), or pass --insecure to run open`,
      );
    }
  }
  const streams = new TokenStreams({
    watch: config.maxTokenWatches,
    follow: config.maxTokenFollows,
    agent: config.maxTokenStreams,
  });
  return {
    required: config.authRequired,
    authenticator,
    streams,
    agentCredentials: {
      streams,
      required: config.authRequired,
      authenticator,
      sharedToken: config.agentToken,
      maxTokenAgents: config.maxTokenAgents,
      limited: () => agentsLimited?.(),
      podOfAttempt: async (tiId, attemptToken) => {
        const a = await findPodAttempt(sql, tiId, attemptToken);
        return a ? podName(a) : null;
      },
    },
  };
}
