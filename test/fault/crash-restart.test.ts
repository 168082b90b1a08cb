import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { cli, serverLauncher, waitFor, type ServerProcess } from '../helpers/leoflow-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/test-database.js';

/**
 * The control plane is SIGKILLed in the middle of its work (runs being planned, attempts being
 * claimed, started and finished), three times in a row. After each restart it resumes from the
 * database alone. Every run finishes; no attempt is dispatched twice; an attempt is retried only
 * after it was positively declared lost (no heartbeat for the threshold).
 */

let db: TestDatabase;
let tmp: string;
const servers: ServerProcess[] = [];
const FLAGS = [
  '--tick-interval',
  '200ms',
  '--heartbeat-interval',
  '200ms',
  '--heartbeat-threshold',
  '1s',
  '--dispatch-workers',
  '4',
  '--dispatch-queue',
  '16',
];

beforeAll(async () => {
  db = await createTestDatabase();
  tmp = await mkdtemp(path.join(os.tmpdir(), 'leoflow-crash-'));
});
afterAll(async () => {
  for (const s of servers) await s.kill();
  await db?.drop();
  await rm(tmp, { recursive: true, force: true });
});

const start = serverLauncher({ databaseUrl: () => db.url, args: FLAGS, servers });

describe('control plane SIGKILLed mid-tick', () => {
  it('resumes from the database: every run finishes, no attempt runs twice', async () => {
    const ran = path.join(tmp, 'ran.log');
    const file = path.join(tmp, 'fan.yaml');
    const leaves = Array.from({ length: 8 }, (_, i) => [
      `  - id: leaf${i}`,
      `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 0.1"]`,
      `    depends_on: [root]`,
      `    retries: 3`,
      `    retry_delay: 100ms`,
    ]);
    await writeFile(
      file,
      [
        'dag_id: fan',
        'tasks:',
        '  - id: root',
        `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID root $LEOFLOW_TRY_NUMBER >> ${ran}"]`,
        '    retries: 3',
        '    retry_delay: 100ms',
        ...leaves.flat(),
        '  - id: join',
        `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID join $LEOFLOW_TRY_NUMBER >> ${ran}"]`,
        `    depends_on: [${leaves.map((_, i) => `leaf${i}`).join(', ')}]`,
        '    retries: 3',
        '    retry_delay: 100ms',
        '',
      ].join('\n'),
    );

    let server = await start();
    expect((await cli(server.url, ['dag', 'apply', file])).code).toBe(0);
    const api = createClients(server.url);
    const runIds: string[] = [];
    for (let i = 0; i < 6; i++) runIds.push((await api.workflow.triggerRun({ dagId: 'fan' })).run!.runId);

    // Kill it three times while work is in flight, at different depths into the runs.
    for (const afterSuccesses of [3, 15, 30]) {
      await waitFor(
        `${afterSuccesses} TIs done`,
        async () => {
          const [r] = await db.sql<
            { n: number }[]
          >`select count(*)::int as n from task_instances where state = 'success'`;
          return r!.n >= afterSuccesses;
        },
        30_000,
        5,
      );
      await server.kill();
      server = await start();
    }

    await waitFor(
      'all runs ended',
      async () => {
        const rows = await db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[])`;
        return rows.every((r) => r.state === 'success' || r.state === 'failed');
      },
      60_000,
    );
    const runs = await db.sql<{ state: string }[]>`select state from dag_runs where id = any(${runIds}::bigint[])`;
    expect(runs.map((r) => r.state)).toEqual(Array(6).fill('success'));

    const tis = await db.sql<{ id: string; task_id: string; try_number: number }[]>`
      select id, task_id, try_number from task_instances where run_id = any(${runIds}::bigint[])`;
    expect(tis).toHaveLength(6 * 10);
    for (const ti of tis) {
      const ev = await db.sql<{ to: string; try: number; reason: string | null }[]>`
        select payload->>'to' as to, (payload->>'try')::int as try, payload->>'reason' as reason
        from events where ti_id = ${ti.id} and kind = 'ti.state' order by seq`;
      // Each attempt claimed once: one 'queued' per try, numbered 1..try_number.
      expect(
        ev.filter((e) => e.to === 'queued').map((e) => e.try),
        `TI ${ti.id}`,
      ).toEqual(Array.from({ length: ti.try_number }, (_, i) => i + 1));
      // Every attempt before the last ended by being declared lost — never two live at once.
      for (let t = 1; t < ti.try_number; t++) {
        expect(
          ev.some((e) => e.try === t && e.reason === 'agent_lost'),
          `TI ${ti.id} try ${t} retried without being declared lost`,
        ).toBe(true);
      }
    }
    // What the tasks themselves saw: no attempt (run, task, try) executed twice.
    const lines = (await readFile(ran, 'utf8')).trim().split('\n');
    expect(new Set(lines).size).toBe(lines.length);
  });
});
