import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { EDITIONS } from '../helpers/editions.js';
import { cli, serverLauncher, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * Two replicas on one database; the leader is SIGKILLed mid-run. The standby must lead within one
 * watchdog period plus one tick, and every run must still complete: attempts the dead leader held
 * are declared lost after the heartbeat threshold and retried by the new leader. Against both
 * editions: Pro's 16 drainers put more attempts in flight when the leader dies than Lite's one.
 */

const WATCHDOG_MS = 1000;
const TICK_MS = 200;
const FLAGS = [
  '--leader-watchdog',
  `${WATCHDOG_MS}ms`,
  '--tick-interval',
  `${TICK_MS}ms`,
  '--heartbeat-interval',
  '200ms',
  '--heartbeat-threshold',
  '1s',
];

describe.each(EDITIONS)('leader failover ($edition)', ({ edition, flags }) => {
  let db: TestDatabase;
  let tmp: string;
  const servers: ServerProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-failover-'));
  });
  afterAll(async () => {
    for (const s of servers) await s.kill();
    await db?.drop();
    await rm(tmp, { recursive: true, force: true });
  });

  const start = serverLauncher({ databaseUrl: () => db.url, args: [...flags, ...FLAGS], servers });

  it('the standby leads within watchdog + tick after the leader is killed, and every run completes', async () => {
    const ran = path.join(tmp, 'ran.log');
    const file = path.join(tmp, 'work.yaml');
    const tasks = Array.from({ length: 6 }, (_, i) => [
      `  - id: t${i}`,
      `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 0.3"]`,
      `    retries: 2`,
      `    retry_delay: 100ms`,
      ...(i > 0 ? [`    depends_on: [t${i - 1}]`] : []),
    ]);
    await writeFile(file, ['dag_id: work', 'tasks:', ...tasks.flat(), ''].join('\n'));

    const a = await start(['--replica-id', 'replica-a']);
    const api = createClients(a.url);
    await waitFor('a leads', async () => (await api.cluster.getLeader({})).leaderId === 'replica-a');
    const b = await start(['--replica-id', 'replica-b']);
    const apiB = createClients(b.url);
    expect(await apiB.cluster.getLeader({})).toMatchObject({ leaderId: 'replica-a', edition });

    expect((await cli(b.url, ['dag', 'apply', file])).code).toBe(0);
    const runIds: string[] = [];
    for (let i = 0; i < 3; i++) runIds.push((await apiB.workflow.triggerRun({ dagId: 'work' })).run!.runId);
    // Let the leader get some work in flight, then kill it.
    await waitFor('work in flight', async () => {
      const [r] = await db.sql<{ n: number }[]>`select count(*)::int as n from task_instances where state = 'success'`;
      return r!.n >= 2;
    });
    await a.kill();
    const killedAt = Date.now();
    await waitFor('b leads', async () => (await apiB.cluster.getLeader({})).leaderId === 'replica-b', 10_000, 20);
    const takeoverMs = Date.now() - killedAt;
    expect(takeoverMs).toBeLessThan(WATCHDOG_MS + TICK_MS + 500);

    await waitFor(
      'all runs ended',
      async () => {
        const rows = await db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[])`;
        return rows.every((r) => r.state === 'success' || r.state === 'failed');
      },
      40_000,
    );
    const runs = await db.sql<
      { id: string; state: string }[]
    >`select id, state from dag_runs where id = any(${runIds}::bigint[]) order by id`;
    expect(runs.map((r) => r.state)).toEqual(['success', 'success', 'success']);

    // One claim per attempt (an attempt the dead leader claimed but never started is one too),
    // and a retry only where the attempt was declared lost.
    const tis = await db.sql<{ id: string; task_id: string; try_number: number }[]>`
      select id, task_id, try_number from task_instances where run_id = any(${runIds}::bigint[])`;
    for (const ti of tis) {
      const claims = await db.sql<{ n: number }[]>`
        select count(*)::int as n from events where ti_id = ${ti.id} and payload->>'to' = 'queued'`;
      expect(claims[0]!.n, `TI ${ti.id}`).toBe(ti.try_number);
      if (ti.try_number > 1) {
        const lost = await db.sql`select 1 from events where ti_id = ${ti.id} and payload->>'reason' = 'agent_lost'`;
        expect(lost.length, `TI ${ti.id} was retried without being declared lost`).toBe(ti.try_number - 1);
      }
    }
    // No attempt ran twice: each (run, task, try) appears at most once in what the tasks wrote.
    const lines = (await readFile(ran, 'utf8')).trim().split('\n');
    expect(new Set(lines).size).toBe(lines.length);
  });
});
