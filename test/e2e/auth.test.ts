import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { WorkflowService } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  BIN,
  cli,
  runCommand,
  scratchDir,
  startAgent,
  startServer,
  waitFor,
  type ServerProcess,
} from '../helpers/leoflow-process.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * Who may do what, end to end: real `leoflow server --edition pro` processes with auth on (the
 * test helper's LEOFLOW_INSECURE unset), the CLI managing tokens, agents with per-agent tokens.
 */

const PRO = [
  '--edition',
  'pro',
  '--executor',
  'subprocess',
  '--heartbeat-interval',
  '200ms',
  '--heartbeat-threshold',
  '1s',
];
// Auth on: the helper starts servers --insecure unless told otherwise.
const AUTH_ENV = { LEOFLOW_INSECURE: undefined, LEOFLOW_TOKEN: undefined, LEOFLOW_AGENT_TOKEN: undefined };

const f = replicasForFile();
const { servers, agents } = f;

/** `leoflow server` run to its exit (it is expected to refuse to start). */
const refusedStart = (args: string[]) =>
  runCommand(
    process.execPath,
    [
      BIN,
      'server',
      '--metrics-listen',
      'off',
      '--log-format',
      'json',
      '--state-dir',
      scratchDir('leoflow-auth-'),
      ...args,
    ],
    {
      timeoutMs: 30_000,
      env: { ...AUTH_ENV, DATABASE_URL: f.db.url, LEOFLOW_EDITION: undefined },
    },
  );

const code = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return Code[(err as ConnectError).code];
  }
};

