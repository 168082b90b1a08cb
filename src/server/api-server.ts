import http from 'node:http';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import type { ApiHandler } from './api/adapter.js';
import { boundConnections, type ConnectionBounds } from './connection-bounds.js';
import { routeByFirstBytes } from './first-bytes.js';
import { listenOn } from './listen-error.js';

/** The API port's TLS (see config.ts): with it, HTTP/2 over TLS (ALPN h2) and HTTP/1.1 over TLS. */
export interface ApiTls {
  cert: Buffer;
  key: Buffer;
  /** Asked of clients when set; `rejectUnauthorized` refuses, in the handshake, a client without a valid one. */
  clientCa: Buffer | null;
  rejectUnauthorized: boolean;
}

/** The API's port: gRPC, gRPC-Web and Connect over HTTP/2 and HTTP/1.1, with or without TLS. */
export interface ApiServer {
  readonly address: { host: string; port: number };
  /** New connections get this certificate, key and client CA (a rotation); open ones keep theirs. */
  setTls(tls: Pick<ApiTls, 'cert' | 'key' | 'clientCa'>): void;
  /** True while the port accepts connections. */
  listening(): boolean;
  /** Stops accepting, closes the sessions (destroying those still open after 2 s). */
  close(): Promise<void>;
}

export async function serveApi(
  handler: ApiHandler,
  host: string,
  port: number,
  tls: ApiTls | null = null,
  bounds: ConnectionBounds | null = null,
): Promise<ApiServer> {
  const servers = tls ? securePort(handler, tls) : plainPort(handler);
  const { acceptor: server, h2, secure } = servers;
  if (bounds) boundConnections(servers, bounds);
  await listenOn(server, '--listen', host, port);
  // Agent streams never end on their own: at shutdown the sessions are told to go (GOAWAY), and
  // every connection still open 2 s later (a session that stayed, an HTTP/1.1 follow) is cut.
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  const sockets = new Set<net.Socket>();
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  const addr = server.address() as AddressInfo;
  return {
    address: { host: addr.address, port: addr.port },
    setTls: (t) => {
      if (!secure) throw new Error('the API port was started without TLS');
      secure.setSecureContext({
        cert: t.cert,
        key: t.key,
        minVersion: 'TLSv1.2',
        ...(t.clientCa ? { ca: t.clientCa } : {}),
      });
    },
    listening: () => server.listening,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sessions) s.close();
        setTimeout(() => {
          for (const s of sockets) s.destroy();
        }, 2000).unref();
      }),
  };
}

/** A port's servers: the one that accepts connections, and those that speak HTTP/2 and HTTP/1.1 on them. */
interface PortServers {
  acceptor: net.Server;
  h2: http2.Http2Server | http2.Http2SecureServer;
  h1: http.Server | http2.Http2SecureServer;
  secure: http2.Http2SecureServer | null;
}

/**
 * Calls one HTTP/2 connection may have open at once (a SETTINGS value; past it a stream is refused
 * with REFUSED_STREAM before a handler runs). Node's default is 2^32−1: one connection could hold
 * a million calls' memory. 256 is past a token's watches and follows together (64 + 64).
 */
export const MAX_STREAMS_PER_CONNECTION = 256;

/** With TLS, one server: ALPN picks HTTP/2 or HTTP/1.1 in the handshake. */
function securePort(handler: ApiHandler, tls: ApiTls): PortServers {
  const secure = http2.createSecureServer(
    {
      allowHTTP1: true,
      settings: { maxConcurrentStreams: MAX_STREAMS_PER_CONNECTION },
      cert: tls.cert,
      key: tls.key,
      minVersion: 'TLSv1.2',
      ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: tls.rejectUnauthorized } : {}),
    },
    handler,
  );
  return { acceptor: secure, h2: secure, h1: secure, secure };
}

/**
 * Without TLS, the first bytes pick (first-bytes.ts): HTTP/2 for gRPC clients, which speak it with
 * prior knowledge (h2c), and HTTP/1.1 for browsers and curl.
 */
function plainPort(handler: ApiHandler): PortServers {
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: MAX_STREAMS_PER_CONNECTION } }, handler);
  const h1 = http.createServer(handler);
  // As http.Server's own: no Nagle delay on small writes (HTTP/2 sessions set it themselves).
  const acceptor = net.createServer({ noDelay: true }, (socket) => routeByFirstBytes(socket, h2, h1));
  return { acceptor, h2, h1, secure: null };
}
