import type { ClientTls } from './client.js';
import { readCertificateAndKey, readCertificateFile } from '../core/pem-files.js';

/** The global TLS flags read into PEM contents, each error naming its flag. Null when none is given. */
export function clientTls(o: { caFile?: string; clientCert?: string; clientKey?: string }): ClientTls | null {
  if (!o.caFile && !o.clientCert && !o.clientKey) return null;
  if (Boolean(o.clientCert) !== Boolean(o.clientKey))
    throw new Error(
      `${o.clientCert ? '--client-key' : '--client-cert'}: a client certificate needs its key, ` +
        `and a key its certificate`,
    );
  let ca: Buffer | null = null;
  if (o.caFile) {
    try {
      ca = readCertificateFile(o.caFile).pem;
    } catch (err) {
      throw new Error(`--ca-file: ${(err as Error).message}`);
    }
  }
  if (!o.clientCert || !o.clientKey) return { ca };
  try {
    const pair = readCertificateAndKey(o.clientCert, o.clientKey);
    return { ca, cert: pair.cert, key: pair.key };
  } catch (err) {
    throw new Error(`--client-cert/--client-key: ${(err as Error).message}`);
  }
}