describe('API tokens and roles', () => {
  let server: ServerProcess;
  let admin: string;

  it('Pro refuses to start open when no admin token exists, naming the ways out', async () => {
    const r = await refusedStart([...PRO, '--listen', '127.0.0.1:0']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('the pro edition requires API tokens, and no usable admin token exists');
    expect(r.stderr).toContain('leoflow token create --role admin --database-url');
    expect(r.stderr).toContain('--insecure');
  });

  it('Lite on 0.0.0.0 without auth is refused too; on loopback it stays open', async () => {
    const r = await refusedStart(['--edition', 'lite', '--listen', '0.0.0.0:0']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('API tokens are required on 0.0.0.0, which is not a loopback address');
    const lite = await startServer({ env: { ...AUTH_ENV, DATABASE_URL: f.db.url }, args: ['--edition', 'lite'] });
    servers.push(lite);
    expect(await code(createClients(lite.url).workflow.listDags({}))).toBe('ok');
    // Open on loopback: the caller is `local`, and may do everything.
    expect(await createClients(lite.url).tokens.whoAmI({})).toMatchObject({
      id: 'local',
      role: 'admin',
      tokenRequired: false,
    });
    expect(lite.logs.some((l) => String(l.msg).startsWith('INSECURE'))).toBe(false);
    await lite.stop();
  });

  it('Pro starts with --insecure, answers without a token, and warns in its log at every start', async () => {
    for (let i = 0; i < 2; i++) {
      const s = await startServer({ env: { ...AUTH_ENV, DATABASE_URL: f.db.url }, args: [...PRO, '--insecure'] });
      servers.push(s);
      expect((await createClients(s.url).cluster.getLeader({})).replicaId).not.toBe('');
      expect(s.logs.some((l) => l.level === 40 && String(l.msg).startsWith('INSECURE'))).toBe(true);
      await s.stop();
    }
  });

  it('the first admin token comes from `leoflow token create --database-url`, printed once on stdout', async () => {
    const r = await cli(null, ['token', 'create', '--role', 'admin', '--name', 'first', '--database-url', f.db.url]);
    expect(r.code, r.stderr).toBe(0);
    admin = r.stdout.trim();
    expect(admin).toMatch(/^lf_[A-Za-z0-9_-]{43}$/);
    expect(r.stderr).toMatch(/created token [0-9a-f]{12} \(role admin\)/);
    const stored = await f.db.sql<{ hash: Buffer }[]>`select hash from api_tokens`;
    expect(stored).toHaveLength(1);
    expect(stored[0]!.hash.toString('hex')).not.toContain(Buffer.from(admin).toString('hex'));
    server = await startServer({ env: { ...AUTH_ENV, DATABASE_URL: f.db.url }, args: PRO });
    servers.push(server);
    expect(server.logs.some((l) => String(l.msg).startsWith('INSECURE'))).toBe(false);
  });

  it('no token, or a wrong one, is UNAUTHENTICATED; each role does what it may and is refused the rest, naming the role', async () => {
    expect(await code(createClients(server.url).cluster.getLeader({}))).toBe('Unauthenticated');
    expect(await code(createClients(server.url, null, 'lf_wrong').cluster.getLeader({}))).toBe('Unauthenticated');
    const make = async (role: string) => {
      const r = await cli(server.url, ['token', 'create', '--role', role], { env: { LEOFLOW_TOKEN: admin } });
      expect(r.code, r.stderr).toBe(0);
      return r.stdout.trim();
    };
    const viewer = createClients(server.url, null, await make('viewer'));
    const operator = createClients(server.url, null, await make('operator'));
    const root = createClients(server.url, null, admin);
    expect(await code(viewer.workflow.listDags({}))).toBe('ok');
    expect(await code(viewer.workflow.triggerRun({ dagId: 'none' }))).toBe('PermissionDenied');
    // Each token may ask who it is, and nothing about the others.
    for (const [client, role] of [
      [viewer, 'viewer'],
      [operator, 'operator'],
      [root, 'admin'],
    ] as const) {
      const me = await client.tokens.whoAmI({});
      expect(me).toMatchObject({ role, tokenRequired: true });
      expect(me.id).toMatch(/^[0-9a-f]{12}$/);
    }
    expect((await root.tokens.whoAmI({})).name).toBe('first');
    expect(await code(viewer.tokens.listTokens({}))).toBe('PermissionDenied');
    expect(await code(operator.workflow.triggerRun({ dagId: 'none' }))).toBe('NotFound'); // let through: the handler answers
    expect(await code(operator.workflow.applyDag({ source: 'x' }))).toBe('PermissionDenied');
    expect(await code(operator.tokens.listTokens({}))).toBe('PermissionDenied');
    expect(await code(root.tokens.listTokens({}))).toBe('ok');
    try {
      await viewer.cluster.drainAgent({ agentId: 'a' });
      expect.unreachable();
    } catch (err) {
      expect((err as ConnectError).rawMessage).toMatch(
        /^DrainAgent needs role operator or above; token "[0-9a-f]{12}" has role viewer$/,
      );
    }
  });

  it('takes the token the same way over Connect and gRPC-Web, on HTTP/2 and on HTTP/1.1', async () => {
    const viewer = (
      await cli(server.url, ['token', 'create', '--role', 'viewer'], { env: { LEOFLOW_TOKEN: admin } })
    ).stdout.trim();
    for (const [make, httpVersion] of [
      [createConnectTransport, '2'],
      [createGrpcWebTransport, '2'],
      [createConnectTransport, '1.1'],
      [createGrpcWebTransport, '1.1'],
    ] as const) {
      const withToken = createClient(
        WorkflowService,
        make({
          baseUrl: server.url,
          httpVersion,
          interceptors: [(next) => (req) => (req.header.set('authorization', `Bearer ${viewer}`), next(req))],
        }),
      );
      const without = createClient(WorkflowService, make({ baseUrl: server.url, httpVersion }));
      expect(await code(withToken.listDags({}))).toBe('ok');
      expect(await code(withToken.pauseDag({ dagId: 'x', paused: true }))).toBe('PermissionDenied');
      expect(await code(without.listDags({}))).toBe('Unauthenticated');
    }
  });

  it('the CLI lists tokens (never secrets) and revokes one: refused from the next call on', async () => {
    const made = await cli(server.url, ['token', 'create', '--role', 'viewer', '--name', 'to-revoke', '-o', 'json'], {
      env: { LEOFLOW_TOKEN: admin },
    });
    const { id, secret } = JSON.parse(made.stdout) as { id: string; secret: string };
    expect(await cli(server.url, ['status'], { env: { LEOFLOW_TOKEN: secret } }).then((r) => r.code)).toBe(0);
    const list = await cli(server.url, ['--token', admin, 'token', 'list']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`${id}\\s+to-revoke\\s+viewer\\s+-\\s+active`));
    expect(list.stdout).not.toContain(secret);
    expect(list.stdout).not.toContain(admin);
    const rev = await cli(server.url, ['token', 'revoke', id], { env: { LEOFLOW_TOKEN: admin } });
    expect(rev.stdout).toMatch(new RegExp(`^revoked token ${id}: ended \\d+ open streams? on this server`));
    expect((await cli(server.url, ['token', 'list'], { env: { LEOFLOW_TOKEN: admin } })).stdout).toMatch(
      new RegExp(`${id}\\s+to-revoke\\s+viewer\\s+-\\s+revoked`),
    );
    const after = await cli(server.url, ['dag', 'list'], { env: { LEOFLOW_TOKEN: secret } });
    expect(after.code).toBe(1);
    expect(after.stderr).toContain(`[unauthenticated] ListDags: API token "${id}" was revoked at`);
    const again = await cli(server.url, ['token', 'revoke', id], { env: { LEOFLOW_TOKEN: admin } });
    expect(again.stdout).toBe(`token ${id} was revoked already\n`);
  });

  it('an expired token is refused, saying so', async () => {
    const made = await cli(server.url, ['token', 'create', '--role', 'admin', '--expires', '1s', '-o', 'json'], {
      env: { LEOFLOW_TOKEN: admin },
    });
    const { id, secret } = JSON.parse(made.stdout) as { id: string; secret: string };
    await new Promise((r) => setTimeout(r, 1500));
    const r = await cli(server.url, ['dag', 'list'], { env: { LEOFLOW_TOKEN: secret } });
    expect(r.stderr).toContain(`[unauthenticated] ListDags: API token "${id}" expired at`);
  });

  it('bad token requests are INVALID_ARGUMENT naming the field', async () => {
    const bad = await cli(server.url, ['token', 'create', '--role', 'root'], { env: { LEOFLOW_TOKEN: admin } });
    expect(bad.stderr).toContain('[invalid_argument] role: must be one of viewer, operator, admin, agent, got "root"');
    const nopat = await cli(server.url, ['token', 'create', '--role', 'agent'], { env: { LEOFLOW_TOKEN: admin } });
    expect(nopat.stderr).toContain('agent_pattern: must not be empty');
  });

  it('counts denials by code and RPC', async () => {
    const m = await scrapeMetrics(server.metricsUrl);
    expect(m.get('leoflow_api_auth_denied_total{code="unauthenticated",rpc="GetLeader"}')).toBe(2);
    expect(m.get('leoflow_api_auth_denied_total{code="permission_denied",rpc="TriggerRun"}')).toBe(1);
    // Four from the Connect and gRPC-Web calls without a token (HTTP/2 and HTTP/1.1), one revoked, one expired.
    expect(m.get('leoflow_api_auth_denied_total{code="unauthenticated",rpc="ListDags"}')).toBe(6);
    expect(m.get('leoflow_api_auth_denied_total{code="permission_denied",rpc="PauseDag"}')).toBe(4);
  });

  it('an agent token bound to gpu-* lets gpu-1 say Hello and refuses cpu-1, naming the id', async () => {
    const made = await cli(server.url, ['token', 'create', '--role', 'agent', '--agent-pattern', 'gpu-*'], {
      env: { LEOFLOW_TOKEN: admin },
    });
    const agentToken = made.stdout.trim();
    const gpu = startAgent(server.url, ['--id', 'gpu-1'], { env: { ...AUTH_ENV, LEOFLOW_AGENT_TOKEN: agentToken } });
    agents.push(gpu);
    const cluster = createClients(server.url, null, admin).cluster;
    await waitFor(
      'gpu-1 connected',
      async () => (await cluster.listAgents({})).agents.some((a) => a.agentId === 'gpu-1' && a.connected),
      20_000,
    );
    // The flag this time: `leoflow agent --token` (parsed by the program, which has a --token too).
    const cpu = startAgent(server.url, ['--id', 'cpu-1', '--token', agentToken], { env: AUTH_ENV });
    agents.push(cpu);
    const ended = await Promise.race([cpu.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
    expect(ended, cpu.output()).not.toBeNull();
    expect(ended!.code).not.toBe(0);
    expect(cpu.output()).toContain('PERMISSION_DENIED');
    expect(cpu.output()).toContain('is bound to agent ids matching \\"gpu-*\\", not to agent id \\"cpu-1\\"');
    const none = startAgent(server.url, ['--id', 'gpu-2'], { env: AUTH_ENV });
    agents.push(none);
    const e2 = await Promise.race([none.exited, new Promise<null>((r) => setTimeout(() => r(null), 20_000))]);
    expect(e2, none.output()).not.toBeNull();
    expect(none.output()).toContain('UNAUTHENTICATED');
    // Neither refused agent got a row: the check comes before anything is written for the id.
    expect((await cluster.listAgents({})).agents.map((a) => a.agentId)).toEqual(['gpu-1']);
  });
});
