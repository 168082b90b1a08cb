import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import { listApiTokens, revokeApiToken, type ApiTokenRow } from '../../db/tokens/api-tokens.js';
import type { Logger } from 'pino';
import type { Sql } from '../../db/sql.js';
import type { TokenAuthenticator } from '../auth/token-authenticator.js';
import type { TokenStreams } from '../auth/token-streams.js';
import { actorPayload } from '../../core/actor.js';
import { callerOf, callerTokenKey } from '../auth/caller.js';
import { TokenSchema, type TokenService } from '../../gen/leoflow/v1/token_pb.js';
import { createApiToken, TokenRequestError } from './create-api-token.js';

export function tokenToProto(t: ApiTokenRow): MessageInitShape<typeof TokenSchema> {
  return {
    id: t.id,
    name: t.name,
    role: t.role,
    agentPattern: t.agent_pattern ?? '',
    createdAt: timestampFromDate(t.created_at),
    expiresAt: t.expires_at ? timestampFromDate(t.expires_at) : undefined,
    revoked: t.revoked_at !== null,
  };
}

/** TokenService: create, list and revoke API tokens (the token guard lets only admins in), and who am I. */
export function createTokenService(deps: {
  sql: Sql;
  logger: Logger;
  streams?: TokenStreams;
  authenticator?: TokenAuthenticator;
}): ServiceImpl<typeof TokenService> {
  const { sql } = deps;
  return {
    async createToken(req, ctx) {
      try {
        const { token, secret } = await createApiToken(sql, {
          name: req.name,
          role: req.role,
          agentPattern: req.agentPattern,
          ttlSeconds: Number(req.ttlSeconds),
        });
        deps.logger.info(
          { tokenId: token.id, role: token.role, ...actorPayload(callerOf(ctx)) },
          `API token ${token.id} created`,
        );
        return { token: tokenToProto(token), secret };
      } catch (err) {
        if (err instanceof TokenRequestError) throw new ConnectError(err.message, Code.InvalidArgument);
        throw err;
      }
    },
    async listTokens() {
      return { tokens: (await listApiTokens(sql)).map(tokenToProto) };
    },
    async revokeToken(req, ctx) {
      if (req.id === '' || req.id.length > 64 || req.id.includes('\u0000'))
        throw new ConnectError(
          `id: must be a token id of 1 to 64 characters, got ${req.id.length}`,
          Code.InvalidArgument,
        );
      const r = await revokeApiToken(sql, req.id);
      if (r === null) throw new ConnectError(`token ${JSON.stringify(req.id)} not found`, Code.NotFound);
      // Its open streams end now, and its next call is refused: here at once, on the other
      // replicas at the notification the revocation sent (api-tokens.ts).
      deps.authenticator?.forget(req.id);
      const cut = deps.streams?.revokedHere(req.id) ?? 0;
      deps.logger.info(
        { tokenId: req.id, streamsCut: cut, ...actorPayload(callerOf(ctx)) },
        `API token ${req.id} revoked`,
      );
      return { revoked: r, streamsCut: cut };
    },
    async whoAmI(_req, ctx) {
      const token = ctx.values.get(callerTokenKey);
      // No token got past the guard: the server runs without tokens, and lets every call through.
      if (!token) return { id: callerOf(ctx).id, name: '', role: 'admin', tokenRequired: false };
      return {
        id: token.id,
        name: token.name,
        role: token.role,
        tokenRequired: true,
        expiresAt: token.expires_at ? timestampFromDate(token.expires_at) : undefined,
      };
    },
  };
}
