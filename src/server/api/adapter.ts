/**
 * The API's HTTP handler: connect-node's adapter (`connectNodeAdapter`, whose body this follows)
 * with two additions: the bodies of the Workflow and Cluster services' methods go through
 * {@link checkedBody} first, so a protobuf body that does not decode is the caller's error; and
 * each call's context can reset its response stream (`resetStreamKey`).
 */
import type http from 'node:http';
import type http2 from 'node:http2';
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextValues,
  type ConnectRouter,
  type ConnectRouterOptions,
  type ContextValues,
} from '@connectrpc/connect';
import { uResponseNotFound } from '@connectrpc/connect/protocol';
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from '@connectrpc/connect-node';
import type { Logger } from 'pino';
import { checkedBody } from './malformed-body.js';
import { resetStreamKey, resetStreamOf } from './stream-reset.js';

/** The API's handler, for HTTP/2 and HTTP/1.1 requests alike (connect-node reads both). */
export type ApiHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

export function apiAdapter(
  options: ConnectRouterOptions & {
    routes(router: ConnectRouter): void;
    /** Services (type names) whose protobuf bodies are decoded on the way in. */
    checkedServices: ReadonlySet<string>;
    /** Per-request context values, as connect-node's `contextValues` option. */
    contextValues?(req: http.IncomingMessage | http2.Http2ServerRequest): ContextValues;
    logger: Logger;
    /** Requests that name no RPC (the dashboard's files); 404 without it. */
    fallback?: ApiHandler;
  },
): ApiHandler {
  // A message is compressed only from 16 KiB (connect's default: 1 KiB). Below it zlib's setup for
  // each message costs more CPU than the bytes save on any network, and each watcher of an event
  // would compress it again: under a flood that was a tenth of the server's time.
  const router = createConnectRouter({
    acceptCompression: [compressionGzip, compressionBrotli],
    compressMinBytes: 16 * 1024,
    ...options,
  });
  options.routes(router);
  const paths = new Map(router.handlers.map((h) => [h.requestPath, h]));
  return (req, res) => {
    const uHandler = paths.get((req.url ?? '').split('?', 2)[0] ?? '');
    if (!uHandler) {
      if (options.fallback) return options.fallback(req, res);
      res.writeHead(uResponseNotFound.status);
      res.end();
      return;
    }
    const values = options.contextValues?.(req) ?? createContextValues();
    values.set(resetStreamKey, resetStreamOf(req));
    const uReq = universalRequestFromNodeRequest(req, res, undefined, values);
    if (
      options.checkedServices.has(uHandler.service.typeName) &&
      typeof uReq.body === 'object' &&
      uReq.body !== null &&
      Symbol.asyncIterator in uReq.body
    ) {
      const contentType = String(req.headers['content-type'] ?? '');
      uReq.body = checkedBody(uReq.body as AsyncIterable<Uint8Array>, {
        contentType,
        encoding: messageEncoding(contentType, req.headers),
        input: uHandler.method.input,
        values,
        maxBytes: options.readMaxBytes ?? 0xffffffff,
      });
    }
    uHandler(uReq)
      .then((uRes) => {
        // A request refused before its body was read (too large) still has bytes on the way: read
        // and drop them, or they fill the connection's memory and HTTP/2 resets every stream on it.
        if (!req.readableEnded) req.resume();
        return universalResponseToNodeResponse(uRes, res);
      })
      .catch((reason: unknown) => {
        if (ConnectError.from(reason).code === Code.Aborted) return;
        options.logger.warn(
          { rpc: `${uHandler.service.typeName}/${uHandler.method.name}`, err: (reason as Error)?.message },
          'rpc response could not be written',
        );
      });
  };
}

/** The header that names a request message's compression in its protocol. */
function messageEncoding(contentType: string, headers: http2.IncomingHttpHeaders): string {
  const header = contentType.startsWith('application/grpc')
    ? 'grpc-encoding'
    : contentType.startsWith('application/connect+')
      ? 'connect-content-encoding'
      : 'content-encoding';
  return String(headers[header] ?? 'identity');
}
