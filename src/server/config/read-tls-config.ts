// The API port's TLS: its settings checked together (a certificate needs its key, a client CA needs
// TLS) and its files read at start-up, so a bad file stops the start rather than the first handshake.
import path from 'node:path';
import { readCertificateAndKey, readCertificateFile } from '../../core/pem-files.js';
import { nonEmpty, oneOf } from './setting-parsers.js';
import type { SettingReader } from './settings.js';

/** Who must present a client certificate signed by the client CA: agent streams only, or every call. */
export const TLS_CLIENT_AUTH = ['agents', 'all'] as const;

/** The API port's TLS: the files' contents, read and checked at start-up. */
export interface TlsConfig {
  /** The files, read again on SIGHUP and when they change (certificate rotation). */
  files: { cert: string; key: string; clientCa: string | null };
  cert: Buffer;
  key: Buffer;
  /** CA of agents' client certificates (mTLS); null: agents are not asked for one. */
  clientCa: Buffer | null;
  /** With clientCa: `agents` (an agent stream needs a certificate, other calls do not) or `all`
   *  (the handshake refuses any client without one). */
  clientAuth: (typeof TLS_CLIENT_AUTH)[number];
}

/** The TLS settings read and checked; null (with any problem recorded) when TLS is off or unusable. */
export function readTlsConfig({ pick, get, problems, cwd }: SettingReader): TlsConfig | null {
  const file = (v: unknown) => path.resolve(cwd, nonEmpty(v));
  const certRaw = pick('tls_cert');
  const keyRaw = pick('tls_key');
  const caRaw = pick('tls_client_ca');
  const authRaw = pick('tls_client_auth');
  const certFile = get('tls_cert', file, null as string | null);
  const keyFile = get('tls_key', file, null as string | null);
  const caFile = get('tls_client_ca', file, null as string | null);
  const clientAuth = get('tls_client_auth', oneOf(TLS_CLIENT_AUTH), 'agents');
  if (certFile === null && keyFile === null) {
    if (caRaw)
      problems.push(`${caRaw.source}: client certificates need TLS on the API port: set --tls-cert and --tls-key too`);
    if (authRaw)
      problems.push(`${authRaw.source}: only with --tls-client-ca (the CA client certificates are checked against)`);
    return null;
  }
  if (certFile === null || keyFile === null) {
    if (certRaw || keyRaw)
      problems.push(
        `${(certRaw ?? keyRaw)!.source}: TLS needs both a certificate and its key: ` +
          `set ${certFile === null ? '--tls-cert (LEOFLOW_TLS_CERT)' : '--tls-key (LEOFLOW_TLS_KEY)'} too`,
      );
    return null;
  }
  if (authRaw && caFile === null && !caRaw)
    problems.push(`${authRaw.source}: only with --tls-client-ca (the CA client certificates are checked against)`);
  let pair: { cert: Buffer; key: Buffer } | null = null;
  try {
    pair = readCertificateAndKey(certFile, keyFile);
  } catch (err) {
    problems.push(`--tls-cert/--tls-key: ${(err as Error).message}`);
  }
  let clientCa: Buffer | null = null;
  if (caFile !== null) {
    try {
      clientCa = readCertificateFile(caFile).pem;
    } catch (err) {
      problems.push(`${caRaw!.source}: ${(err as Error).message}`);
    }
  }
  return pair
    ? {
        files: { cert: certFile, key: keyFile, clientCa: caFile },
        cert: pair.cert,
        key: pair.key,
        clientCa,
        clientAuth,
      }
    : null;
}
