import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import {
  AgentService,
  AttemptOutcome,
  ProtocolVersion,
  type ConnectRequest,
  type ConnectResponse,
} from '../../src/gen/leoflow/v1/agent_pb.js';
import { cli, startServer, waitFor } from '../helpers/leoflow-process.js';
import { AsyncInbox } from '../helpers/scripted-agent.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * Agents: (1) dispatch latency to a connected agent — from the claim (queued_at) to the agent's
 * Started recorded (started_at), by the server's clock, through a protocol-level agent that
 * answers at once (so the figure is Leoflow's, not a process spawn's); (2) what keepalives cost
 * with 200 connected agents: Postgres transactions per second and the server's CPU, against the
 * same server idle with no agent as the baseline.
 */

type Msg =
  Parameters<ReturnType<typeof createClient<typeof AgentService>>['connect']>[0] extends AsyncIterable<infer T>
    ? T
    : never;

function scriptedAgent(
  baseUrl: string,
  agentId: string,
  keepaliveMs: number,
  onAssign?: (m: ConnectResponse, out: AsyncInbox<Msg>) => void,
) {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl }));
  const out = new AsyncInbox<Msg>();
  out.push({
    msg: {
      case: 'hello',
      value: { protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2, agentId, slots: 4, incarnationId: randomUUID() },
    },
  } as Msg);
  let seq = 1n;
  const pump = setInterval(
    () => out.push({ msg: { case: 'keepalive', value: { seq: seq++, held: [] } } } as Msg),
    keepaliveMs,
  );
  const done = (async () => {
    for await (const m of client.connect(out)) if (m.msg.case === 'assign') onAssign?.(m, out);
  })().catch(() => {});
  return {
    async close() {
      clearInterval(pump);
      out.close();
      await done;
    },
  };
}

async function cpuSeconds(pid: number): Promise<number> {
  const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, in clock ticks of 1/100 s
}

async function xacts(sql: Awaited<ReturnType<typeof createTestDatabase>>['sql'], name: string): Promise<number> {
  const [r] = await sql<
    { n: string }[]
  >`select xact_commit + xact_rollback as n from pg_stat_database where datname = ${name}`;
  return Number(r!.n);
}

const f = (x: number) => Math.round(x * 100) / 100;

describe('agents', () => {
  it('measures dispatch latency and keepalive cost', async () => {
    const tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-bench-agents-'));
    const db = await createTestDatabase();
    const keepaliveMs = 1000;
    const s = await startServer({
      env: { DATABASE_URL: db.url },
      args: ['--heartbeat-interval', `${keepaliveMs}ms`, '--heartbeat-threshold', '10s'],
    });
    try {
      const file = path.join(tmp, 'a.yaml');
      await writeFile(file, 'dag_id: a\ntasks:\n  - id: t\n    executor: agents\n    command: ["true"]\n');
      expect((await cli(s.url, ['dag', 'apply', file])).code).toBe(0);
      const api = createClients(s.url);

      // (1) dispatch latency, one run at a time.
      const responder = scriptedAgent(s.url, 'bench-fast', keepaliveMs, (m, out) => {
        if (m.msg.case !== 'assign') return;
        const attempt = m.msg.value.attempt!;
        out.push({ msg: { case: 'started', value: { attempt, pid: 1 } } } as Msg);
        out.push({
          msg: { case: 'finished', value: { attempt, outcome: AttemptOutcome.SUCCESS, exitCode: 0 } },
        } as Msg);
      });
      await waitFor('agent connected', async () => (await api.cluster.listAgents({})).agents.some((a) => a.connected));
      const claimToStart: number[] = [];
      const triggerToStart: number[] = [];
      for (let i = 0; i < 100; i++) {
        const runId = (await api.workflow.triggerRun({ dagId: 'a' })).run!.runId;
        await waitFor(
          'run done',
          async () => {
            const [r] = await db.sql<{ state: string }[]>`select state from dag_runs where id = ${runId}`;
            return r!.state === 'success';
          },
          10_000,
          2,
        );
        const [t] = await db.sql<{ c: number; tr: number }[]>`
          select extract(epoch from t.started_at - t.queued_at) * 1000 as c, extract(epoch from t.started_at - r.created_at) * 1000 as tr
          from task_instances t join dag_runs r on r.id = t.run_id where t.run_id = ${runId}`;
        claimToStart.push(Number(t!.c));
        triggerToStart.push(Number(t!.tr));
      }
      await responder.close();

      // (2) keepalive cost: idle baseline, then 200 agents keeping alive every second.
      const window = 10_000;
      const pid = s.child.pid!;
      await new Promise((r) => setTimeout(r, 1500));
      let x0 = await xacts(db.sql, db.name);
      let c0 = await cpuSeconds(pid);
      await new Promise((r) => setTimeout(r, window));
      const idleTps = ((await xacts(db.sql, db.name)) - x0) / (window / 1000);
      const idleCpu = ((await cpuSeconds(pid)) - c0) / (window / 1000);

      const fleet = Array.from({ length: 200 }, (_, i) => scriptedAgent(s.url, `bench-${i}`, keepaliveMs));
      await waitFor(
        '200 agents connected',
        async () => (await api.cluster.listAgents({})).agents.filter((a) => a.connected).length === 200,
        30_000,
        200,
      );
      await new Promise((r) => setTimeout(r, 2000));
      x0 = await xacts(db.sql, db.name);
      c0 = await cpuSeconds(pid);
      await new Promise((r) => setTimeout(r, window));
      const fleetTps = ((await xacts(db.sql, db.name)) - x0) / (window / 1000);
      const fleetCpu = ((await cpuSeconds(pid)) - c0) / (window / 1000);
      await Promise.all(fleet.map((a) => a.close()));

      await report('agents', [
        {
          measure: 'claim → Started recorded (connected agent)',
          p50: `${f(percentile(claimToStart, 50))} ms`,
          p99: `${f(percentile(claimToStart, 99))} ms`,
          note: '100 runs, one at a time',
        },
        {
          measure: 'trigger → Started recorded',
          p50: `${f(percentile(triggerToStart, 50))} ms`,
          p99: `${f(percentile(triggerToStart, 99))} ms`,
          note: 'includes the scheduler step',
        },
        { measure: 'Postgres transactions/s, idle, no agent', p50: f(idleTps), p99: '', note: 'baseline' },
        {
          measure: 'Postgres transactions/s, 200 agents, keepalive 1 s',
          p50: f(fleetTps),
          p99: '',
          note: `${f(fleetTps / 200)} per agent-keepalive (200 keepalives/s)`,
        },
        { measure: 'server CPU, idle (cores)', p50: f(idleCpu), p99: '', note: 'baseline' },
        {
          measure: 'server CPU, 200 agents (cores)',
          p50: f(fleetCpu),
          p99: '',
          note: `${f(fleetCpu * 100)} % of one core`,
        },
      ]);
    } finally {
      await s.stop();
      await db.drop();
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
