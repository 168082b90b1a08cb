import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';

/**
 * Certificates and keys read from PEM files, at start-up, with errors that say which file and
 * what is wrong with it: Node's own TLS errors ("error:0480006C:PEM routines::no start line")
 * come later, on the first connection, and name no file.
 */

function readFile(file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'is a directory'
            : (err as Error).message;
    throw new Error(`cannot read ${file}: ${why}`);
  }
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** A PEM file of one or more certificates (a chain, or a bundle of CAs), the first one checked in date. */
export function readCertificateFile(file: string, now = new Date()): { pem: Buffer; certs: X509Certificate[] } {
  const pem = readFile(file);
  const blocks = pem.toString('latin1').match(PEM_CERT) ?? [];
  if (blocks.length === 0) throw new Error(`${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  const certs = blocks.map((b, i) => {
    try {
      return new X509Certificate(b);
    } catch (err) {
      throw new Error(`${file}: certificate ${i + 1} cannot be parsed: ${(err as Error).message}`);
    }
  });
  const first = certs[0]!;
  if (new Date(first.validTo).getTime() < now.getTime())
    throw new Error(
      `${file}: the certificate (${first.subject.replace(/\n/g, ', ')}) ` +
        `expired on ${new Date(first.validTo).toISOString()}`,
    );
  if (new Date(first.validFrom).getTime() > now.getTime())
    throw new Error(
      `${file}: the certificate (${first.subject.replace(/\n/g, ', ')}) ` +
        `is not valid before ${new Date(first.validFrom).toISOString()}`,
    );
  return { pem, certs };
}

/** A PEM private key (unencrypted: a server cannot ask for a passphrase). */
export function readPrivateKeyFile(file: string): { pem: Buffer; key: KeyObject } {
  const pem = readFile(file);
  try {
    return { pem, key: createPrivateKey(pem) };
  } catch (err) {
    const msg = (err as Error).message;
    if (/passphrase|bad decrypt/i.test(msg))
      throw new Error(
        `${file}: the private key is encrypted; give an unencrypted key (e.g. openssl pkey -in ${file} -out key.pem)`,
      );
    throw new Error(`${file} holds no PEM private key (${msg})`);
  }
}

/** A certificate file and its key, which must be a pair. */
export function readCertificateAndKey(
  certFile: string,
  keyFile: string,
): { cert: Buffer; key: Buffer; leaf: X509Certificate } {
  const { pem: cert, certs } = readCertificateFile(certFile);
  const { pem: key, key: keyObject } = readPrivateKeyFile(keyFile);
  if (!certs[0]!.checkPrivateKey(keyObject))
    throw new Error(`${keyFile} is not the private key of the certificate in ${certFile} (they do not match)`);
  return { cert, key, leaf: certs[0]! };
}
