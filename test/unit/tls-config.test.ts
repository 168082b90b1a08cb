import { configProblems } from '../helpers/config-problems.js';
import { chmodSync, copyFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentConfigError, parseAgentFlags } from '../../src/agent/agent-config.js';
import { clientTls } from '../../src/cli/client-tls.js';
import { loadConfig } from '../../src/server/config/load-config.js';
import { readCertificateFile } from '../../src/core/pem-files.js';
import { checkAgentCertificate } from '../../src/server/auth/tls-identity.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';

let pki: TestPki;
let other: TestPki;
beforeAll(() => {
  pki = makeTestPki();
  other = makeTestPki('other-ca');
});
afterAll(() => {
  pki?.remove();
  other?.remove();
});

describe("the server's TLS settings", () => {
  it('reads a certificate, its key and a client CA, from flags or the environment', () => {
    expect(loadConfig({}, {}, '/srv').tls).toBeNull();
    const c = loadConfig({ tls_cert: pki.server.cert, tls_key: pki.server.key }, {}, '/srv').tls!;
    expect(c.cert.toString()).toContain('BEGIN CERTIFICATE');
    expect(c.key.toString()).toContain('PRIVATE KEY');
    expect(c.clientCa).toBeNull();
    const m = loadConfig(
      {},
      {
        LEOFLOW_TLS_CERT: pki.server.cert,
        LEOFLOW_TLS_KEY: pki.server.key,
        LEOFLOW_TLS_CLIENT_CA: pki.ca,
        LEOFLOW_TLS_CLIENT_AUTH: 'all',
      },
      '/srv',
    ).tls!;
    expect(m.clientCa!.toString()).toContain('BEGIN CERTIFICATE');
    expect(m.clientAuth).toBe('all');
    expect(
      loadConfig({ tls_cert: pki.server.cert, tls_key: pki.server.key, tls_client_ca: pki.ca }, {}, '/srv').tls!
        .clientAuth,
    ).toBe('agents');
  });

  it('names a missing half of the pair', () => {
    expect(configProblems({ tls_cert: pki.server.cert })).toEqual([
      '--tls-cert: TLS needs both a certificate and its key: set --tls-key (LEOFLOW_TLS_KEY) too',
    ]);
    expect(configProblems({}, { LEOFLOW_TLS_KEY: pki.server.key })).toEqual([
      'LEOFLOW_TLS_KEY (environment): TLS needs both a certificate and its key: set --tls-cert (LEOFLOW_TLS_CERT) too',
    ]);
  });

  it('names a missing, unreadable or non-PEM file', () => {
    expect(configProblems({ tls_cert: '/nonexistent/cert.pem', tls_key: pki.server.key })).toEqual([
      '--tls-cert/--tls-key: cannot read /nonexistent/cert.pem: no such file',
    ]);
    expect(configProblems({ tls_cert: pki.server.key, tls_key: pki.server.key })).toEqual([
      `--tls-cert/--tls-key: ${pki.server.key} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
    ]);
    expect(configProblems({ tls_cert: pki.server.cert, tls_key: pki.server.cert })[0]).toMatch(
      new RegExp(`^--tls-cert/--tls-key: ${pki.server.cert} holds no PEM private key`),
    );
    expect(configProblems({ tls_cert: pki.server.cert, tls_key: pki.dir })).toEqual([
      `--tls-cert/--tls-key: cannot read ${pki.dir}: is a directory`,
    ]);
    if (process.getuid?.() !== 0) {
      const locked = path.join(pki.dir, 'locked.key');
      copyFileSync(pki.server.key, locked);
      chmodSync(locked, 0);
      expect(configProblems({ tls_cert: pki.server.cert, tls_key: locked })).toEqual([
        `--tls-cert/--tls-key: cannot read ${locked}: permission denied`,
      ]);
    }
  });

  it("refuses a key that is not the certificate's", () => {
    expect(configProblems({ tls_cert: pki.server.cert, tls_key: other.server.key })).toEqual([
      `--tls-cert/--tls-key: ${other.server.key} is not the private key of the certificate in ${pki.server.cert} (they do not match)`,
    ]);
  });

  it('refuses client-certificate settings without TLS, and a bad client CA', () => {
    expect(configProblems({ tls_client_ca: pki.ca })).toEqual([
      '--tls-client-ca: client certificates need TLS on the API port: set --tls-cert and --tls-key too',
    ]);
    expect(configProblems({ tls_cert: pki.server.cert, tls_key: pki.server.key, tls_client_auth: 'all' })).toEqual([
      '--tls-client-auth: only with --tls-client-ca (the CA client certificates are checked against)',
    ]);
    expect(
      configProblems({
        tls_cert: pki.server.cert,
        tls_key: pki.server.key,
        tls_client_ca: pki.ca,
        tls_client_auth: 'some',
      }),
    ).toEqual(['--tls-client-auth: must be one of agents, all, got "some"']);
    expect(
      configProblems({ tls_cert: pki.server.cert, tls_key: pki.server.key, tls_client_ca: '/nonexistent/ca.pem' }),
    ).toEqual(['--tls-client-ca: cannot read /nonexistent/ca.pem: no such file']);
  });

  it("refuses --tls-client-auth all with the kubernetes executor: a pod's agent has no client certificate", () => {
    const tls = { tls_cert: pki.server.cert, tls_key: pki.server.key, tls_client_ca: pki.ca };
    const pro = { edition: 'pro', kubernetes_image: 'x', pod_server_url: 'https://leoflow:7070', insecure: 'true' };
    const env = { DATABASE_URL: 'postgres://127.0.0.1/x' };
    expect(configProblems({ ...pro, ...tls, tls_client_auth: 'all' }, env)).toEqual([
      "--tls-client-auth: all cannot be used with the kubernetes executor: the TLS handshake would refuse every pod's agent, which has no client certificate; use agents (the default: agent streams need a certificate, or for a pod's agent its attempt's token)",
    ]);
    expect(loadConfig({ ...pro, ...tls }, env, '/srv').tls!.clientAuth).toBe('agents');
  });

  it('refuses an expired certificate, or one not yet valid, saying when', () => {
    expect(() => readCertificateFile(pki.server.cert, new Date(Date.now() + 10 * 86_400_000))).toThrow(
      /server\.crt: the certificate \(CN=localhost\) expired on \d{4}-/,
    );
    expect(() => readCertificateFile(pki.server.cert, new Date(Date.now() - 86_400_000))).toThrow(
      /server\.crt: the certificate \(CN=localhost\) is not valid before \d{4}-/,
    );
  });

  it('reads --pod-ca as a Secret or ConfigMap key', () => {
    const env = { DATABASE_URL: 'postgres://127.0.0.1/x' };
    const k = (v: string) =>
      loadConfig({ edition: 'pro', kubernetes_image: 'x', pod_ca: v }, env, '/srv').kubernetes!.podCa;
    expect(k('secret:leoflow-tls')).toEqual({ kind: 'secret', name: 'leoflow-tls', key: 'ca.crt' });
    expect(k('configmap:root-ca/bundle.pem')).toEqual({ kind: 'configmap', name: 'root-ca', key: 'bundle.pem' });
    expect(configProblems({ edition: 'pro', kubernetes_image: 'x', pod_ca: 'leoflow-tls' }, env)).toEqual([
      '--pod-ca: must be secret:NAME[/KEY] or configmap:NAME[/KEY] (the CA pods\' agents verify the control plane with; KEY defaults to ca.crt), got "leoflow-tls": is not of that form',
    ]);
  });
});

describe('the identity rule at Hello', () => {
  const cert = (o: Partial<{ verified: boolean; error: string | null; commonName: string | null }>) => ({
    verified: true,
    error: null,
    commonName: 'agent-a',
    ...o,
  });
  const refusal = (f: () => void) => {
    try {
      f();
    } catch (err) {
      return { code: (err as { code: number }).code, message: (err as Error).message };
    }
    return null;
  };

  it('checks nothing when the server asks for no certificate, and lets an agent say Hello as its CN', () => {
    expect(refusal(() => checkAgentCertificate(undefined, 'anyone'))).toBeNull();
    expect(refusal(() => checkAgentCertificate(cert({}), 'agent-a'))).toBeNull();
  });

  it("refuses another agent's id with PERMISSION_DENIED naming both, and a missing or unverified certificate with UNAUTHENTICATED", () => {
    expect(refusal(() => checkAgentCertificate(cert({}), 'agent-b'))).toEqual({
      code: 7,
      message:
        '[permission_denied] hello.agent_id: the TLS client certificate is agent "agent-a"\'s, but Hello says agent "agent-b"',
    });
    expect(refusal(() => checkAgentCertificate(null, 'agent-b'))?.code).toBe(16);
    expect(
      refusal(() =>
        checkAgentCertificate(cert({ verified: false, error: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' }), 'agent-a'),
      ),
    ).toEqual({
      code: 16,
      message:
        '[unauthenticated] agent "agent-a": its TLS client certificate (CN=agent-a) is not signed by this control plane\'s --tls-client-ca (UNABLE_TO_VERIFY_LEAF_SIGNATURE)',
    });
  });
});

describe("clients' TLS flags", () => {
  const env = { hostname: 'h', pid: 1, isTTY: false };
  const agentProblems = (
    flags: Parameters<typeof parseAgentFlags>[0],
    e: Parameters<typeof parseAgentFlags>[1] = env,
  ) => {
    try {
      parseAgentFlags(flags, e);
    } catch (err) {
      if (err instanceof AgentConfigError) return err.problems;
      throw err;
    }
    return [];
  };

  it('the agent: a certificate needs its key, and TLS files need https:// servers', () => {
    expect(agentProblems({ server: 'https://cp:7070', tlsCert: 'a.crt' })).toEqual([
      '--tls-key: a client certificate needs both --tls-cert and --tls-key (LEOFLOW_AGENT_TLS_CERT, LEOFLOW_AGENT_TLS_KEY)',
    ]);
    expect(agentProblems({ server: 'https://cp-a:7070,http://cp-b:7070', caFile: 'ca.crt' })).toEqual([
      '--server: --ca-file is for https:// addresses, but http://cp-b:7070 is plain http://',
    ]);
    const c = parseAgentFlags(
      { server: 'https://cp:7070' },
      { ...env, caFile: 'ca.crt', tlsCert: 'a.crt', tlsKey: 'a.key' },
    );
    expect(c).toMatchObject({ caFile: 'ca.crt', tlsCertFile: 'a.crt', tlsKeyFile: 'a.key' });
  });

  it("the CLI: each file's problem names its flag", () => {
    expect(clientTls({})).toBeNull();
    expect(() => clientTls({ caFile: '/nonexistent/ca.pem' })).toThrow(
      '--ca-file: cannot read /nonexistent/ca.pem: no such file',
    );
    expect(() => clientTls({ caFile: pki.ca, clientCert: pki.client('cli').cert })).toThrow(
      '--client-key: a client certificate needs its key, and a key its certificate',
    );
    expect(() => clientTls({ clientCert: pki.client('cli').cert, clientKey: other.client('cli').key })).toThrow(
      /^--client-cert\/--client-key: .* is not the private key of the certificate in /,
    );
    const notPem = path.join(pki.dir, 'not.pem');
    writeFileSync(notPem, 'hello');
    expect(() => clientTls({ caFile: notPem })).toThrow(
      `--ca-file: ${notPem} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
    );
    expect(clientTls({ caFile: pki.ca })!.ca!.toString()).toContain('BEGIN CERTIFICATE');
  });
});

describe("a pod's CA", () => {
  const attempt = {
    tiId: '7',
    runId: '3',
    dagId: 'd',
    taskId: 't',
    tryNumber: 1,
    maxTries: 1,
    attemptToken: '2b1e4b0e-6d5f-4c39-9a55-0c1b8f0e7a11',
    dispatchKey: 'k',
    command: ['true'],
    env: {},
    cwd: null,
    timeoutMs: null,
  };
  const settings = {
    install: 'install-a',
    namespace: 'jobs',
    image: 'leoflow:1',
    serverUrl: 'https://leoflow:7070',
    agentCommand: ['leoflow'],
    killGraceMs: 10_000,
  };

  it('mounts the one key of the Secret or ConfigMap read-only and points the agent at it', async () => {
    const { podManifest } = await import('../../src/executors/kubernetes/pod-manifest.js');
    const plain = podManifest(attempt, settings);
    expect(plain.spec!.volumes).toBeUndefined();
    expect(plain.spec!.containers[0]!.env!.map((e) => e.name)).not.toContain('LEOFLOW_CA_FILE');
    const fromSecret = podManifest(attempt, {
      ...settings,
      podCa: { kind: 'secret', name: 'leoflow-tls', key: 'ca.crt' },
    });
    expect(fromSecret.spec!.volumes).toEqual([
      { name: 'leoflow-ca', secret: { secretName: 'leoflow-tls', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
    ]);
    const c = fromSecret.spec!.containers[0]!;
    expect(c.volumeMounts).toEqual([{ name: 'leoflow-ca', mountPath: '/etc/leoflow/ca', readOnly: true }]);
    expect(c.env).toContainEqual({ name: 'LEOFLOW_CA_FILE', value: '/etc/leoflow/ca/ca.crt' });
    const fromMap = podManifest(attempt, {
      ...settings,
      podCa: { kind: 'configmap', name: 'root-ca', key: 'bundle.pem' },
    });
    expect(fromMap.spec!.volumes).toEqual([
      { name: 'leoflow-ca', configMap: { name: 'root-ca', items: [{ key: 'bundle.pem', path: 'ca.crt' }] } },
    ]);
  });
});

describe("the operations guide's certificates", () => {
  it('the openssl commands of "TLS and mTLS" (docs/operations.md) make a CA, a server certificate and an agent certificate that Leoflow accepts', async () => {
    const { execFileSync } = await import('node:child_process');
    const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
    const os = await import('node:os');
    const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('## TLS and mTLS'));
    const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!;
    expect(block).toContain('openssl req -x509');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'leoflow-readme-pki-'));
    try {
      execFileSync('bash', ['-euo', 'pipefail', '-c', block], { cwd: dir, stdio: 'pipe' });
      const c = loadConfig({ tls_cert: 'server.crt', tls_key: 'server.key', tls_client_ca: 'ca.crt' }, {}, dir).tls!;
      expect(c.clientCa).not.toBeNull();
      const agent = readCertificateFile(path.join(dir, 'gpu-1.crt')).certs[0]!;
      expect(agent.subject).toBe('CN=gpu-1');
      expect(agent.checkIssued(readCertificateFile(path.join(dir, 'ca.crt')).certs[0]!)).toBe(true);
      expect(readCertificateFile(path.join(dir, 'server.crt')).certs[0]!.subjectAltName).toBe(
        'DNS:leoflow, DNS:localhost, IP Address:127.0.0.1',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
