import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';

/** The API's HTTP/2 server: gRPC, gRPC-Web and Connect on one port. */
export interface ApiServer {
  readonly address: { host: string; port: number };
  /** True while the port accepts connections. */
  listening(): boolean;
  /** Stops accepting, closes the sessions (destroying those still open after 2 s). */
  close(): Promise<void>;
}

export async function serveApi(handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void, host: string, port: number): Promise<ApiServer> {
  const server = http2.createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // Agent streams never end on their own: the sessions are closed by hand at shutdown.
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  const addr = server.address() as AddressInfo;
  return {
    address: { host: addr.address, port: addr.port },
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
