import type http from 'node:http';
import type http2 from 'node:http2';
import { createContextKey, type HandlerContext } from '@connectrpc/connect';
import type { WriteActor } from '../../core/actor.js';
import type { ApiTokenRow } from '../../db/tokens/api-tokens.js';

/**
 * The caller of an API request, in its context: the peer is set as the request comes in
 * (api-routes.ts), the token's id by the token guard once it knows it; handlers read it to log
 * and record who wrote.
 */
export const callerKey = createContextKey<WriteActor>(
  { id: 'unknown', peer: 'unknown' },
  { description: 'the API caller' },
);

/** The live token a call carried, once the token guard has checked it; null without one (auth off). */
export const callerTokenKey = createContextKey<ApiTokenRow | null>(null, {
  description: "the API caller's token",
});

/** `host:port` of the request's connection (IPv6 in brackets), or `unknown` once the socket is gone. */
export function peerOf(req: http.IncomingMessage | http2.Http2ServerRequest): string {
  const socket = ('stream' in req ? req.stream?.session?.socket : undefined) ?? req.socket;
  const host = socket?.remoteAddress;
  if (!host) return 'unknown';
  return `${host.includes(':') ? `[${host}]` : host}:${socket.remotePort ?? 0}`;
}

/** The caller of the call a handler serves. */
export function callerOf(ctx: HandlerContext): WriteActor {
  return ctx.values.get(callerKey);
}

/** The actor of a call with no token (auth off): `local` on a loopback API, `anonymous` elsewhere (--insecure). */
export function openActorId(loopback: boolean): string {
  return loopback ? 'local' : 'anonymous';
}
