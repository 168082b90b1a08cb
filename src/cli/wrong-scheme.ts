import { Code, ConnectError } from '@connectrpc/connect';

/**
 * Codes a call gets when the connection itself failed (reset, refused, cancelled by the peer), not a server's
 * answer.
 */
const TRANSPORT_CODES = new Set([Code.Canceled, Code.Aborted, Code.Unavailable, Code.Internal, Code.Unknown]);

/** How long the TLS probe may take: it runs only on the error path, before the CLI exits. */
const PROBE_MS = 2_000;

/**
 * A plain http:// --server pointed at a TLS port fails in transport terms ("read ECONNRESET", "stream
 * closed with error code CANCEL"), which say nothing of the cause. When a call to an http:// server
 * failed that way, one TLS handshake with the port tells: if it succeeds, the fix is https://.
 * (The reverse, https:// at a plain port, is told by OpenSSL's own code: see tls-failure.ts.)
 */
export async function wrongScheme(err: unknown, server: string): Promise<string | null> {
  if (!(err instanceof ConnectError) || !TRANSPORT_CODES.has(err.code)) return null;
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:') return null;
  const port = Number(url.port || 80);
  if (!(await speaksTls(url.hostname.replace(/^\[|\]$/g, ''), port))) return null;
  const https = `https://${url.host}${url.pathname === '/' ? '' : url.pathname}`;
  return (
    `the server at ${server} speaks TLS, and this plain http:// connection was refused (${err.rawMessage}): ` +
    `use --server ${https}`
  );
}

/** True when host:port completes a TLS handshake (its certificate is not checked: only the protocol is asked). */
async function speaksTls(host: string, port: number): Promise<boolean> {
  const { connect } = await import('node:tls');
  return new Promise((resolve) => {
    const socket = connect({
      host,
      port,
      rejectUnauthorized: false,
      ALPNProtocols: ['h2', 'http/1.1'],
      ...(/^[\d.:]+$/.test(host) ? {} : { servername: host }),
    });
    const done = (yes: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(yes);
    };
    const timer = setTimeout(() => done(false), PROBE_MS);
    socket.once('secureConnect', () => done(true));
    socket.once('error', () => done(false));
  });
}
