import os from 'node:os';

/**
 * The URL agents are told to reach this replica at, when `--advertise-url` does not say: the
 * address it listens on, or, for a wildcard (0.0.0.0, ::), the machine's first non-internal IPv4
 * address (a pod's IP in Kubernetes), since a wildcard is not an address anyone can dial.
 */
export function advertisedUrl(o: { configured: string | null; host: string; port: number; tls: boolean }): string {
  if (o.configured) return o.configured;
  const scheme = o.tls ? 'https' : 'http';
  const wildcard = o.host === '0.0.0.0' || o.host === '::' || o.host === '';
  const host = wildcard ? (firstExternalIpv4() ?? os.hostname()) : o.host;
  return `${scheme}://${host.includes(':') ? `[${host}]` : host}:${o.port}`;
}

function firstExternalIpv4(): string | null {
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return null;
}
