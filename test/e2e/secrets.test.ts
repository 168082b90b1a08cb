import { randomBytes, randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { toJsonString } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProtocolVersion } from '../../src/gen/leoflow/v1/agent_pb.js';
import { ListDagsResponseSchema } from '../../src/gen/leoflow/v1/workflow_pb.js';
import { cli, startAgent, waitFor, type AgentProcess } from '../helpers/leoflow-process.js';
import { scriptedAgent } from '../helpers/scripted-agent.js';
import { connectedAgent, serverForFile } from '../helpers/server-fixture.js';

/**
 * Secret task variables end to end: the values reach the task's process (which writes them to a
 * file of its own, never to its log), while the DAG as GetDag/ListDags return it, the CLI, the
 * server's and the agent's logs and the whole database (events included) hold only references.
 * Lite's server resolves for its subprocess executor; an agent resolves on its own machine.
 */

// Random, so that a trace anywhere can only have come from the resolved value.
const SERVER_SECRET = `srv-${randomBytes(12).toString('hex')}`;
const FILE_SECRET = `file-${randomBytes(12).toString('hex')}`;
const AGENT_SECRET = `agt-${randomBytes(12).toString('hex')}`;
const VALUES = [SERVER_SECRET, FILE_SECRET, AGENT_SECRET];

const f = serverForFile({
  tmpPrefix: 'leoflow-secrets-',
  env: { E2E_DB_PASSWORD: SERVER_SECRET, E2E_AGENT_ONLY: undefined },
  args: ['--heartbeat-interval', '300ms', '--heartbeat-threshold', '5s', '--tick-interval', '200ms'],
});
let agent: AgentProcess;

beforeAll(async () => {
  await writeFile(path.join(f.tmp, 'api-key'), FILE_SECRET, { mode: 0o600 });
  // The agent has a secret the server does not, and lacks the server's.
  agent = await connectedAgent(f, 'secret-agent', {
    env: { E2E_AGENT_ONLY: AGENT_SECRET, E2E_DB_PASSWORD: undefined },
  });
}, 60_000);

afterAll(async () => {
  await agent?.stop(5000);
});

const writeTo = (out: string, ...vars: string[]) =>
  `["sh", "-c", "printf '%s|' ${vars.map((v) => `\\"$${v}\\"`).join(' ')} > ${out}; echo wrote ${vars.length} values"]`;

async function apply(name: string, yaml: string) {
  const file = path.join(f.tmp, `${name}.yaml`);
  await writeFile(file, yaml);
  return cli(f.server.url, ['dag', 'apply', file]);
}

async function trigger(dagId: string): Promise<{ runId: string; stdout: string }> {
  const r = await cli(f.server.url, ['run', 'trigger', dagId, '--wait'], { timeoutMs: 60_000 });
  const m = /^run (\d+) of /m.exec(r.stdout);
  if (!m) throw new Error(`no run id in: ${r.stdout}${r.stderr}`);
  return { runId: m[1]!, stdout: r.stdout + r.stderr };
}

function expectNoSecret(where: string, text: string): void {
  for (const v of VALUES) expect(text.includes(v), `${where} holds a secret value`).toBe(false);
}

