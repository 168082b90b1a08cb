import type { Logger } from 'pino';
import type { TlsConfig } from '../config/read-tls-config.js';
import { readCertificateAndKey, readCertificateFile } from '../../core/pem-files.js';

/**
 * Certificate rotation without a restart: the TLS files are read again on demand (SIGHUP) and
 * every `pollMs` (cert-manager and Vault agents rewrite them in place), and a changed pair that
 * passes the start-up checks is handed to the server for new connections. A bad or half-written
 * file is logged and the certificate in use kept.
 */
export interface TlsReloader {
  /** Reads the files now; true when a new certificate was put in use. */
  reload(why: string): boolean;
  stop(): void;
}

export function startTlsReloader(
  tls: TlsConfig,
  apply: (t: { cert: Buffer; key: Buffer; clientCa: Buffer | null }) => void,
  logger: Logger,
  pollMs = 60_000,
): TlsReloader {
  let current = { cert: tls.cert, key: tls.key, clientCa: tls.clientCa };
  const reload = (why: string): boolean => {
    let next: typeof current;
    let subject: string;
    let validTo: string;
    try {
      const pair = readCertificateAndKey(tls.files.cert, tls.files.key);
      next = {
        cert: pair.cert,
        key: pair.key,
        clientCa: tls.files.clientCa === null ? null : readCertificateFile(tls.files.clientCa).pem,
      };
      subject = pair.leaf.subject.replace(/\n/g, ', ');
      validTo = new Date(pair.leaf.validTo).toISOString();
    } catch (err) {
      logger.error({ why }, `TLS files not reloaded, the certificate in use is kept: ${(err as Error).message}`);
      return false;
    }
    const same =
      next.cert.equals(current.cert) &&
      next.key.equals(current.key) &&
      (next.clientCa === null
        ? current.clientCa === null
        : current.clientCa !== null && next.clientCa.equals(current.clientCa));
    if (same) {
      if (why === 'SIGHUP') logger.info({ why }, 'TLS files unchanged');
      return false;
    }
    apply(next);
    current = next;
    logger.info({ why, subject, validTo }, 'TLS certificate reloaded: new connections use it');
    return true;
  };
  const timer = setInterval(() => reload('changed on disk'), pollMs);
  timer.unref();
  return { reload, stop: () => clearInterval(timer) };
}
