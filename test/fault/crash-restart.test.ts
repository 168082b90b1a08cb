import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { applyDagFile } from '../helpers/dag-file.js';
import { waitFor } from '../helpers/leoflow-process.js';
import { runsEnd } from '../helpers/runs-end.js';
import { replicasForFile } from '../helpers/server-fixture.js';

/**
 * The control plane is SIGKILLed in the middle of its work (runs being planned, attempts being
 * claimed, started and finished), three times in a row. After each restart it resumes from the
 * database alone. Every run finishes; no attempt is dispatched twice; an attempt is retried only
 * after it was positively declared lost (no heartbeat for the threshold).
 */

const f = replicasForFile({ tmpPrefix: 'leoflow-crash-' });
const start = f.launcher([
  ...['--tick-interval', '200ms', '--heartbeat-interval', '200ms', '--heartbeat-threshold', '1s'],
  ...['--dispatch-workers', '4', '--dispatch-queue', '16'],
]);

describe('control plane SIGKILLed mid-tick', () => {
  it('resumes from the database: every run finishes, no attempt runs twice', async () => {
    const ran = path.join(f.tmp, 'ran.log');
    const leaves = Array.from({ length: 8 }, (_, i) => [
      `  - id: leaf${i}`,
      `    command: ["sh", "-c", "echo $LEOFLOW_RUN_ID $LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER >> ${ran}; sleep 0.1"]`,
      `    depends_on: [root]`,
      `    retries: 3`,
      `    retry_delay: 100ms`,
    ]);
    let server = await start();
    await applyDagFile(server.url, f.tmp, {
      dagId: 'fan',
      tasks: [
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
      ],
    });
    const api = createClients(server.url);
    const runIds: string[] = [];
    for (let i = 0; i < 6; i++) runIds.push((await api.workflow.triggerRun({ dagId: 'fan' })).run!.runId);

    // Kill it three times while work is in flight, at different depths into the runs.
    for (const afterSuccesses of [3, 15, 30]) {
      await waitFor(
        `${afterSuccesses} TIs done`,
        async () => {
          const [r] = await f.db.sql<
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

    expect(await runsEnd(f.db.sql, runIds, 60_000)).toEqual(Array(6).fill('success'));

    const tis = await f.db.sql<{ id: string; task_id: string; try_number: number }[]>`
      select id, task_id, try_number from task_instances where run_id = any(${runIds}::bigint[])`;
    expect(tis).toHaveLength(6 * 10);
    for (const ti of tis) {
      const ev = await f.db.sql<{ to: string; try: number; reason: string | null }[]>`
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
