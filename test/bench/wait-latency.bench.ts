import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { createClients } from '../../src/cli/client.js';
import { TaskState } from '../../src/gen/leoflow/v1/types_pb.js';
import { startServer, waitFor } from '../helpers/leoflow-process.js';
import { createTestDatabase } from '../helpers/test-database.js';
import { percentile, report } from './report.js';

/**
 * wait-latency: on Lite with its defaults, from an event's arrival to its wait's end, to the
 * downstream task's claim and to its process started, read from the database's own clock (the
 * event's received_at, the wait row's ended_at, the downstream task's queued_at and started_at),
 * so the bench's polling adds nothing. RUNS runs,
 * one at a time: each waits, then gets its event.
 */

const RUNS = Number(process.env.LEOFLOW_BENCH_WAIT_RUNS ?? 40);

const DAG = `dag_id: w
tasks:
  - id: w
    wait: { event: go, match: { run: $conf.run }, timeout: 1h }
  - id: after
    depends_on: [w]
    command: ["true"]
`;

describe('wait-latency', () => {
  it('measures event → wait ended → downstream claimed → started', async () => {
    const db = await createTestDatabase();
    const s = await startServer({ env: { DATABASE_URL: db.url } });
    try {
      const api = createClients(s.url);
      await api.workflow.applyDag({ source: DAG, filename: 'w.yaml' });
      const loadBefore = os.loadavg();
      const ended: number[] = [];
      const claimed: number[] = [];
      const started: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const run = (await api.workflow.triggerRun({ dagId: 'w', confJson: JSON.stringify({ run: i }) })).run!;
        await waitFor(
          'the wait',
          async () =>
            (await api.workflow.getRun({ runId: run.runId })).taskInstances.find((t) => t.taskId === 'w')?.state ===
            TaskState.WAITING,
          30_000,
          5,
        );
        const sent = await api.workflow.sendEvent({ name: 'go', payloadJson: JSON.stringify({ run: i }) });
        expect(sent.waitsEnded).toBe(1);
        const [row] = await waitFor(
          'the downstream start',
          async () => {
            const rows = await db.sql<{ ended_ms: number; claimed_ms: number; started_ms: number }[]>`
              select extract(epoch from (w.ended_at - e.received_at)) * 1000 as ended_ms,
                     extract(epoch from (t.queued_at - e.received_at)) * 1000 as claimed_ms,
                     extract(epoch from (t.started_at - e.received_at)) * 1000 as started_ms
              from task_waits w join external_events e on e.id = w.event_id
              join task_instances t on t.run_id = w.run_id and t.task_id = 'after'
              where w.run_id = ${run.runId} and t.started_at is not null`;
            return rows.length > 0 ? rows : null;
          },
          30_000,
          5,
        );
        ended.push(Number(row!.ended_ms));
        claimed.push(Number(row!.claimed_ms));
        started.push(Number(row!.started_ms));
      }
      const rows = [
        {
          what: 'event → wait ended (one transaction: 0 by construction)',
          p50_ms: percentile(ended, 50),
          p99_ms: percentile(ended, 99),
        },
        { what: 'event → downstream claimed', p50_ms: percentile(claimed, 50), p99_ms: percentile(claimed, 99) },
        { what: 'event → downstream started', p50_ms: percentile(started, 50), p99_ms: percentile(started, 99) },
      ].map((r) => ({ ...r, p50_ms: Number(r.p50_ms.toFixed(1)), p99_ms: Number(r.p99_ms.toFixed(1)) }));
      await report('wait-latency', rows, { loadavgBefore: loadBefore, loadavgAfter: os.loadavg(), runs: RUNS });
    } finally {
      await s.stop();
      await db.drop();
    }
  });
});
