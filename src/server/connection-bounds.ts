import type http from 'node:http';
import type http2 from 'node:http2';
import type { Server, Socket } from 'node:net';

/** What one host may hold on the API port, and how long a connection may sit with no call. */
export interface ConnectionBounds {
  /** Connections one host (remote address) may hold open; more are closed as they are accepted. */
  maxPerHost: number;
  /** A connection with no call in flight this long is closed (HTTP/2: GOAWAY, so a client reconnects). */
  idleMs: number;
  /** Told of each connection closed for a bound. */
  closed(reason: 'host_connections' | 'idle'): void;
}

/** One open connection: its calls in flight, its idle timer, and how to close it. */
interface Connection {
  calls: number;
  timer: NodeJS.Timeout | null;
  close(): void;
}

/** A connection's key, the same whichever layer (TCP socket, TLS socket, HTTP/2 session) names it. */
const keyOf = (s: { remoteAddress?: string | undefined; remotePort?: number | undefined }) =>
  `${s.remoteAddress}|${s.remotePort}`;

/**
 * Bounds the connections of the API port, so a client that opens thousands and sends nothing costs
 * itself alone: past `maxPerHost` from one address a connection is closed at once, and one that
 * carries no call for `idleMs` (a connection never used, or left open after its calls) is closed.
 * A long call (an agent's stream, a quiet watch) keeps its connection however quiet it is.
 */
export function boundConnections(
  servers: {
    /** Accepts the port's connections: counted here, before a byte is read. */
    acceptor: Server;
    h2: http2.Http2Server | http2.Http2SecureServer;
    h1: http.Server | http2.Http2SecureServer;
  },
  b: ConnectionBounds,
): void {
  const perHost = new Map<string, number>();
  const open = new Map<string, Connection>();
  const idle = (c: Connection) => {
    c.timer = setTimeout(() => {
      b.closed('idle');
      c.close();
    }, b.idleMs);
    c.timer.unref();
  };
  const busy = (c: Connection) => {
    c.calls++;
    if (c.timer) clearTimeout(c.timer);
    c.timer = null;
  };
  const done = (c: Connection) => {
    if (--c.calls === 0) idle(c);
  };

  servers.acceptor.on('connection', (socket: Socket) => {
    const host = socket.remoteAddress ?? 'unknown';
    const n = (perHost.get(host) ?? 0) + 1;
    if (n > b.maxPerHost) {
      b.closed('host_connections');
      socket.destroy();
      return;
    }
    perHost.set(host, n);
    const key = keyOf(socket);
    const c: Connection = { calls: 0, timer: null, close: () => socket.destroy() };
    open.set(key, c);
    idle(c);
    socket.once('close', () => {
      if (c.timer) clearTimeout(c.timer);
      open.delete(key);
      const left = (perHost.get(host) ?? 1) - 1;
      if (left > 0) perHost.set(host, left);
      else perHost.delete(host);
    });
  });
  // HTTP/2: a call is a stream; an idle session is sent GOAWAY, and cut if the client keeps it.
  servers.h2.on('session', (session: http2.ServerHttp2Session) => {
    const c = open.get(keyOf(session.socket));
    if (!c) return;
    c.close = () => {
      session.close();
      setTimeout(() => session.destroy(), 5_000).unref();
    };
    session.on('stream', (stream: http2.ServerHttp2Stream) => {
      busy(c);
      stream.once('close', () => done(c));
    });
  });
  // HTTP/1.1: a call is a request, until its response is done.
  servers.h1.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (req.httpVersionMajor !== 1) return;
    const c = open.get(keyOf(req.socket));
    if (!c) return;
    busy(c);
    res.once('close', () => done(c));
  });
}
