import { agentPatternProblem, TOKEN_ROLES, type TokenRole } from '../../core/api-role.js';
import { insertApiToken, type ApiTokenRow } from '../../db/tokens/api-tokens.js';
import type { Sql } from '../../db/sql.js';
import { hashTokenSecret, newTokenSecret } from '../auth/token-secret.js';

/** A token request that cannot be granted; the message names the field and the limit. */
export class TokenRequestError extends Error {
  override readonly name = 'TokenRequestError';
}

/** At most ten years: a longer expiry is a typo, and "never" is said with no expiry. */
const MAX_TTL_S = 10 * 365 * 86_400;
const MAX_NAME = 200;

/**
 * Checks and stores a new token, and returns its secret, which exists nowhere else from then on.
 * Used by the API (TokenService) and by `leoflow token create --database-url` for the first admin.
 */
export async function createApiToken(
  sql: Sql,
  req: { name: string; role: string; agentPattern: string; ttlSeconds: number },
): Promise<{ token: ApiTokenRow; secret: string }> {
  if (!(TOKEN_ROLES as readonly string[]).includes(req.role))
    throw new TokenRequestError(
      `role: must be one of ${TOKEN_ROLES.join(', ')}, got ${JSON.stringify(req.role.slice(0, 40))}`,
    );
  const role = req.role as TokenRole;
  if (role === 'agent') {
    const why = agentPatternProblem(req.agentPattern);
    if (why) throw new TokenRequestError(`agent_pattern: ${why}`);
  } else if (req.agentPattern !== '') {
    throw new TokenRequestError(`agent_pattern: only a token of role agent is bound to agent ids; role is ${role}`);
  }
  if (req.name.length > MAX_NAME)
    throw new TokenRequestError(`name: must be at most ${MAX_NAME} characters, got ${req.name.length}`);
  if (/[\u0000-\u001f]/.test(req.name)) throw new TokenRequestError('name: must hold no control characters');
  if (!Number.isInteger(req.ttlSeconds) || req.ttlSeconds < 0 || req.ttlSeconds > MAX_TTL_S) {
    throw new TokenRequestError(
      `ttl_seconds: must be 0 (never expires) to ${MAX_TTL_S} (ten years), got ${req.ttlSeconds}`,
    );
  }
  const { id, secret } = newTokenSecret();
  const token = await insertApiToken(sql, {
    id,
    name: req.name,
    role,
    agentPattern: role === 'agent' ? req.agentPattern : null,
    hash: hashTokenSecret(secret),
    expiresAt: req.ttlSeconds > 0 ? new Date(Date.now() + req.ttlSeconds * 1000) : null,
  });
  return { token, secret };
}
