import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { AgentService, ProtocolVersion, type ConnectRequest } from '../../src/gen/leoflow/v1/agent_pb.js';
import { AsyncInbox } from '../helpers/scripted-agent.js';
import { startAgent, startServer, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';
import { applyDag } from '../helpers/applied-dag.js';

/**
 * Issue 38: `Hello.only_ti_id` (an agent taking one task instance for itself, `--once --ti`) is
 * granted only when placement would have chosen that agent. A hostile agent token used to claim
 * any task this way, and receive its command, env and secret references. Each refusal is
 * PERMISSION_DENIED naming the rule, and writes nothing: no claim, no agent row.
 */

let db: TestDatabase;
let server: ServerProcess;
let tmp: string;

const DAG = `dag_id: guarded
tasks:
  - id: vip
    executor: agents
    command: [echo, vip]
    placement: { allowed_agents: [vip-1] }
  - id: forbidden
    executor: agents
    command: [echo, forbidden]
    placement: { forbidden_agents: [evil-x] }
  - id: gpu
    executor: agents
    command: [echo, gpu]
    placement: { labels: { gpu: nvidia }, capabilities: [cuda] }
  - id: secret
    executor: agents
    command: [echo, secret]
    env:
      DB_PASSWORD: { secret: { env: PG_PASSWORD } }
  - id: local
    executor: subprocess
    command: [sleep, "30"]
`;

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-one-shot-'));
  server = await startServer({ env: { DATABASE_URL: db.url } });
  await applyDag(server.url, tmp, DAG, 'guarded.yaml');
});
afterAll(async () => {
  await server?.stop();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

/** Says Hello for one task instance and resolves with how the stream ended. */
async function claim(
  agentId: string,
  tiId: string,
  extra: {
    labels?: Record<string, string>;
    capabilities?: string[];
    attemptToken?: string;
    incarnationId?: string;
  } = {},
): Promise<ConnectError | 'welcomed'> {
  const client = createClient(AgentService, createGrpcTransport({ baseUrl: server.url }));
  const outbox = new AsyncInbox<ConnectRequest>();
  outbox.push({
    $typeName: 'leoflow.v1.ConnectRequest',
    msg: {
      case: 'hello',
      value: {
        $typeName: 'leoflow.v1.Hello',
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
        agentId,
        labels: extra.labels ?? {},
        capabilities: extra.capabilities ?? [],
        slots: 1,
        token: '',
        held: [],
        incarnationId: extra.incarnationId ?? randomUUID(),
        onlyTiId: tiId,
        onlyAttemptToken: extra.attemptToken ?? '',
      },
    },
  } as ConnectRequest);
  try {
    for await (const m of client.connect(outbox)) {
      if (m.msg.case === 'welcome') return 'welcomed';
    }
    throw new Error('the stream ended without Welcome or an error');
  } catch (err) {
    return ConnectError.from(err);
  } finally {
    outbox.close();
  }
}

describe('the one-shot claim (Hello.only_ti_id)', () => {
  it('is refused, naming the rule and writing nothing, to an agent placement would not choose', async () => {
    const api = createClients(server.url);
    const runId = (await api.workflow.triggerRun({ dagId: 'guarded' })).run!.runId;
    const tis = await waitFor('the tasks scheduled, the local one running', async () => {
      const rows = await db.sql<
        { id: string; task_id: string; state: string }[]
      >`select id, task_id, state from task_instances where run_id = ${runId}`;
      const byTask = new Map(rows.map((r) => [r.task_id, r]));
      return rows.length === 5 &&
        ['vip', 'forbidden', 'gpu', 'secret'].every((t) => byTask.get(t)!.state === 'scheduled')
        ? byTask
        : null;
    });
    const cases: [string, string, Parameters<typeof claim>[2], string][] = [
      ['vip', 'evil-x', {}, 'placement.allowed_agents does not name agent "evil-x"'],
      ['forbidden', 'evil-x', {}, 'placement.forbidden_agents names agent "evil-x"'],
      [
        'gpu',
        'evil-x',
        { labels: { gpu: 'none' }, capabilities: ['cuda'] },
        'placement.labels needs gpu=nvidia, the agent has gpu=none',
      ],
      [
        'gpu',
        'evil-x',
        { labels: { gpu: 'nvidia' } },
        'placement.capabilities needs cuda, which the agent did not announce',
      ],
      ['secret', 'evil-x', {}, 'the task has secret variables and the agent did not announce leoflow.secret-env'],
      ['local', 'evil-x', {}, 'the task runs on the subprocess executor, not on agents'],
    ];
    for (const [task, agent, extra, rule] of cases) {
      const r = await claim(agent, tis.get(task)!.id, extra);
      expect(r, task).toBeInstanceOf(ConnectError);
      expect((r as ConnectError).code, `${task}: ${(r as ConnectError).rawMessage}`).toBe(Code.PermissionDenied);
      expect((r as ConnectError).rawMessage, task).toBe(
        `hello.only_ti_id: agent "${agent}" may not take task instance ${tis.get(task)!.id}: ${rule}`,
      );
    }
    // Nothing was written: every guarded task still waits, untried, and no such agent exists.
    const after = await db.sql<{ task_id: string; state: string; try_number: number; agent_id: string | null }[]>`
      select task_id, state, try_number, agent_id from task_instances where run_id = ${runId} and task_id <> 'local' order by task_id`;
    expect(after.map((t) => [t.task_id, t.state, t.try_number, t.agent_id])).toEqual([
      ['forbidden', 'scheduled', 0, null],
      ['gpu', 'scheduled', 0, null],
      ['secret', 'scheduled', 0, null],
      ['vip', 'scheduled', 0, null],
    ]);
    expect(await db.sql`select agent_id from agents where agent_id = 'evil-x'`).toEqual([]);

    // The agent placement would choose takes it, and runs it.
    const vip = startAgent(server.url, ['--id', 'vip-1', '--once', '--ti', tis.get('vip')!.id]);
    expect((await vip.exited).code, vip.output()).toBe(0);
    const [done] = await db.sql<
      { state: string; agent_id: string }[]
    >`select state, agent_id from task_instances where id = ${tis.get('vip')!.id}`;
    expect(done).toEqual({ state: 'success', agent_id: 'vip-1' });
    await api.workflow.cancelRun({ runId });
  });

  it('never writes a credential a Hello carries into its error or the server log: fingerprints only', async () => {
    const token = randomUUID();
    const badIncarnation = 'incarnation-that-is-no-uuid-but-a-secret';
    const r1 = await claim('pod-x', '', { attemptToken: token });
    const r2 = await claim('pod-y', '', { incarnationId: badIncarnation });
    for (const r of [r1, r2]) {
      expect(r).toBeInstanceOf(ConnectError);
      expect((r as ConnectError).code).toBe(Code.InvalidArgument);
    }
    expect((r1 as ConnectError).rawMessage).toMatch(
      /^hello\.only_attempt_token: only with only_ti_id, got \{"fingerprint":"sha256:[0-9a-f]{12}","length":36\}$/,
    );
    // The server's log reaches this process through a pipe: wait for its line of the refusal.
    await waitFor(
      'the refusal in the server log',
      async () => server.logs.some((l) => JSON.stringify(l).includes('hello.only_attempt_token')),
      5000,
      20,
    );
    const said = `${server.logs.map((l) => JSON.stringify(l)).join('\n')}\n${server.stderr()}`;
    expect(said).not.toContain(token);
    expect(said).not.toContain(badIncarnation);
    expect(`${(r1 as ConnectError).rawMessage} ${(r2 as ConnectError).rawMessage}`).not.toMatch(
      new RegExp(`${token}|${badIncarnation}`),
    );
  });
});
