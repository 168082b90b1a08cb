import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { boundConnections, type ConnectionBounds } from './connection-bounds.js';
import { listenOn } from './listen-error.js';

/** The API port's TLS (see config.ts): with it, HTTP/2 over TLS (ALPN h2) and HTTP/1.1 over TLS. */
export interface ApiTls {
  cert: Buffer;
  key: Buffer;
  /** Asked of clients when set; `rejectUnauthorized` refuses, in the handshake, a client without a valid one. */
  clientCa: Buffer | null;
  rejectUnauthorized: boolean;
}

/** The API's HTTP/2 server: gRPC, gRPC-Web and Connect on one port. */
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
  handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
  host: string,
  port: number,
  tls: ApiTls | null = null,
  bounds: ConnectionBounds | null = null,
): Promise<ApiServer> {
  // With TLS, HTTP/1.1 is let in beside HTTP/2 (ALPN picks), so Connect and gRPC-Web from
  // browsers and curl share the port with gRPC; a plain h2c client fails the handshake. Without
  // TLS, Node's h2c server speaks HTTP/2 only, as before.
  const server = tls
    ? http2.createSecureServer(
        {
          allowHTTP1: true,
          cert: tls.cert,
          key: tls.key,
          minVersion: 'TLSv1.2',
          ...(tls.clientCa ? { ca: tls.clientCa, requestCert: true, rejectUnauthorized: tls.rejectUnauthorized } : {}),
        },
        handler,
      )
    : http2.createServer(handler);
  if (bounds) boundConnections(server, bounds);
  await listenOn(server, '--listen', host, port);
  // Agent streams never end on their own: the sessions are closed by hand at shutdown.
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  const addr = server.address() as AddressInfo;
  return {
    address: { host: addr.address, port: addr.port },
    setTls: (t) => {
      if (!tls) throw new Error('the API port was started without TLS');
      (server as http2.Http2SecureServer).setSecureContext({
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
          for (const s of sessions) s.destroy();
        }, 2000).unref();
      }),
  };
}
