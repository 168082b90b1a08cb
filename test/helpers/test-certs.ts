import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * A throwaway PKI made with openssl at test time: a CA, a server certificate for 127.0.0.1 and
 * localhost, and client certificates whose CN is an agent id. P-256 keys, so making them is quick.
 */
export interface TestPki {
  dir: string;
  /** The CA's certificate file. */
  ca: string;
  server: { cert: string; key: string };
  /** A client certificate (CN = `cn`) signed by this CA, made on first ask. */
  client(cn: string): { cert: string; key: string };
  remove(): void;
}

const openssl = (args: string[], cwd: string) =>
  execFileSync('/usr/bin/openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });

export function makeTestPki(name = 'test-ca'): TestPki {
  const dir = mkdtempSync(path.join(os.tmpdir(), `leoflow-pki-${name}-`));
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...key,
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-subj',
      `/CN=${name}`,
      '-days',
      '2',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  const sign = (base: string, cn: string, ext: string) => {
    writeFileSync(path.join(dir, `${base}.ext`), ext);
    openssl(['req', ...key, '-keyout', `${base}.key`, '-out', `${base}.csr`, '-subj', `/CN=${cn}`], dir);
    openssl(
      [
        'x509',
        '-req',
        '-in',
        `${base}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${base}.crt`,
        '-days',
        '2',
        '-extfile',
        `${base}.ext`,
      ],
      dir,
    );
    return { cert: path.join(dir, `${base}.crt`), key: path.join(dir, `${base}.key`) };
  };
  const server = sign(
    'server',
    'localhost',
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n',
  );
  const clients = new Map<string, { cert: string; key: string }>();
  return {
    dir,
    ca: path.join(dir, 'ca.crt'),
    server,
    client(cn) {
      let c = clients.get(cn);
      if (!c) {
        c = sign(`client-${clients.size}`, cn, 'extendedKeyUsage=clientAuth\n');
        clients.set(cn, c);
      }
      return c;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
