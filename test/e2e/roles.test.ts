import path from 'node:path';
import { Code, ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { ClusterService } from '../../src/gen/leoflow/v1/cluster_pb.js';
import { TokenService } from '../../src/gen/leoflow/v1/token_pb.js';
import { RunState } from '../../src/gen/leoflow/v1/types_pb.js';
import { WRITE_RPCS } from '../../src/server/auth/role-guard.js';
import { BIN, cli, runCommand, startAgent, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { isRunEnded } from '../helpers/run-ends.js';
import { scrapeMetrics } from '../helpers/scrape-metrics.js';
import { replicasForFile } from '../helpers/server-fixture.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * Replicas of the Pro edition with roles, as real `leoflow server --edition pro` processes on one
 * database (the subprocess executor: the Kubernetes one is not in this build): `auto` leads, a
 * `worker` serves writes and agent streams but never campaigns, an `observer` answers reads and
 * refuses every write naming its role, and a `leader` either takes the lock within its timeout or
 * fails at start.
 */

const PRO = [
  '--edition',
  'pro',
  '--insecure',
  '--executor',
  'subprocess',
  '--tick-interval',
  '200ms',
  '--leader-watchdog',
  '500ms',
  '--heartbeat-interval',
  '200ms',
  '--heartbeat-threshold',
  '1s',
];

const f = replicasForFile({ tmpPrefix: 'leoflow-roles-' });
const { servers, agents } = f;

const start = f.launcher(PRO);

async function runStates(runIds: string[]): Promise<string[]> {
  await waitFor(
    'runs ended',
    async () => {
      const rows = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[])`;
      return rows.length === runIds.length && rows.every((r) => isRunEnded(r.state));
    },
    40_000,
  );
  return (
    await f.db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[]) order by id`
  ).map((r) => r.state);
}

async function leaderGauge(s: ServerProcess): Promise<[string, number][]> {
  return [...(await scrapeMetrics(s.metricsUrl))].filter(([k]) => k.startsWith('leoflow_leader{'));
}

describe('replica roles (Pro edition)', () => {
  let auto: ServerProcess;
  let worker: ServerProcess;
  let observer: ServerProcess;

  it('one auto replica leads; worker and observer serve; GetLeader, GetHealth and the leader metric show each role', async () => {
    auto = await start(['--replica-id', 'pro-auto']);
    await waitFor(
      'auto leads',
      async () => (await createClients(auto.url).cluster.getLeader({})).leaderId === 'pro-auto',
    );
    worker = await start(['--replica-id', 'pro-worker', '--role', 'worker']);
    observer = await start(['--replica-id', 'pro-observer', '--role', 'observer']);

    const expected = [
      { replicaId: 'pro-auto', role: 'auto', leader: true },
      { replicaId: 'pro-observer', role: 'observer', leader: false },
      { replicaId: 'pro-worker', role: 'worker', leader: false },
    ];
    for (const [s, role] of [
      [auto, 'auto'],
      [worker, 'worker'],
      [observer, 'observer'],
    ] as const) {
      const api = createClients(s.url);
      const got = await waitFor(`${role} sees the three replicas`, async () => {
        const r = await api.cluster.getLeader({});
        return r.replicas.length === 3 ? r : null;
      });
      expect(got).toMatchObject({ leaderId: 'pro-auto', role, edition: 'pro' });
      expect(got.replicas.map((r) => ({ replicaId: r.replicaId, role: r.role, leader: r.leader }))).toEqual(expected);
      const health = await api.cluster.getHealth({});
      expect(health).toMatchObject({ role, edition: 'pro', leader: role === 'auto', live: true, ready: true });
      expect(health.readyChecks.map((c) => c.name)).toEqual(['serving', 'api', 'database', 'migrations']);
      expect(health.replicas).toHaveLength(3);
    }
    const listed = await cli(observer.url, ['replicas', '-o', 'json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual({
      leader_id: 'pro-auto',
      answered_by: 'pro-observer',
      edition: 'pro',
      replicas: expected.map((r) => ({ replica_id: r.replicaId, role: r.role, leader: r.leader })),
    });
    const shown = await cli(worker.url, ['replicas']);
    expect(shown.stdout).toMatch(/^pro-worker \(answered\)\s+worker\s+no\s/m);
    expect(await leaderGauge(auto)).toEqual([['leoflow_leader{role="auto"}', 1]]);
    expect(await leaderGauge(worker)).toEqual([['leoflow_leader{role="worker"}', 0]]);
    expect(await leaderGauge(observer)).toEqual([['leoflow_leader{role="observer"}', 0]]);
  });

  it('a worker takes writes and agent streams; an agent sent to an observer first moves on to the worker', async () => {
    await applyDag(worker.url, f.tmp, [
      'dag_id: mixed',
      'tasks:',
      '  - id: local',
      '    command: ["sh", "-c", "echo local"]',
      '  - id: remote',
      '    depends_on: [local]',
      '    executor: agents',
      '    placement: { labels: { zone: roles } }',
      '    command: ["sh", "-c", "echo remote on $LEOFLOW_AGENT_ID"]',
    ]);
    // The observer's address first: it refuses the stream (UNAVAILABLE), the agent goes on to the
    // next address instead of stopping.
    const agent = startAgent(`${observer.url},${worker.url}`, ['--id', 'roles-agent', '--labels', 'zone=roles']);
    agents.push(agent);
    const api = createClients(worker.url);
    const seen = await waitFor(
      'agent connected',
      async () => (await api.cluster.listAgents({})).agents.find((a) => a.agentId === 'roles-agent' && a.connected),
      20_000,
    );
    expect(seen.connectedReplica).toBe('pro-worker');
    expect(agent.output()).toContain('takes no agent streams');
    expect(agent.child.exitCode).toBeNull();

    const runId = (await api.workflow.triggerRun({ dagId: 'mixed' })).run!.runId;
    expect(await runStates([runId])).toEqual(['success']);
    const tis = await f.db.sql<
      { task_id: string; agent_id: string | null }[]
    >`select task_id, agent_id from task_instances where run_id = ${runId} order by task_id`;
    expect(tis.map((t) => t.task_id)).toEqual(['local', 'remote']);
    expect(tis[1]!.agent_id).toBe('roles-agent');
  });

  it('an observer answers reads and refuses every write with PERMISSION_DENIED naming its role, writing nothing', async () => {
    const api = createClients(observer.url);
    expect((await api.workflow.listDags({})).dags.map((d) => d.dagId)).toEqual(['mixed']);
    const [run] = (await api.workflow.listRuns({ dagId: 'mixed' })).runs;
    expect(run?.state).toBe(RunState.SUCCESS);
    expect((await api.workflow.getRun({ runId: run!.runId })).run?.runId).toBe(run!.runId);
    expect((await api.cluster.listAgents({})).agents.map((a) => a.agentId)).toEqual(['roles-agent']);

    const before = await f.db
      .sql`select (select count(*) from dag_runs) as runs, (select count(*) from events) as events, (select count(*) from dags) as dags, (select count(*) from agents) as agents`;
    expect(WRITE_RPCS.length).toBe(15);
    for (const m of WRITE_RPCS) {
      const clients = { [ClusterService.typeName]: api.cluster, [TokenService.typeName]: api.tokens };
      const client = (clients[m.parent.typeName] ?? api.workflow) as unknown as Record<
        string,
        (req: unknown) => Promise<unknown> | AsyncIterable<unknown>
      >;
      // A request that would pass validation where one is needed: the guard answers before any handler.
      const req = {
        dagId: 'mixed',
        runId: run!.runId,
        agentId: 'roles-agent',
        source: 'dag_id: x\ntasks: [{id: a, command: [true]}]\n',
        filename: 'x.yaml',
        name: 'file.landed',
        role: 'viewer',
        id: '1',
      };
      // A streaming write (WatchCleanHistory) is refused at its first message read.
      const call = async () => {
        if (m.methodKind === 'unary') return client[m.localName]!(req);
        const messages = (async function* () {
          yield req;
        })();
        for await (const _ of client[m.localName]!(
          m.methodKind === 'bidi_streaming' ? messages : req,
        ) as AsyncIterable<unknown>)
          void _;
      };
      const err = await call().then(
        () => null,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err, m.name).not.toBeNull();
      expect(err!.code, m.name).toBe(Code.PermissionDenied);
      expect(err!.rawMessage, m.name).toBe(
        `${m.name} is a write, and replica "pro-observer" has role observer (read-only): send it to a replica with role auto, leader or worker`,
      );
    }
    const r = await cli(observer.url, ['run', 'trigger', 'mixed']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('role observer (read-only)');
    expect(
      await f.db
        .sql`select (select count(*) from dag_runs) as runs, (select count(*) from events) as events, (select count(*) from dags) as dags, (select count(*) from agents) as agents`,
    ).toEqual(before);
  });

  it('a replica of role leader fails at start while another leads, naming it', async () => {
    const r = await runCommand(
      process.execPath,
      [
        BIN,
        'server',
        ...PRO,
        '--replica-id',
        'pro-must-lead',
        '--role',
        'leader',
        '--leader-timeout',
        '1s',
        '--listen',
        '127.0.0.1:0',
        '--metrics-listen',
        'off',
        '--state-dir',
        path.join(f.tmp, 'must-lead'),
        '--log-format',
        'json',
      ],
      {
        env: { DATABASE_URL: f.db.url },
        timeoutMs: 30_000,
      },
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'leoflow server: could not start: role leader: could not become leader within 1s (replica "pro-auto" leads); use --role auto to stand by, or raise --leader-timeout',
    );
    // It let go of everything, its campaign too: a lock wait left behind would take the lock the
    // moment the leader lets go.
    await waitFor(
      'its sessions gone',
      async () =>
        (await f.db.sql`select 1 from pg_stat_activity where application_name like ${'%pro-must-lead%'}`).length === 0,
      5000,
    );
  });

  it('with the leader gone a worker never campaigns; a replica of role leader then takes over and the waiting run completes', async () => {
    await auto.kill();
    // Well past the watchdog and the campaign retry: a replica that campaigns would lead by now.
    await new Promise((r) => setTimeout(r, 2500));
    const api = createClients(worker.url);
    expect((await api.cluster.getLeader({})).leaderId).toBe('');
    expect(await leaderGauge(worker)).toEqual([['leoflow_leader{role="worker"}', 0]]);
    const runId = (await api.workflow.triggerRun({ dagId: 'mixed' })).run!.runId;
    await new Promise((r) => setTimeout(r, 600));
    const [waiting] = await f.db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
    expect(waiting?.state).toBe('queued');

    const leader = await start(['--replica-id', 'pro-leader', '--role', 'leader', '--leader-timeout', '10s']);
    const got = await createClients(leader.url).cluster.getLeader({});
    expect(got.leaderId).toBe('pro-leader');
    expect(got.leadingSince).toBeDefined();
    expect(await runStates([runId])).toEqual(['success']);
    const replicas = await waitFor('three replicas again', async () => {
      const r = (await api.cluster.getLeader({})).replicas;
      return r.length === 3 ? r : null;
    });
    expect(replicas.map((r) => `${r.replicaId}:${r.role}:${r.leader}`)).toEqual([
      'pro-leader:leader:true',
      'pro-observer:observer:false',
      'pro-worker:worker:false',
    ]);
  });
});
