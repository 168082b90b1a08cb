import type http from 'node:http';
import http2 from 'node:http2';
import { createContextKey } from '@connectrpc/connect';

/** Ends a call's response at the transport, whatever is still queued to be written on it. */
export type ResetStream = () => void;

/**
 * A handler's way to end its response when writing it cannot: connect-node writes a stream's
 * messages only as the client takes them, so a handler whose client stopped reading stays
 * suspended and cannot end its call with a status. Undefined outside the API's adapter.
 */
export const resetStreamKey = createContextKey<ResetStream | undefined>(undefined, {
  description: 'reset the response stream',
});

/**
 * The reset of one request's response. HTTP/2: RST_STREAM ENHANCE_YOUR_CALM, a control frame that
 * needs no flow-control window, which gRPC clients (grpc-js, connect) report as
 * RESOURCE_EXHAUSTED. HTTP/1.1 has no per-request reset: the connection is closed.
 */
export function resetStreamOf(req: http.IncomingMessage | http2.Http2ServerRequest): ResetStream {
  return () => {
    if ('stream' in req) {
      if (!req.stream.closed) req.stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    } else req.socket.destroy();
  };
}
