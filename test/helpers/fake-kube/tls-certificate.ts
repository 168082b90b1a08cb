import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

/** A fresh self-signed certificate for 127.0.0.1 and localhost, made by openssl in `dir`, as an API server's. */
export async function selfSignedCertificate(dir: string): Promise<{ key: Buffer; certPem: string }> {
  const key = join(dir, 'apiserver.key');
  const cert = join(dir, 'apiserver.crt');
  await promisify(execFile)('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '2',
    '-keyout',
    key,
    '-out',
    cert,
    '-subj',
    '/CN=kube-apiserver',
    '-addext',
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
  ]);
  return { key: await readFile(key), certPem: await readFile(cert, 'utf8') };
}
