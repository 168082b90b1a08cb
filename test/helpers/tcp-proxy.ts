import net from 'node:net';

export interface TcpProxyOptions {
  /** Listen on this port (default: any free one), e.g. to come up where a client already points. */
  port?: number;
  /**
   * Cut the connection whose client sends a chunk containing this text, before it is passed on,
   * once: a fault at one exact step of a protocol (a driver's startup query, say).
   */
  cutOnceWhenClientSends?: string;
}

/**
 * A loopback TCP proxy in front of a server, so a test can cut every connection through it at
 * once (a network blip) while both ends stay up.
 */
export async function startTcpProxy(
  target: { host: string; port: number },
  opts: TcpProxyOptions = {},
): Promise<{ port: number; cut(): void; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let armed = opts.cutOnceWhenClientSends !== undefined;
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    if (armed) {
      client.on('data', (chunk: Buffer) => {
        if (armed && chunk.includes(opts.cutOnceWhenClientSends!)) {
          armed = false;
          return drop();
        }
        upstream.write(chunk);
      });
    } else {
      client.pipe(upstream);
    }
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    cut() {
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
