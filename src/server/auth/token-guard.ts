import { Code, ConnectError, type Interceptor } from '@connectrpc/connect';
import type { DescMethod } from '@bufbuild/protobuf';
import { roleAllows } from '../../core/api-role.js';
import type { TokenAuthenticator } from './token-authenticator.js';
import { bearerToken } from './token-secret.js';
import { HELLO_AUTHENTICATED, RPC_ROLES } from './rpc-roles.js';
import { callerKey, callerTokenKey } from './caller.js';
import { cuttable, type StreamKind, type TokenStreams } from './token-streams.js';

const key = (m: DescMethod) => `${m.parent.typeName}/${m.name}`;

/**
 * Who may call what, checked before any handler runs: the bearer token in `authorization` must be
 * a live token whose role covers the RPC's (rpc-roles.ts). No, unknown, revoked or expired token:
 * UNAUTHENTICATED; a role too weak: PERMISSION_DENIED naming the RPC and the role it needs. Each
 * denial is counted by code and RPC. A streaming call ends with UNAUTHENTICATED when its token is
 * revoked or expires.
 */
export function tokenGuard(
  auth: TokenAuthenticator,
  denied: (code: 'unauthenticated' | 'permission_denied', rpc: string) => void,
  streams?: TokenStreams,
  streamsLimited?: (rpc: string) => void,
): Interceptor {
  const needs = new Map([...RPC_ROLES].map(([m, role]) => [key(m), role]));
  const open = new Set(HELLO_AUTHENTICATED.map(key));
  return (next) => async (req) => {
    const k = `${req.service.typeName}/${req.method.name}`;
    if (open.has(k)) return next(req);
    const rpc = req.method.name;
    const deny = (code: 'unauthenticated' | 'permission_denied', message: string): never => {
      denied(code, rpc);
      throw new ConnectError(message, code === 'unauthenticated' ? Code.Unauthenticated : Code.PermissionDenied);
    };
    const secret = bearerToken(req.header.get('authorization'));
    if (secret === null)
      deny(
        'unauthenticated',
        `${rpc} needs an API token: send "authorization: Bearer <token>" (the CLI reads LEOFLOW_TOKEN or --token)`,
      );
    const who = await auth.authenticate(secret!);
    if (!who.ok) return deny('unauthenticated', `${rpc}: ${who.reason}`);
    const role = needs.get(k);
    if (role === undefined) return deny('permission_denied', `${rpc} has no access rule, so no token may call it`);
    if (!roleAllows(who.token.role, role)) {
      return deny(
        'permission_denied',
        `${rpc} needs role ${role} or above; token "${who.token.id}" has role ${who.token.role}`,
      );
    }
    // The handler records who wrote by this id (caller.ts).
    req.contextValues.set(callerKey, { ...req.contextValues.get(callerKey), id: who.token.id });
    req.contextValues.set(callerTokenKey, who.token);
    const streaming = req.method.methodKind === 'server_streaming' || req.method.methodKind === 'bidi_streaming';
    // The API's streams: log follows, and watches (WatchRun, WatchRuns, WatchCleanHistory).
    const kind: StreamKind = req.method.name === 'TailLogs' ? 'follow' : 'watch';
    if (streaming) {
      try {
        streams?.admit(who.token.id, kind);
      } catch (err) {
        streamsLimited?.(rpc);
        throw err;
      }
    }
    const res = await next(req);
    // A stream (a watch, a log follow) lives only as long as its token: cut when it is revoked
    // or expires (token-streams.ts).
    if (!res.stream || !streams) return res;
    return { ...res, message: cuttable(res.message, (cut) => streams.open(who.token, kind, cut)) };
  };
}
