/**
 * A listener that could not open, told by the flag that chose its address: "listen EADDRINUSE
 * 127.0.0.1:9464" alone does not say which of the server's ports it was, nor what to do.
 */
export class ListenError extends Error {
  constructor(flag: string, host: string, port: number, cause: NodeJS.ErrnoException, fix?: string) {
    const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const why =
      cause.code === 'EADDRINUSE'
        ? `the address is in use by another process (another leoflow server?): stop it, ` +
          `or choose a free port with ${flag} HOST:PORT${fix ? ` ${fix}` : ''}`
        : cause.code === 'EACCES'
          ? `not allowed to listen there (ports below 1024 need privileges): ` +
            `choose a port from 1024 with ${flag} HOST:PORT`
          : cause.code === 'EADDRNOTAVAIL' || cause.code === 'ENOTFOUND'
            ? `${host} is not an address of this machine: ` +
              `give one of its addresses (127.0.0.1 for this machine only, 0.0.0.0 for all) with ${flag} HOST:PORT`
            : `cannot listen there: ${cause.message}`;
    super(`${flag} ${address}: ${why}`, { cause });
    this.name = 'ListenError';
  }
}

/** server.listen, its failure told as a ListenError naming `flag`. */
export function listenOn(
  server: {
    listen(port: number, host: string, cb: () => void): unknown;
    once(e: 'error', f: (err: Error) => void): unknown;
    off(e: 'error', f: (err: Error) => void): unknown;
  },
  flag: string,
  host: string,
  port: number,
  fix?: string,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(new ListenError(flag, host, port, err as NodeJS.ErrnoException, fix));
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}
