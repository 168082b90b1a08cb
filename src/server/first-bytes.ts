import type http from 'node:http';
import type http2 from 'node:http2';
import type { Socket } from 'node:net';

/** What a client that speaks HTTP/2 with prior knowledge sends first (RFC 9113 §3.4). No HTTP/1.1 method starts so. */
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/**
 * Hands a plain (no TLS) connection to the HTTP/2 server when its first bytes are the HTTP/2
 * preface, and to the HTTP/1.1 server otherwise, so gRPC clients, browsers and curl share one
 * port. The bytes read to decide are put back for the server that takes the connection.
 */
export function routeByFirstBytes(socket: Socket, h2: http2.Http2Server, h1: http.Server): void {
  let seen: Buffer = Buffer.alloc(0);
  // Until a server takes it, a reset connection is this function's to close (an unheard 'error' would throw).
  const onError = () => socket.destroy();
  const onData = (chunk: Buffer) => {
    seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, PREFACE.length);
    const isH2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
    if (isH2 && n < PREFACE.length) return; // the preface so far: wait for the rest
    socket.off('data', onData);
    socket.off('error', onError);
    socket.pause();
    socket.unshift(seen);
    if (isH2) {
      // The HTTP/2 session reads what is buffered on the socket itself (on the next tick); a
      // socket set flowing here would drop it.
      h2.emit('connection', socket);
    } else {
      // As http.Server's own sockets: a request's end of input does not end the connection.
      socket.allowHalfOpen = true;
      h1.emit('connection', socket);
      socket.resume();
    }
  };
  socket.on('error', onError);
  socket.on('data', onData);
}