describe('secret task variables', () => {
  it('gives the values to the task (Lite, server-resolved; an agent, agent-resolved) and shows only references', async () => {
    const outLite = path.join(f.tmp, 'lite.out');
    const outAgent = path.join(f.tmp, 'agent.out');
    const applied = await apply(
      'secrets',
      `dag_id: secrets
tasks:
  - id: lite
    command: ${writeTo(outLite, 'DB_PASSWORD', 'API_KEY')}
    env:
      PLAIN: visible
      DB_PASSWORD: { secret: { env: E2E_DB_PASSWORD } }
      API_KEY: { secret: { file: ${path.join(f.tmp, 'api-key')} } }
  - id: remote
    executor: agents
    command: ${writeTo(outAgent, 'TOKEN', 'API_KEY')}
    env:
      TOKEN: { secret: { env: E2E_AGENT_ONLY } }
      API_KEY: { secret: { file: ${path.join(f.tmp, 'api-key')} } }
`,
    );
    expect(applied.code, applied.stderr).toBe(0);
    const { runId, stdout } = await trigger('secrets');
    expect(stdout).toMatch(/lite\s+success/);
    expect(stdout).toMatch(/remote\s+success/);
    expect(await readFile(outLite, 'utf8')).toBe(`${SERVER_SECRET}|${FILE_SECRET}|`);
    expect(await readFile(outAgent, 'utf8')).toBe(`${AGENT_SECRET}|${FILE_SECRET}|`);

    const show = await cli(f.server.url, ['dag', 'show', 'secrets']);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('  DB_PASSWORD=<secret: env E2E_DB_PASSWORD>\n');
    expect(show.stdout).toContain(`  API_KEY=<secret: file ${path.join(f.tmp, 'api-key')}>\n`);
    expect(show.stdout).toContain('  PLAIN=visible\n');
    const json = await cli(f.server.url, ['dag', 'show', 'secrets', '-o', 'json']);
    expect(JSON.parse(json.stdout).tasks[0].secret_env).toEqual({
      DB_PASSWORD: { env: 'E2E_DB_PASSWORD' },
      API_KEY: { file: path.join(f.tmp, 'api-key') },
    });

    const texts: [string, string][] = [
      ['dag show', show.stdout + json.stdout],
      ['ListDags', toJsonString(ListDagsResponseSchema, await f.api.workflow.listDags({}))],
      ['run trigger --wait', stdout],
      ['run show', (await cli(f.server.url, ['run', 'show', runId, '-o', 'json'])).stdout],
      ['logs', (await cli(f.server.url, ['logs', runId])).stdout],
      ['the server log', JSON.stringify(f.server.logs) + f.server.stderr()],
      ['the agent log', agent.output()],
    ];
    for (const [where, text] of texts) expectNoSecret(where, text);
    expect(texts[4]![1]).toContain('wrote 2 values');
  }, 90_000);

  it('fails an attempt whose secret is missing, naming the variable, and retries it', async () => {
    const applied = await apply(
      'missing',
      `dag_id: missing
tasks:
  - id: needs
    retries: 1
    retry_delay: 1s
    command: [sh, -c, "echo should not run"]
    env:
      NOPE: { secret: { env: E2E_NOT_SET_ANYWHERE } }
`,
    );
    expect(applied.code, applied.stderr).toBe(0);
    const { runId } = await trigger('missing');
    const shown = JSON.parse((await cli(f.server.url, ['run', 'show', runId, '-o', 'json'])).stdout);
    const ti = shown.task_instances[0];
    expect(shown.state).toBe('failed');
    expect(ti.state).toBe('failed');
    expect(ti.try_number).toBe(2);
    expect(ti.error).toMatch(
      /secret NOPE \(env E2E_NOT_SET_ANYWHERE\): environment variable E2E_NOT_SET_ANYWHERE is not set where the task starts/,
    );
    const logs = (await cli(f.server.url, ['logs', runId])).stdout;
    expect(logs).toMatch(/secret NOPE \(env E2E_NOT_SET_ANYWHERE\)/);
    expect(logs).not.toContain('should not run');
  }, 60_000);

  it('never gives a task with secret variables to an agent that does not announce leoflow.secret-env: it waits saying why, then runs on one that does', async () => {
    // An agent built before Assign.secret_env: its Hello has no leoflow.secret-env capability.
    const old = scriptedAgent(f.server.url, { keepaliveMs: 300 });
    old.outbox.push({
      msg: {
        case: 'hello',
        value: {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_2,
          agentId: 'old-agent',
          labels: { pool: 'old' },
          slots: 2,
          incarnationId: randomUUID(),
        },
      },
    });
    let fresh: AgentProcess | null = null;
    try {
      expect((await old.inbox.next()).msg.case).toBe('welcome');
      const out = path.join(f.tmp, 'old-pool.out');
      const applied = await apply(
        'old-pool',
        `dag_id: old_pool
tasks:
  - id: plain
    executor: agents
    placement: { labels: { pool: old } }
    command: [echo, no secrets here]
  - id: secret
    executor: agents
    placement: { labels: { pool: old } }
    command: ${writeTo(out, 'TOKEN')}
    env:
      TOKEN: { secret: { env: E2E_AGENT_ONLY } }
`,
      );
      expect(applied.code, applied.stderr).toBe(0);
      const runId = (await f.api.workflow.triggerRun({ dagId: 'old_pool' })).run!.runId;
      // The old agent still gets work without secrets...
      const assign = await old.inbox.next(15_000);
      expect(assign.msg.case).toBe('assign');
      expect(assign.msg.case === 'assign' && assign.msg.value.taskId).toBe('plain');
      // ...but the task with a secret waits, saying why, and is never sent to it.
      await waitFor(
        'the secret task waiting with its reason',
        async () => {
          const [t] = await f.db.sql<
            { state: string; pending_reason: string | null }[]
          >`select state, pending_reason from task_instances where run_id = ${runId} and task_id = 'secret'`;
          return t?.state === 'scheduled' && t.pending_reason === 'NO_AGENT_WITH_SECRET_ENV:leoflow.secret-env';
        },
        15_000,
      );
      await expect(old.inbox.next(1500)).rejects.toThrow(/nothing received/);
      // An agent of this build announces the feature and runs it with its secret.
      fresh = startAgent(f.server.url, ['--id', 'new-agent', '--labels', 'pool=old'], {
        env: { E2E_AGENT_ONLY: AGENT_SECRET },
      });
      await waitFor(
        'the secret task over',
        async () => {
          const [t] = await f.db.sql<
            { state: string; agent_id: string | null }[]
          >`select state, agent_id from task_instances where run_id = ${runId} and task_id = 'secret'`;
          return t?.state === 'success' ? t : null;
        },
        30_000,
      ).then((t) => expect(t.agent_id).toBe('new-agent'));
      expect(await readFile(out, 'utf8')).toBe(`${AGENT_SECRET}|`);
    } finally {
      old.close();
      await old.done.catch(() => {});
      await fresh?.stop(5000);
    }
  }, 60_000);

  it('refuses a Kubernetes Secret on a task the server would run as a subprocess, at apply', async () => {
    const r = await apply(
      'kube-on-lite',
      `dag_id: kube_on_lite
tasks:
  - id: t
    command: [env]
    env:
      TOKEN: { secret: { kubernetes: { name: my-secret, key: token } } }
`,
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      "tasks[0].env.TOKEN.secret.kubernetes: a Kubernetes Secret (kubernetes my-secret/token) is only given to pods: it needs executor: kubernetes, and this task's executor is subprocess (the server's default)",
    );
  });

  it('stores no secret value anywhere in the database (events, DAG versions, logs)', async () => {
    // Every row of every table, as text: what a data dump holds, with no pg_dump of the server's
    // own version needed (the embedded Postgres ships none).
    const tables = await f.db.sql<{ name: string }[]>`
      select quote_ident(table_schema) || '.' || quote_ident(table_name) as name from information_schema.tables
      where table_schema = 'public' and table_type = 'BASE TABLE'`;
    let stdout = '';
    for (const t of tables)
      stdout += (await f.db.sql.unsafe<{ row: string }[]>(`select t::text as row from ${t.name} t`))
        .map((r) => r.row)
        .join('\n');
    expect(tables.length).toBeGreaterThan(5);
    expect(stdout).toContain('E2E_DB_PASSWORD');
    expectNoSecret('the database', stdout);
    expectNoSecret('the server log', JSON.stringify(f.server.logs) + f.server.stderr());
  });
});
