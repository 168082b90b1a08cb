import { readFileSync } from 'node:fs';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import http2 from 'node:http2';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, startAgent, waitFor, type AgentProcess, type ServerProcess } from '../helpers/leoflow-process.js';
import { runEnds } from '../helpers/run-ends.js';
import { serverForFile } from '../helpers/server-fixture.js';
import { helloOverTls } from '../helpers/hello-over-tls.js';
import { makeTestPki, type TestPki } from '../helpers/test-certs.js';

/**
 * TLS on the API port and agents identified by their client certificates (issue 25): the real
 * server, CLI and agent processes, with certificates made for the test.
 */

let pki: TestPki;
let other: TestPki;
let tmp: string;
beforeAll(async () => {
  pki = makeTestPki();
  other = makeTestPki('other-ca');
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-tls-'));
});
afterAll(async () => {
  pki?.remove();
  other?.remove();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

const httpsUrl = (s: ServerProcess) => s.url.replace(/^http:/, 'https:');

/** One HTTP/1.1 request over TLS, trusting `ca`; resolves with status, headers and body. */
function http1(
  url: string,
  o: { ca: Buffer; contentType: string; body: Buffer | string; headers?: Record<string, string> },
) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer; httpVersion: string }>(
    (resolve, reject) => {
      const req = https.request(
        url,
        {
          method: 'POST',
          ca: o.ca,
          headers: { 'content-type': o.contentType, ...o.headers },
          timeout: 10_000,
          agent: false,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({
              status: res.statusCode!,
              headers: res.headers,
              body: Buffer.concat(chunks),
              httpVersion: res.httpVersion,
            }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.end(o.body);
    },
  );
}

describe('TLS on the API port', () => {
  const s = serverForFile({ args: () => ['--tls-cert', pki.server.cert, '--tls-key', pki.server.key] });

  it('announces https and answers the CLI given the CA, by flag or environment', async () => {
    expect(s.server.logs.find((l) => String(l.msg).includes('ready'))).toMatchObject({ tls: 'on' });
    expect(String(s.server.logs.find((l) => String(l.msg).includes('ready'))!.msg)).toContain(
      'ready on https://127.0.0.1:',
    );
    const byFlag = await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'agents', 'list']);
    expect(byFlag.stderr).toBe('');
    expect(byFlag.code).toBe(0);
    const byEnv = await cli(httpsUrl(s.server), ['replicas'], { env: { LEOFLOW_CA_FILE: pki.ca } });
    expect(byEnv.stderr).toBe('');
    expect(byEnv.code).toBe(0);
  });

  it('a client trusting another CA (or only the system roots) is refused: the server cannot prove who it is', async () => {
    const wrong = await cli(httpsUrl(s.server), ['--ca-file', other.ca, 'agents', 'list']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(
      /^leoflow: cannot verify the control plane's TLS certificate at https:\/\/127\.0\.0\.1:\d+ \(.+\): give the CA that signed it with --ca-file or LEOFLOW_CA_FILE\n$/,
    );
    const roots = await cli(httpsUrl(s.server), ['agents', 'list'], { env: { LEOFLOW_CA_FILE: undefined } });
    expect(roots.code).toBe(1);
    expect(roots.stderr).toMatch(/^leoflow: cannot verify the control plane's TLS certificate at https:/);
    // And https:// to this port's plain twin, the metrics port, is told to use http://.
    const plainPort = await cli(s.server.metricsUrl.replace(/^http:/, 'https:').replace(/\/metrics$/, ''), [
      '--ca-file',
      pki.ca,
      'agents',
      'list',
    ]);
    expect(plainPort.stderr).toMatch(/does not speak TLS: use --server http:\/\//);
  });

  it('refuses plain h2c on the TLS port', async () => {
    const plain = createClients(s.server.url);
    const err = await plain.cluster.getLeader({}).then(
      () => null,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err).not.toBeNull();
    // Which code depends on when the client sees the connection close; none is OK.
    expect(err!.code).not.toBe(Code.Unknown);
    // And at the HTTP/2 level: the server closes the connection, no response comes.
    const session = http2.connect(s.server.url);
    const outcome = await new Promise<string>((resolve) => {
      const timer = setTimeout(() => resolve('no answer in 10 s'), 10_000);
      session.on('close', () => (clearTimeout(timer), resolve('closed')));
      session.on('error', (e) => (clearTimeout(timer), resolve(`error: ${e.message}`)));
      const req = session.request({
        ':method': 'POST',
        ':path': '/leoflow.v1.ClusterService/GetLeader',
        'content-type': 'application/grpc',
      });
      req.on('response', () => resolve('response'));
      req.on('error', (e) => (clearTimeout(timer), resolve(`error: ${e.message}`)));
      req.end();
    });
    session.destroy();
    expect(outcome).toMatch(/^(error|closed)/);
  });

  it('serves Connect and gRPC-Web over HTTP/1.1 with TLS on the same port, and gRPC over HTTP/2 (ALPN h2)', async () => {
    const ca = readFileSync(pki.ca);
    const connect = await http1(`${httpsUrl(s.server)}/leoflow.v1.ClusterService/GetHealth`, {
      ca,
      contentType: 'application/json',
      body: '{}',
    });
    expect(connect.httpVersion).toBe('1.1');
    expect(connect.status).toBe(200);
    expect(JSON.parse(connect.body.toString())).toBeTypeOf('object');
    // gRPC-Web: one empty message frame (flag 0, length 0); the answer ends with a trailer frame.
    const web = await http1(`${httpsUrl(s.server)}/leoflow.v1.ClusterService/GetLeader`, {
      ca,
      contentType: 'application/grpc-web+proto',
      body: Buffer.alloc(5),
      headers: { 'x-grpc-web': '1' },
    });
    expect(web.status).toBe(200);
    expect(web.httpVersion).toBe('1.1');
    expect(web.headers['content-type']).toBe('application/grpc-web+proto');
    expect(web.body.toString('latin1')).toMatch(/grpc-status: ?0\r\n/);
    const grpc = createClients(httpsUrl(s.server), { ca });
    expect((await grpc.cluster.getLeader({})).replicaId).not.toBe('');
  });

  it('keeps the metrics and health port on plain HTTP', async () => {
    const res = await fetch(s.server.metricsUrl);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('# TYPE');
  });
});

describe('mTLS: agents are who their certificates say', () => {
  const s = serverForFile({
    args: () => ['--tls-cert', pki.server.cert, '--tls-key', pki.server.key, '--tls-client-ca', pki.ca],
  });
  const agents: AgentProcess[] = [];
  afterAll(async () => {
    for (const a of agents) await a.stop();
  });

  it('an agent with its certificate (its id from the CN) runs a task end to end; the CLI reads without one', async () => {
    const cert = pki.client('tls-agent-1');
    const agent = startAgent(httpsUrl(s.server), [
      '--ca-file',
      pki.ca,
      '--tls-cert',
      cert.cert,
      '--tls-key',
      cert.key,
      '--labels',
      'pool=tls',
    ]);
    agents.push(agent);
    const api = createClients(httpsUrl(s.server), { ca: readFileSync(pki.ca) });
    await waitFor(
      'agent tls-agent-1 connected',
      async () => (await api.cluster.listAgents({})).agents.some((a) => a.agentId === 'tls-agent-1' && a.connected),
      20_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${agent.output()}`);
    });
    const file = path.join(tmp, 'tls.yaml');
    await writeFile(
      file,
      'dag_id: tls\ntasks:\n  - id: hello\n    executor: agents\n    placement: { labels: { pool: tls } }\n    command: [echo, over-tls]\n',
    );
    expect((await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'dag', 'apply', file])).code).toBe(0);
    const runId = (await api.workflow.triggerRun({ dagId: 'tls' })).run!.runId;
    expect(await runEnds(s.db.sql, runId, { timeoutMs: 30_000 })).toBe('success');
    const logs = await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'logs', runId, '--task', 'hello']);
    expect(logs.stdout).toContain('over-tls');
    const [ti] = await s.db.sql<{ agent_id: string }[]>`select agent_id from task_instances where run_id = ${runId}`;
    expect(ti!.agent_id).toBe('tls-agent-1');
  });

  it('a certificate for agent A saying Hello as B is refused with PERMISSION_DENIED naming both', async () => {
    const a = pki.client('agent-a');
    const r = await helloOverTls(
      httpsUrl(s.server),
      'agent-b',
      { ca: readFileSync(pki.ca), cert: readFileSync(a.cert), key: readFileSync(a.key) },
      { labels: { pool: 'none' } },
    );
    expect(r.err).toEqual({
      code: 7,
      details: 'hello.agent_id: the TLS client certificate is agent "agent-a"\'s, but Hello says agent "agent-b"',
    });
    const ok = await helloOverTls(
      httpsUrl(s.server),
      'agent-a',
      { ca: readFileSync(pki.ca), cert: readFileSync(a.cert), key: readFileSync(a.key) },
      { labels: { pool: 'none' } },
    );
    expect(ok.err).toBeNull();
    expect(ok.welcome!.msg.case).toBe('welcome');
  });

  it('an agent without a client certificate, or with one from another CA, is refused (UNAUTHENTICATED)', async () => {
    const none = await helloOverTls(
      httpsUrl(s.server),
      'agent-c',
      { ca: readFileSync(pki.ca), cert: null, key: null },
      { labels: { pool: 'none' } },
    );
    expect(none.err).toEqual({
      code: 16,
      details:
        'agent "agent-c" presented no TLS client certificate; this control plane requires one signed by its --tls-client-ca for agent streams',
    });
    const stranger = other.client('agent-c');
    const foreign = await helloOverTls(
      httpsUrl(s.server),
      'agent-c',
      { ca: readFileSync(pki.ca), cert: readFileSync(stranger.cert), key: readFileSync(stranger.key) },
      { labels: { pool: 'none' } },
    );
    expect(foreign.err?.code).toBe(16);
    expect(foreign.err?.details).toMatch(
      /^agent "agent-c": its TLS client certificate \(CN=agent-c\) is not signed by this control plane's --tls-client-ca \(/,
    );
    // The real agent exits 1 on the refusal, saying why.
    const run = startAgent(httpsUrl(s.server), ['--ca-file', pki.ca, '--id', 'agent-c']);
    agents.push(run);
    const exit = await Promise.race([run.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
    expect(exit?.code, run.output()).toBe(1);
    expect(run.output()).toContain(
      'control plane refused the agent: UNAUTHENTICATED: agent \\"agent-c\\" presented no TLS client certificate; this control plane requires one signed by its --tls-client-ca for agent streams',
    );
  });

  it('an agent that cannot verify the server says why, and keeps trying', async () => {
    const a = pki.client('agent-d');
    const run = startAgent(httpsUrl(s.server), ['--ca-file', other.ca, '--tls-cert', a.cert, '--tls-key', a.key]);
    agents.push(run);
    await waitFor('the agent to say why', async () => /stream ended: reconnecting/.test(run.output()), 15_000).catch(
      () => {
        throw new Error(run.output());
      },
    );
    expect(run.output()).toMatch(
      /"reason":"UNAVAILABLE: [^"]*(self-signed certificate|unable to verify)[^"]*".*"msg":"stream ended: reconnecting"/,
    );
    expect(run.child.exitCode).toBeNull();
  });

  it('the agent checks its certificate against its --id before connecting', async () => {
    const a = pki.client('agent-a');
    const run = startAgent(httpsUrl(s.server), [
      '--ca-file',
      pki.ca,
      '--tls-cert',
      a.cert,
      '--tls-key',
      a.key,
      '--id',
      'agent-b',
    ]);
    agents.push(run);
    expect((await run.exited).code).toBe(2);
    expect(run.output()).toContain(
      '--tls-cert: the certificate is for agent "agent-a" (its CN), but this agent\'s --id is "agent-b"; the control plane would refuse it',
    );
  });
});

describe('--tls-client-auth all', () => {
  const s = serverForFile({
    args: () => [
      ...['--tls-cert', pki.server.cert, '--tls-key', pki.server.key],
      ...['--tls-client-ca', pki.ca, '--tls-client-auth', 'all'],
    ],
  });

  it('refuses the CLI without a client certificate in the handshake, and answers it with one', async () => {
    const without = await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'agents', 'list']);
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(
      /^leoflow: the control plane at https:\/\/127\.0\.0\.1:\d+ refused the TLS handshake: it requires a client certificate signed by its --tls-client-ca; give one with --client-cert and --client-key \(ERR_SSL_\w+\)\n$/,
    );
    const op = pki.client('operator');
    const withCert = await cli(httpsUrl(s.server), [
      '--ca-file',
      pki.ca,
      '--client-cert',
      op.cert,
      '--client-key',
      op.key,
      'agents',
      'list',
    ]);
    expect(withCert.stderr).toBe('');
    expect(withCert.code).toBe(0);
  });
});

describe('certificate rotation', () => {
  let certFile: string;
  let keyFile: string;
  // Before the server's start (hooks run in order): it is started on these copies.
  beforeAll(async () => {
    certFile = path.join(tmp, 'rotating.crt');
    keyFile = path.join(tmp, 'rotating.key');
    await copyFile(pki.server.cert, certFile);
    await copyFile(pki.server.key, keyFile);
  });
  const s = serverForFile({ args: () => ['--tls-cert', certFile, '--tls-key', keyFile] });
  const logged = (text: string) =>
    waitFor(`log "${text}"`, async () => s.server.logs.some((l) => String(l.msg).includes(text)), 15_000);

  it('SIGHUP puts a new certificate in use without a restart, and keeps the old one when the new files are bad', async () => {
    expect((await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'agents', 'list'])).code).toBe(0);
    // A half-written rotation: the certificate changed, the key not yet.
    await copyFile(other.server.cert, certFile);
    s.server.child.kill('SIGHUP');
    await logged('TLS files not reloaded, the certificate in use is kept');
    expect(String(s.server.logs.find((l) => String(l.msg).startsWith('TLS files not reloaded'))!.msg)).toContain(
      'is not the private key of the certificate',
    );
    expect((await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'agents', 'list'])).code).toBe(0);
    // The rotation completed.
    await copyFile(other.server.key, keyFile);
    s.server.child.kill('SIGHUP');
    await logged('TLS certificate reloaded');
    const rotated = await cli(httpsUrl(s.server), ['--ca-file', other.ca, 'agents', 'list']);
    expect(rotated.stderr).toBe('');
    expect(rotated.code).toBe(0);
    expect((await cli(httpsUrl(s.server), ['--ca-file', pki.ca, 'agents', 'list'])).stderr).toMatch(
      /cannot verify the control plane's TLS certificate/,
    );
    expect(s.server.child.exitCode).toBeNull();
  });
});

describe('bad TLS configuration stops the server at start, naming the problem', () => {
  it('exits 2 with the message', async () => {
    const { runCommand, BIN } = await import('../helpers/leoflow-process.js');
    const r = await runCommand(
      process.execPath,
      [
        BIN,
        'server',
        '--tls-cert',
        pki.server.cert,
        '--tls-key',
        other.server.key,
        '--database-url',
        'postgres://127.0.0.1:1/none',
      ],
      { timeoutMs: 20_000 },
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      `--tls-cert/--tls-key: ${other.server.key} is not the private key of the certificate in ${pki.server.cert} (they do not match)`,
    );
  });
});
